"""The operator's HTTP side: /metrics, /healthz, /readyz, request ids, the streaks API and page."""

import logging

import psycopg
import pytest
from psycopg import sql

from engine.operations.logs import ContextFilter, JsonFormatter
from tests.helpers import scrape, total, wait_for


def test_metrics_parse_and_move_when_a_task_runs(client, create_task, wait_status, cluster):
    before = scrape(client)
    cluster.ready_after_polls = "never"
    stuck = create_task(project_id="metrics")
    during = scrape(client)
    assert total(during, "deploy_tasks", status="running", source_kind="image") == 1
    assert total(during, "deploy_leases_held") == total(before, "deploy_leases_held") + 1
    cluster.ready_after_polls = None
    wait_status(stuck["id"], "completed")
    # The runner records the metric right after its write: the row can be read a moment earlier.
    after = wait_for(
        lambda: (
            (s := scrape(client))
            and total(s, "deploy_task_duration_seconds_count", outcome="completed")
            > total(before, "deploy_task_duration_seconds_count", outcome="completed")
            and s
        ),
        message="the outcome counted",
    )

    assert (
        total(after, "deploy_task_transitions_total")
        >= total(before, "deploy_task_transitions_total") + 2
    )  # claimed, then completed
    assert (
        total(after, "deploy_task_duration_seconds_count", outcome="completed")
        == total(before, "deploy_task_duration_seconds_count", outcome="completed") + 1
    )
    assert (
        total(after, "deploy_action_duration_seconds_count", action="create")
        == total(before, "deploy_action_duration_seconds_count", action="create") + 1
    )
    assert total(
        after,
        "deploy_integration_call_duration_seconds_count",
        integration="cluster",
        operation="apply",
    ) > total(
        before,
        "deploy_integration_call_duration_seconds_count",
        integration="cluster",
        operation="apply",
    )
    assert total(after, "deploy_tasks", status="running") == 0
    # Labels are bounded: no task id and no project anywhere.
    assert not any(
        stuck["id"] in str(labels) or "metrics" in dict(labels).values() for _, labels in after
    )


def test_metrics_token_is_required_when_configured(make_app):
    client = make_app(metrics_token="scrape-me-0123456789").test_client()
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers={"Authorization": "Bearer wrong"}).status_code == 401
    assert scrape(client, Authorization="Bearer scrape-me-0123456789")


def test_metrics_port_serves_metrics_only_there(make_app):
    client = make_app(metrics_port=9464).test_client()
    assert client.get("/metrics").status_code == 404
    response = client.get("/metrics", environ_overrides={"SERVER_PORT": "9464"})
    assert response.status_code == 200 and b"deploy_task_transitions" in response.data


def test_readyz_is_503_while_draining(client, runtime):
    assert wait_for(lambda: client.get("/readyz").status_code == 200, message="ready")
    assert client.get("/readyz").get_json() == {"ready": True}
    runtime.shutdown()
    response = client.get("/readyz")
    assert response.status_code == 503 and response.get_json() == {
        "ready": False,
        "reason": "draining",
    }
    assert client.get("/healthz").status_code == 200  # alive, just not taking traffic


@pytest.fixture
def cut_database(database_url, pg_admin_url):
    """Make the test database refuse connections and drop every open one; restore after."""
    name = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]

    def set_allowed(allowed: bool):
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(
                sql.SQL("ALTER DATABASE {} ALLOW_CONNECTIONS {}").format(
                    sql.Identifier(name), sql.Literal(allowed)
                )
            )
            if not allowed:
                conn.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )

    yield set_allowed
    set_allowed(True)


def test_readyz_is_503_when_the_database_is_unreachable(make_app, cut_database):
    client = make_app(ready_probe_db_timeout_s=1.0).test_client()
    assert wait_for(lambda: client.get("/readyz").status_code == 200, message="ready")
    cut_database(False)
    response = wait_for(
        lambda: (r := client.get("/readyz")).status_code == 503 and r, message="not ready"
    )
    assert response.get_json()["reason"].startswith("database unavailable")
    assert client.get("/healthz").status_code == 200  # never asks the database
    cut_database(True)
    assert wait_for(
        lambda: client.get("/readyz").status_code == 200, timeout=20, message="ready again"
    )


def test_every_response_carries_a_request_id_and_well_formed_ones_are_kept(client):
    generated = client.get("/healthz").headers["X-Request-Id"]
    assert len(generated) == 32
    assert (
        client.get("/api/v1/tasks", headers={"X-Request-Id": "req-42.a:b"}).headers["X-Request-Id"]
        == "req-42.a:b"
    )
    for bad in ("has space", "x" * 200, "<script>", "é"):
        echoed = client.get("/healthz", headers={"X-Request-Id": bad}).headers["X-Request-Id"]
        assert echoed != bad and len(echoed) == 32
    assert client.get("/nope", headers={"X-Request-Id": "r-404"}).headers["X-Request-Id"] == "r-404"


def test_log_lines_of_a_request_carry_its_request_id_as_json(client, create_task, caplog, cluster):
    cluster.ready_after_polls = "never"
    task = create_task(project_id="logs")
    caplog.set_level(logging.INFO)
    caplog.handler.addFilter(ContextFilter())
    client.post(f"/api/v1/tasks/{task['id']}/cancel", headers={"X-Request-Id": "cancel-req-1"})
    import json

    lines = [json.loads(JsonFormatter().format(r)) for r in caplog.records]
    mine = [line for line in lines if line.get("request_id") == "cancel-req-1"]
    assert mine, lines
    assert {"time", "level", "logger", "message"} <= set(mine[0])
    assert any(line.get("task_id") == task["id"] for line in lines)


def test_admin_streaks_and_health_page_show_current_streaks(client, runtime, sql_conn):
    assert client.get("/api/v1/admin/streaks").get_json() == {"items": []}
    assert "Nothing is failing" in client.get("/health").get_data(as_text=True)
    for _ in range(3):
        runtime.streaks.failed("integration:gateway", "HTTP 502 from the gateway")
    items = client.get("/api/v1/admin/streaks").get_json()["items"]
    assert [
        (i["subject"], i["consecutiveFailures"], i["lastError"], i["persistent"]) for i in items
    ] == [("integration:gateway", 3, "HTTP 502 from the gateway", False)]
    page = client.get("/health").get_data(as_text=True)
    assert "integration:gateway" in page and "HTTP 502 from the gateway" in page


def test_operator_routes_need_an_admin_outside_dev_mode(app, client, runtime):
    from dataclasses import replace

    from engine.lifecycle.identity import Identity

    runtime.settings = replace(runtime.settings, auth_mode="oidc", admin_users="alice, bob")

    @app.before_request
    def as_user():
        from flask import g, request

        g.identity = Identity(
            user=request.headers.get("X-Test-User", "mallory"), workspace="default"
        )

    assert client.get("/api/v1/admin/streaks", headers={"X-Test-User": "bob"}).status_code == 200
    response = client.get("/api/v1/admin/streaks")
    assert response.status_code == 403 and response.get_json()["code"] == "operator_only"
    assert client.get("/health").status_code == 403
    assert client.get("/healthz").status_code == 200
    assert wait_for(lambda: client.get("/readyz").status_code == 200, message="ready")
