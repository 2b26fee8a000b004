"""The drain and launching are atomic: a create is refused with 503, or its run is aborted and
waited for by the drain; no run launched around a SIGTERM keeps writing after it."""

import threading
from contextlib import contextmanager

import gevent
import psycopg
from psycopg.rows import dict_row

from tests.helpers import IMAGE_SOURCE, late_events, recorded_steps, wait_for

BODY = {"projectId": "demo", "source": dict(IMAGE_SOURCE)}


def blocked_on_lock(sql_conn, statement: str) -> bool:
    return bool(
        sql_conn.execute(
            "SELECT 1 FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE %s",
            (f"%{statement}%",),
        ).fetchone()
    )


@contextmanager
def create_held_at_its_insert(client, database_url, sql_conn):
    """(holder, greenlet of the create): a create held between admission and its insert (the
    moment SIGTERM can arrive) by `holder`'s lock, until holder rolls back."""
    with psycopg.connect(database_url, autocommit=True, row_factory=dict_row) as holder:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE deploy_tasks IN SHARE MODE")
        early = gevent.spawn(client.post, "/api/v1/tasks", json=BODY)
        wait_for(
            lambda: blocked_on_lock(sql_conn, "INSERT INTO deploy_tasks"),
            message="the create to reach its insert",
        )
        yield holder, early


def test_a_create_admitted_before_the_drain_is_aborted_and_waited_for(
    client, runtime, database_url, sql_conn
):
    with create_held_at_its_insert(client, database_url, sql_conn) as (holder, early):
        drain = gevent.spawn(runtime.shutdown)
        wait_for(lambda: not runtime.accepting, message="the drain to begin")
        late = client.post("/api/v1/tasks", json=BODY)
        assert late.status_code == 503 and late.get_json()["code"] == "shutting_down"
        assert not drain.ready()  # it waits for the admitted create
        holder.execute("ROLLBACK")

    drain.get(timeout=30)
    response = early.get(timeout=30)
    assert response.status_code == 201, response.get_json()
    task_id = response.get_json()["id"]
    # When the drain returns, the admitted run is resolved and no runner of it is left.
    row = sql_conn.execute(
        "SELECT status, failure_reason FROM deploy_tasks WHERE id = %s", (task_id,)
    ).fetchone()
    assert row == {"status": "failed", "failure_reason": "interrupted"}
    assert runtime.runs == {}
    assert late_events(sql_conn, [task_id]) == []
    # Only the admitted create made a task: the refused one inserted nothing.
    assert sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"] == 1


def test_a_create_that_outlives_the_drains_wait_starts_aborted(make_app, database_url, sql_conn):
    """The fallback when an admission is slower than the drain's grace: the run it launches
    starts aborted and resolves itself as interrupted."""
    app = make_app(shutdown_grace_s=0.1)
    client, runtime = app.test_client(), app.extensions["engine"]
    with create_held_at_its_insert(client, database_url, sql_conn) as (holder, early):
        runtime.shutdown()  # gives up waiting for the create after its grace
        holder.execute("ROLLBACK")
    response = early.get(timeout=30)
    assert response.status_code == 201, response.get_json()
    task_id = response.get_json()["id"]
    row = wait_for(
        lambda: sql_conn.execute(
            "SELECT status, failure_reason FROM deploy_tasks WHERE id = %s AND status = ANY(%s)",
            (task_id, ["completed", "failed", "cancelled"]),
        ).fetchone(),
        message="the run to end",
    )
    assert row == {"status": "failed", "failure_reason": "interrupted"}
    # The control: the runner itself has finished, so no event of it can still come.
    wait_for(lambda: runtime.runs == {}, 30, message="the run's runner to finish")
    assert late_events(sql_conn, [task_id]) == []


def test_a_drain_during_the_first_readiness_look_records_the_last_apply_first(
    client, runtime, cluster, sql_conn
):
    """What a run held for its first readiness look (the last apply's end) is true: a drain that
    stops the run there records it before the task is failed interrupted."""
    looking = threading.Event()
    ready = cluster.readiness

    def readiness(ref, *, abort):
        looking.set()
        abort.sleep(60)  # only the drain's abort ends this look
        return ready(ref, abort=abort)

    cluster.readiness = readiness
    task_id = client.post("/api/v1/tasks", json=BODY).get_json()["id"]
    wait_for(looking.is_set, message="the first readiness look")
    runtime.shutdown()
    row = sql_conn.execute(
        "SELECT status, failure_reason, phase, artifact_summary FROM deploy_tasks WHERE id = %s",
        (task_id,),
    ).fetchone()
    assert (row["status"], row["failure_reason"], row["phase"]) == (
        "failed",
        "interrupted",
        "verify",
    )
    applied = [r["kind"] for r in row["artifact_summary"]["appliedResources"]]
    assert applied == ["Deployment", "Service"]
    steps = recorded_steps(sql_conn, task_id)
    assert steps[-2:] == [("apply", "done"), ("verify", "started")]
