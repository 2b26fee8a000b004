"""Database sources: a credentials Secret, a headless Service and a StatefulSet per engine, run by
the direct runner (apply document by document, then wait until the StatefulSet is ready).

The password is the run's in-memory `password` input when given, else generated for this run. It
lives only in the cluster Secret (the StatefulSet reads it through secretKeyRef) and in this run's
memory; the handle scrubs it from everything the run writes.
"""

from dataclasses import dataclass, field
from secrets import token_urlsafe
from urllib.parse import quote

from engine.integrations.base import ENGINE_NAME
from engine.runners import direct
from engine.runners.context import RunContext, TaskHandle

PASSWORD_BYTES = 24
DATA_VOLUME_SIZE = "1Gi"
ENGINE_LABEL = f"{ENGINE_NAME}/database-engine"
#: The steps of a run, in order: the direct runner's, which renders, applies and verifies it.
STEPS = direct.STEPS


@dataclass(frozen=True)
class Engine:
    #: Image repository; the tag is the source's version or `default_version`.
    image: str
    default_version: str
    port: int
    data_path: str
    #: URI scheme of the connection string kept in the Secret.
    scheme: str
    username: str
    #: Container env name -> key of the credentials Secret.
    secret_env: dict
    plain_env: dict = field(default_factory=dict)
    args: tuple = ()


ENGINES: dict[str, Engine] = {
    "postgresql": Engine(
        image="postgres",
        default_version="17",
        port=5432,
        data_path="/var/lib/postgresql/data",
        scheme="postgresql",
        username="app",
        secret_env={
            "POSTGRES_USER": "username",
            "POSTGRES_PASSWORD": "password",
            "POSTGRES_DB": "database",
        },
        # A subdirectory: the volume's root may hold lost+found, which initdb refuses.
        plain_env={"PGDATA": "/var/lib/postgresql/data/pgdata"},
    ),
    "mysql": Engine(
        image="mysql",
        default_version="8.4",
        port=3306,
        data_path="/var/lib/mysql",
        scheme="mysql",
        username="app",
        secret_env={
            "MYSQL_USER": "username",
            "MYSQL_PASSWORD": "password",
            "MYSQL_ROOT_PASSWORD": "password",
            "MYSQL_DATABASE": "database",
        },
    ),
    "redis": Engine(
        image="redis",
        default_version="7.4",
        port=6379,
        data_path="/data",
        scheme="redis",
        username="default",
        secret_env={"REDIS_PASSWORD": "password"},
        # Kubernetes expands $(REDIS_PASSWORD) from the env: the value is never in the manifest.
        args=("--requirepass", "$(REDIS_PASSWORD)", "--appendonly", "yes"),
    ),
    "mongodb": Engine(
        image="mongo",
        default_version="8.0",
        port=27017,
        data_path="/data/db",
        scheme="mongodb",
        username="app",
        secret_env={
            "MONGO_INITDB_ROOT_USERNAME": "username",
            "MONGO_INITDB_ROOT_PASSWORD": "password",
            "MONGO_INITDB_DATABASE": "database",
        },
    ),
}


def run(handle: TaskHandle, ctx: RunContext) -> None:
    """The direct runner over this database's manifests, its password held only in memory."""
    if direct.blocked_on_recorded_secrets(handle, ctx):
        return  # a redeploy of a database whose password was given re-asks it, never rotates it
    password = ctx.inputs.get("password") or token_urlsafe(PASSWORD_BYTES)
    handle.add_secret_values([password, quote(password, safe="")])
    direct.apply_and_verify(handle, ctx, lambda c: render(c, password=password))


def render(ctx: RunContext, *, password: str) -> list[dict]:
    """Secret (credentials and a connection URI), headless Service, StatefulSet with a volume."""
    source = ctx.source
    engine = ENGINES[source["engine"]]
    name = source["name"]
    namespace = ctx.target_namespace
    version = source.get("version") or engine.default_version
    database = name.replace("-", "_")
    host = f"{name}.{namespace}.svc.cluster.local"
    secret_name = f"{name}-credentials"
    selector = {"app.kubernetes.io/name": name}
    labels = {
        **selector,
        "app.kubernetes.io/component": "database",
        "app.kubernetes.io/managed-by": direct.FIELD_MANAGER,
        ENGINE_LABEL: source["engine"],
    }

    def meta(object_name: str) -> dict:
        return {"name": object_name, "namespace": namespace, "labels": labels}

    container = {
        "name": source["engine"],
        "image": f"{engine.image}:{version}",
        "ports": [{"name": "db", "containerPort": engine.port}],
        "env": [
            {"name": env, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": key}}}
            for env, key in engine.secret_env.items()
        ]
        + [{"name": k, "value": v} for k, v in engine.plain_env.items()],
        "readinessProbe": {"tcpSocket": {"port": engine.port}, "periodSeconds": 5},
        "volumeMounts": [{"name": "data", "mountPath": engine.data_path}],
    }
    if engine.args:
        container["args"] = list(engine.args)
    return [
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": meta(secret_name),
            "type": "Opaque",
            "stringData": {
                "username": engine.username,
                "password": password,
                "database": database,
                "host": host,
                "port": str(engine.port),
                "uri": _uri(engine, password=password, host=host, database=database),
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": meta(name),
            "spec": {
                "clusterIP": "None",
                "selector": selector,
                "ports": [{"name": "db", "port": engine.port, "targetPort": engine.port}],
            },
        },
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": meta(name),
            "spec": {
                "serviceName": name,
                "replicas": 1,
                "selector": {"matchLabels": selector},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
                "volumeClaimTemplates": [
                    {
                        "metadata": {"name": "data"},
                        "spec": {
                            "accessModes": ["ReadWriteOnce"],
                            "resources": {"requests": {"storage": DATA_VOLUME_SIZE}},
                        },
                    }
                ],
            },
        },
    ]


def _uri(engine: Engine, *, password: str, host: str, database: str) -> str:
    secret = quote(password, safe="")
    if engine.scheme == "redis":
        return f"redis://:{secret}@{host}:{engine.port}/0"
    uri = f"{engine.scheme}://{engine.username}:{secret}@{host}:{engine.port}/{database}"
    return uri + "?authSource=admin" if engine.scheme == "mongodb" else uri
