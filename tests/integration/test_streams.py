"""The project SSE stream: bootstrap, upserts, removes, re-bootstrap, and across processes.

In-process tests serve the app with gevent's WSGIServer on loopback (the fake cluster lets them
hold a task where they want it); the cross-process test runs gunicorn with two gevent workers.
Every assertion is on frames a real HTTP client received.
"""

import gevent
import pytest
import requests
from gevent.pywsgi import WSGIServer
from prometheus_client import REGISTRY

from tests.helpers import IMAGE_SOURCE, EventStream, wait_for


@pytest.fixture
def serve():
    """Factory: serve an app in this process on loopback; its base URL. Stopped after the test."""
    servers, streams = [], []

    def factory(app):
        server = WSGIServer(("127.0.0.1", 0), app, log=None)
        server.start()
        servers.append((server, app))
        return f"http://127.0.0.1:{server.server_port}"

    def stream(base, project="demo"):
        opened = EventStream(base, project)
        streams.append(opened)
        return opened

    factory.stream = stream
    yield factory
    for opened in streams:
        opened.close()
    for server, app in servers:
        app.extensions["engine"].shutdown()  # closes the streams server-side, as SIGTERM does
        server.stop(timeout=5)


def create(base, project="demo") -> str:
    response = requests.post(
        base + "/api/v1/tasks", timeout=10, json={"projectId": project, "source": IMAGE_SOURCE}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


STATUS_ORDER = ["queued", "running", "applying", "completed"]


def test_bootstrap_then_upserts_until_completed(make_app, cluster, serve, insert_task):
    cluster.ready_after_polls = "never"  # hold the run in verify until the test says so
    earlier = insert_task(status="completed", project_id="demo")
    insert_task(status="completed", project_id="elsewhere")
    insert_task(status="completed", project_id="demo", workspace="other-team")
    base = serve(make_app())
    stream = serve.stream(base)

    event, data = stream.next()
    assert event == "snapshot"
    assert [i["id"] for i in data["items"]] == [str(earlier["id"])]

    elsewhere = create(base, project="elsewhere")
    task_id = create(base)
    frames = stream.until(
        lambda e, d: e == "upsert" and d["id"] == task_id and d["phase"] == "verify"
    )
    cluster.ready_after_polls = None
    frames += stream.until(
        lambda e, d: e == "upsert" and d["id"] == task_id and d["status"] == "completed"
    )

    assert all(d.get("id") != elsewhere for _, d in frames), "another project's task leaked"
    mine = [d for e, d in frames if e == "upsert" and d["id"] == task_id]
    statuses = [d["status"] for d in mine]
    assert statuses == sorted(statuses, key=STATUS_ORDER.index), statuses
    assert {"running", "applying", "completed"} <= set(statuses)
    final = mine[-1]
    assert (final["active"], final["projectId"], final["title"]) == (False, "demo", "web")
    assert [r["kind"] for r in final["appliedResources"]] == ["Deployment", "Service"]


def test_a_row_that_disappears_is_a_remove(make_app, serve, insert_task, sql_conn):
    task = insert_task(status="failed", project_id="demo")
    base = serve(make_app())
    stream = serve.stream(base)
    assert [i["id"] for i in stream.next()[1]["items"]] == [str(task["id"])]

    # What the retention purge does: delete the row, and notify its ids.
    sql_conn.execute(
        "WITH gone AS (DELETE FROM deploy_tasks WHERE id = %s RETURNING workspace, project_id, id) "
        "SELECT pg_notify('deploy_tasks', json_build_object("
        "'workspace', workspace, 'project', project_id, 'task', id)::text) FROM gone",
        (task["id"],),
    )
    assert stream.next() == ("remove", {"id": str(task["id"])})


def test_a_listener_reconnect_rebootstraps_the_stream(make_app, serve, insert_task, sql_conn):
    app = make_app()
    base = serve(app)
    stream = serve.stream(base)
    assert stream.next() == ("snapshot", {"items": []})
    runtime = app.extensions["engine"]

    # A change nobody is notified of, as if it had happened while the listener was away.
    unseen = insert_task(status="failed", project_id="demo")
    killed = sql_conn.execute(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
        "WHERE datname = current_database() AND query = 'LISTEN deploy_tasks'"
    ).fetchall()
    assert [r["ok"] for r in killed] == [True]

    event, data = stream.next()
    assert event == "snapshot"
    assert [i["id"] for i in data["items"]] == [str(unseen["id"])]
    wait_for(runtime.listener.connected.is_set, message="the listener to reconnect")
    # And the stream is live again.
    task_id = create(base)
    stream.until(lambda e, d: e == "upsert" and d["id"] == task_id)


def test_a_re_read_that_fails_keeps_the_stream_and_the_next_snapshot_has_the_change(
    make_app, serve, insert_task, sql_conn
):
    # No retry budget: the statement on a dead connection fails at once (with one, engine/db.py
    # would retry it and the stream would never see the failure this test is about).
    # Nothing else may use the pool between the kill and the re-read: it would meet the dead
    # connections first and the pool would replace them (a cleanup tick did so under load). The
    # cleanup worker never ticks here, and the listener's one probe (sent once it connects,
    # then every 30 s) has come back before the kill.
    def probes_back() -> float:
        return REGISTRY.get_sample_value("deploy_notify_lag_seconds_count") or 0.0

    before = probes_back()
    base = serve(make_app(db_retry_budget_s=0.0, cleanup_interval_s=3600.0))
    stream = serve.stream(base)
    assert stream.next() == ("snapshot", {"items": []})
    wait_for(lambda: probes_back() > before, message="the listener's probe to come back")

    # The pool's connections die (as behind a failover or a cut link); the stream's re-read of
    # the next change then fails on one of them.
    killed = sql_conn.execute(
        "SELECT pg_terminate_backend(pid) AS ok FROM pg_stat_activity "
        "WHERE datname = current_database() AND pid <> pg_backend_pid() "
        "AND query <> 'LISTEN deploy_tasks'"
    ).fetchall()
    assert killed and all(r["ok"] for r in killed)  # the control: there were some to kill
    task = insert_task(status="failed", project_id="demo")
    sql_conn.execute(
        "SELECT pg_notify('deploy_tasks', json_build_object("
        "'workspace', 'default', 'project', 'demo', 'task', %s::text)::text)",
        (str(task["id"]),),
    )
    event, data = stream.next()
    assert event == "snapshot"
    assert [i["id"] for i in data["items"]] == [str(task["id"])]


def test_a_stream_sees_tasks_another_worker_runs(start_server):
    """Gunicorn, two gevent workers: the stream is served by one, the task run by the other."""
    server = start_server(
        "gunicorn",
        workers=2,
        env={
            "SANDBOX_APPLY_DELAY_S": "0.05",
            "SANDBOX_READY_DELAY_S": "0.3",
            "READINESS_POLL_S": "0.1",
        },
    )
    stream = EventStream(server.base)
    try:
        assert stream.next()[0] == "snapshot"
        other = None
        for _ in range(15):  # fresh connections, a few at a time, until the other worker takes one
            batch = [
                gevent.spawn(
                    requests.post,
                    server.base + "/api/v1/tasks",
                    timeout=10,
                    json={"projectId": "demo", "source": IMAGE_SOURCE},
                )
                for _ in range(4)
            ]
            gevent.joinall(batch, raise_error=True)
            for done in batch:
                assert done.value.status_code == 201, done.value.text
                if done.value.headers["X-Served-By"] != stream.served_by:
                    other = done.value.json()["id"]
            if other:
                break
        assert other, "no create was handled by the other worker"
        frames = stream.until(
            lambda e, d: e == "upsert" and d["id"] == other and d["status"] == "completed",
            timeout=60,
        )
        seen = [d["status"] for e, d in frames if e == "upsert" and d["id"] == other]
        assert seen[-1] == "completed"
    finally:
        stream.close()
