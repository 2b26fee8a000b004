"""Database sources end to end through the HTTP API: per-engine manifests (credentials Secret,
headless Service, StatefulSet reading the Secret), readiness decided by the StatefulSet, and a
generated password that exists only in the cluster Secret."""

import pytest

from tests.helpers import applied_manifests, create, dump_database, wait_for_status
from tests.helpers import secret_forms as forms

ENGINES = {
    # engine: (image of the default version, port, a container env read from the Secret)
    "postgresql": ("postgres:17", 5432, "POSTGRES_PASSWORD"),
    "mysql": ("mysql:8.4", 3306, "MYSQL_ROOT_PASSWORD"),
    "redis": ("redis:7.4", 6379, "REDIS_PASSWORD"),
    "mongodb": ("mongo:8.0", 27017, "MONGO_INITDB_ROOT_PASSWORD"),
}


def database(engine="postgresql", name="orders", **extra) -> dict:
    return {"kind": "database", "engine": engine, "name": name, **extra}


@pytest.mark.parametrize("engine", sorted(ENGINES))
def test_each_engine_deploys_to_completed_with_its_password_only_in_the_cluster_secret(
    client, cluster, sql_conn, engine
):
    image, port, password_env = ENGINES[engine]
    task = create(client, database(engine))
    assert task["runner"] == "direct"
    snap = wait_for_status(client, task["id"], "completed", "failed")
    assert snap["status"] == "completed", snap["failure"]
    assert cluster.applied() == [
        "Secret/orders-credentials",
        "Service/orders",
        "StatefulSet/orders",
    ]
    secret, service, statefulset = applied_manifests(cluster)
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["ports"][0]["port"] == port
    assert statefulset["spec"]["serviceName"] == "orders"
    container = statefulset["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == image
    assert container["ports"][0]["containerPort"] == port
    env = {e["name"]: e for e in container["env"]}
    assert env[password_env]["valueFrom"]["secretKeyRef"] == {
        "name": "orders-credentials",
        "key": "password",
    }
    password = secret["stringData"]["password"]
    assert len(password) >= 24 and password in secret["stringData"]["uri"]
    assert password not in repr([service, statefulset])
    dump = dump_database(sql_conn)
    assert all(form not in dump for form in forms(password))
    # Readiness is the StatefulSet's.
    assert [c.ref.label() for c in cluster.calls if c.op == "readiness"] == ["StatefulSet/orders"]


def test_every_run_generates_its_own_password(client, cluster):
    for name in ("one", "two"):
        wait_for_status(client, create(client, database(name=name))["id"], "completed")
    first, second = (m["stringData"]["password"] for m in applied_manifests(cluster, "Secret"))
    assert first != second


def test_a_version_picks_the_image_tag_and_a_given_password_is_used_not_persisted(
    client, cluster, sql_conn
):
    given = "given-db-password-0451"
    task = create(
        client, database("postgresql", name="billing", version="16.4"), inputs={"password": given}
    )
    assert wait_for_status(client, task["id"], "completed", "failed")["status"] == "completed"
    secret = applied_manifests(cluster, "Secret")[0]
    statefulset = applied_manifests(cluster, "StatefulSet")[0]
    assert statefulset["spec"]["template"]["spec"]["containers"][0]["image"] == "postgres:16.4"
    assert secret["stringData"]["password"] == given
    assert secret["stringData"]["uri"] == (
        f"postgresql://app:{given}@billing.demo.svc.cluster.local:5432/billing"
    )
    assert all(form not in dump_database(sql_conn) for form in forms(given))


def test_a_redeploy_re_asks_a_given_password_instead_of_rotating_it(client, cluster):
    cluster.fail_kinds = {"StatefulSet"}
    first = create(client, database(name="ledger"), inputs={"password": "given-pw-1234567"})
    assert wait_for_status(client, first["id"], "failed")["sensitiveKeys"] == ["password"]
    cluster.fail_kinds = set()
    clone = client.post("/api/v1/tasks", json={"predecessorTaskId": first["id"]}).get_json()
    blocked = wait_for_status(client, clone["id"], "blocked")
    assert [i["name"] for i in blocked["pendingInputs"]] == ["password"]
    client.post(
        f"/api/v1/tasks/{clone['id']}/input", json={"inputs": {"password": "given-pw-1234567"}}
    )
    wait_for_status(client, clone["id"], "completed")
    assert applied_manifests(cluster, "Secret")[-1]["stringData"]["password"] == "given-pw-1234567"


def test_a_statefulset_that_never_gets_ready_fails_with_the_resources_kept(make_app, cluster):
    client = make_app(readiness_timeout_s=0.2).test_client()
    cluster.ready_after_polls = "never"
    snap = wait_for_status(client, create(client, database("redis"))["id"], "failed", "completed")
    assert snap["failure"]["reason"] == "readiness_timeout"
    assert "StatefulSet/orders" in snap["failure"]["message"]
    assert len(snap["appliedResources"]) == 3 and cluster.deletes() == []


def test_a_database_deploys_to_completed_on_the_sandbox(sandbox_client):
    client, sandbox = sandbox_client
    snap = wait_for_status(
        client, create(client, database("mongodb", name="catalog"))["id"], "completed", "failed"
    )
    assert snap["status"] == "completed", snap["failure"]
    assert {ref.label() for ref in sandbox.objects} == {
        "Secret/catalog-credentials",
        "Service/catalog",
        "StatefulSet/catalog",
    }


@pytest.mark.parametrize(
    "source,field",
    [
        (database("oracle"), "engine"),
        (database(name="Not_A_Name"), "name"),
        (database(name="x" * 53), "name"),
        (database(version="17; rm -rf /"), "version"),
        ({"kind": "database", "engine": "redis"}, "name"),
    ],
)
def test_invalid_database_sources_are_400(client, source, field):
    response = client.post("/api/v1/tasks", json={"projectId": "demo", "source": source})
    assert response.status_code == 400
    assert field in response.get_json()["fields"]["source"]
