"""The engine through its database's own faults (issue 25, item 1): a PostgreSQL restart, a link
that drops every connection for a while, an ambiguous commit, an outage longer than the lease,
and requests while the database is away.

Each test runs on a PostgreSQL server of its own (tests/helpers.py PrivatePostgres), restarted
or cut off behind a proxy (tests/proxy.py) without disturbing any other test.
"""

import time
import uuid

import psycopg
import pytest
from psycopg.rows import dict_row

from engine.abort import AbortSignal
from engine.core.handle import FencedHandle
from engine.core.status import Status
from engine.db import Database
from engine.maintenance.listener import REBOOTSTRAP
from tests.helpers import IMAGE_SOURCE, PrivatePostgres, wait_for
from tests.proxy import FaultyLink

RUNS = 30
#: A run of the fake cluster's image source: created, running, applying, completed, and its
#: steps (render, two applies, verify), each once.
EXPECTED_STEPS = (
    [("render", "started"), ("render", "done")]
    + [
        ("apply", "started"),
        ("apply", "done"),
    ]
    * 2
    + [("verify", "started"), ("verify", "done")]
)


@pytest.fixture
def private_pg():
    pg = PrivatePostgres()
    yield pg
    pg.destroy()


@pytest.fixture
def database_url(private_pg):
    """This module's database lives on the test's own server (make_app and sql_conn use it)."""
    return private_pg.create_database("engine")


@pytest.fixture
def link(private_pg):
    faulty = FaultyLink(private_pg.socket_path)
    yield faulty
    faulty.close()


def rows(database_url, query, *params) -> list[dict]:
    """Read with a connection of its own (a restart ends every older session)."""
    with psycopg.connect(database_url, row_factory=dict_row) as conn:
        return conn.execute(query, params).fetchall()


def statuses(database_url, ids) -> dict[str, int]:
    counted = rows(
        database_url,
        "SELECT status::text AS s, count(*) AS n FROM deploy_tasks WHERE id = ANY(%s) GROUP BY 1",
        [uuid.UUID(i) for i in ids],
    )
    return {r["s"]: r["n"] for r in counted}


def start_runs(client, cluster, database_url) -> list[str]:
    """RUNS deployments, all parked polling their workload's readiness (in flight)."""
    cluster.ready_after_polls = "never"
    ids = []
    for i in range(RUNS):
        response = client.post(
            "/api/v1/tasks",
            json={"projectId": "demo", "source": {**IMAGE_SOURCE, "name": f"web-{i}"}},
        )
        assert response.status_code == 201, response.get_json()
        ids.append(response.get_json()["id"])
    wait_for(
        lambda: statuses(database_url, ids) == {"applying": RUNS},
        60,
        message="every run to be in flight (applying)",
    )
    return ids


def assert_every_event_once(database_url, ids) -> None:
    for task_id in ids:
        events = rows(
            database_url,
            "SELECT kind, payload FROM deploy_task_events WHERE task_id = %s ORDER BY seq",
            uuid.UUID(task_id),
        )
        moves = [e["payload"]["to"] for e in events if e["kind"] == "status"]
        steps = [
            (e["payload"]["step"], e["payload"]["state"]) for e in events if "step" == e["kind"]
        ]
        assert [e["kind"] for e in events].count("created") == 1, task_id
        assert moves == ["running", "applying", "completed"], (task_id, moves)
        assert steps == EXPECTED_STEPS, (task_id, steps)
        assert len(events) == 1 + 3 + len(EXPECTED_STEPS), task_id


def complete_through(fault, client, cluster, database_url, ids) -> None:
    """Let every run complete, and start `fault` as the first one does: the others are
    writing their last steps and moves when it hits."""
    cluster.ready_after_polls = None
    wait_for(
        lambda: statuses(database_url, ids).get("completed"),
        60,
        message="the first run to complete",
    )
    fault()
    wait_for(
        lambda: statuses(database_url, ids) == {"completed": RUNS},
        120,
        message=f"all runs to complete; now {statuses(database_url, ids)}",
    )


FAST = dict(lease_ttl_s=30.0, lease_renew_interval_s=0.5, reaper_interval_s=0.5)


def test_a_postgresql_restart_fails_no_run(private_pg, make_app, cluster, database_url):
    app = make_app(**FAST)
    client, runtime = app.test_client(), app.extensions["engine"]
    viewer = runtime.listener.subscribe(project="demo")
    ids = start_runs(client, cluster, database_url)
    complete_through(private_pg.restart, client, cluster, database_url, ids)
    assert statuses(database_url, ids) == {"completed": RUNS}
    assert_every_event_once(database_url, ids)
    # The listener came back, and told its subscribers to read afresh (what a stream resumes
    # from: notifications of the gap are lost).
    wait_for(runtime.listener.connected.is_set, 30, message="the listener to reconnect")
    wait_for(lambda: viewer.get(timeout=1) == REBOOTSTRAP, 30, message="a re-bootstrap")
    viewer.close()


def test_a_link_dropped_for_two_seconds_fails_no_run(link, make_app, cluster, database_url):
    app = make_app(database_url=link.url("engine"), **FAST)
    client = app.test_client()
    ids = start_runs(client, cluster, database_url)
    complete_through(lambda: link.cut_for(2.0), client, cluster, database_url, ids)
    assert statuses(database_url, ids) == {"completed": RUNS}
    assert_every_event_once(database_url, ids)


def test_an_ambiguous_commit_sent_again_changes_nothing(link, insert_task, sql_conn):
    """The connection dies after the server committed and before the reply arrives: the engine
    sends the statement again, and the second attempt must not add to the first."""
    db = Database(link.url("engine"), max_size=2, retry_budget_s=30)
    db.open()
    try:
        task = insert_task(status="applying", lease_owner="me", lease_epoch=1)
        handle = FencedHandle(
            db,
            task["id"],
            epoch=1,
            owner="me",
            abort=AbortSignal(),
            lease_deadline=time.monotonic() + 30,
        )
        link.lose_next_reply()
        handle.emit_event("step", {"step": "verify", "state": "started"})
        assert link.lost_replies == 1  # the control: the first attempt's reply was lost
        link.lose_next_reply()
        handle.complete()  # its first attempt moved the task; the second finds its own move
        assert link.lost_replies == 2
        assert handle.outcome is Status.COMPLETED
        events = sql_conn.execute(
            "SELECT kind, payload->>'to' AS moved_to FROM deploy_task_events "
            "WHERE task_id = %s ORDER BY seq",
            (task["id"],),
        ).fetchall()
        assert [(e["kind"], e["moved_to"]) for e in events] == [
            ("step", None),
            ("status", "completed"),
        ]
    finally:
        db.close()


def test_an_outage_longer_than_the_lease_ends_the_runs_interrupted(
    link, make_app, cluster, database_url
):
    app = make_app(
        database_url=link.url("engine"),
        lease_ttl_s=2.0,
        lease_renew_interval_s=0.5,
        reaper_interval_s=0.3,
        db_retry_budget_s=0.5,
        ready_probe_db_timeout_s=0.3,
    )
    client, runtime = app.test_client(), app.extensions["engine"]
    ids = start_runs(client, cluster, database_url)
    link.cut()
    # Past its lease no run writes: each stops as if its lease were lost.
    wait_for(lambda: not runtime.runs, 60, message="every run to stop once its lease expired")
    cluster.ready_after_polls = None  # a run still going would complete now
    link.mend()
    wait_for(
        lambda: statuses(database_url, ids) == {"failed": RUNS},
        60,
        message=f"the reaper to resolve every run; now {statuses(database_url, ids)}",
    )
    reasons = rows(
        database_url,
        "SELECT failure_reason, count(*) AS n FROM deploy_tasks WHERE id = ANY(%s) GROUP BY 1",
        [uuid.UUID(i) for i in ids],
    )
    assert reasons == [{"failure_reason": "interrupted", "n": RUNS}]
    verified = rows(
        database_url,
        "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = ANY(%s) AND kind = 'step' "
        "AND payload->>'step' = 'verify' AND payload->>'state' = 'done'",
        [uuid.UUID(i) for i in ids],
    )
    assert verified == [{"n": 0}]


def test_requests_during_an_outage_answer_503_with_retry_after(
    link, make_app, cluster, database_url
):
    app = make_app(
        database_url=link.url("engine"), db_retry_budget_s=0.5, ready_probe_db_timeout_s=0.3
    )
    client = app.test_client()
    cluster.ready_after_polls = "never"
    task = client.post("/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE})
    assert task.status_code == 201
    task_id = task.get_json()["id"]
    asked = [
        ("GET", "/api/v1/tasks", None, {}),
        ("GET", f"/api/v1/tasks/{task_id}", None, {}),
        ("GET", f"/api/v1/tasks/{task_id}/events", None, {}),
        ("POST", "/api/v1/tasks", {"projectId": "demo", "source": IMAGE_SOURCE}, {}),
        (
            "POST",
            "/api/v1/tasks",
            {"projectId": "demo", "source": IMAGE_SOURCE},
            {"Idempotency-Key": str(uuid.uuid4())},
        ),
        ("POST", f"/api/v1/tasks/{task_id}/cancel", None, {}),
        ("GET", "/projects/demo", None, {}),
        ("GET", "/readyz", None, {}),
    ]

    def answers():
        return {
            (method, path): client.open(path, method=method, json=body, headers=headers)
            for method, path, body, headers in asked
        }

    link.cut()
    try:
        during = answers()
    finally:
        link.mend()
    for (method, path), response in during.items():
        assert response.status_code == 503, (method, path, response.status_code)
        assert int(response.headers["Retry-After"]) > 0, (method, path)
        if path.startswith("/api/"):
            assert response.get_json()["code"] == "database_unavailable", (method, path)
    assert "database" in during[("GET", "/readyz")].get_json()["reason"]
    # The control: with the database back, the same requests are served again.
    wait_for(
        lambda: client.get("/readyz").status_code == 200, 30, message="ready again after the outage"
    )
    after = answers()
    assert all(r.status_code < 500 for r in after.values()), {
        k: r.status_code for k, r in after.items()
    }
