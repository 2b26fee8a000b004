"""What one deployment costs the database, counted by named query (issue: throughput).

A run's fenced writes each carry an event, an artifact patch and a phase in one statement and
double as checkpoints. They do not notify one by one: the process announces its runs' own writes
(the claim, the steps, the run's own status moves) once per tick (engine/core/notices.py), and
ignores those notices for its own runs, so it re-reads nothing.
"""

import json
import uuid
from collections import Counter

import psycopg
import pytest
from psycopg_pool import PoolClosed

from engine.core.notices import RunnerNotices
from engine.db import NOTIFY_CHANNEL, Database
from tests.helpers import IMAGE_SOURCE, recorded_steps, scrape, total, wait_for

#: Named queries a run issues on the way (the background loops' are left out).
RUN_QUERIES = {
    "task_insert",
    "task_transition",
    "task_transition_moved",
    "task_write_if_held",
    "task_checkpoint_if_held",
    "task_get_lease_state",
    "runtime_list_local_of_owner",
}


def test_an_image_deployment_costs_five_statements_and_no_lease_reads(
    runtime, client, create_task, wait_status, sql_conn
):
    # Warm up (the first request loads templates, settings, ...), then count one deployment.
    wait_status(create_task(source={**IMAGE_SOURCE, "name": "warm"})["id"], "completed")
    listened = runtime.listener.connected.is_set()
    assert listened  # the control: own-write notifications do reach this process
    before = Counter(runtime.db.statements)
    task = create_task()  # a Deployment and a Service
    wait_status(task["id"], "completed")
    # Counted only once no notification of the run can still cause a lease read: the run has
    # left the process (/healthz: later notices of it are ignored), and a notification sent now
    # has come through the listener, which hands each one to the runtime before any subscriber,
    # in commit order: a read an earlier one started has begun (and been counted) by then.
    wait_for(lambda: client.get("/healthz").get_json()["running"] == 0, message="the run to end")
    barrier = str(uuid.uuid4())
    subscription = runtime.listener.subscribe(task=barrier)
    try:
        sql_conn.execute(
            "SELECT pg_notify(%s, %s)", (NOTIFY_CHANNEL, json.dumps({"task": barrier}))
        )
        assert subscription.get(timeout=30) == {"task": barrier}, "the barrier notification"
    finally:
        subscription.close()
    spent = {
        name: n
        for name, n in (Counter(runtime.db.statements) - before).items()
        if name in RUN_QUERIES
    }
    assert spent == {
        "task_insert": 1,
        # the claim (its row is the runner's task) ...
        "task_transition": 1,
        # ... then running -> applying, with the render steps, the plan and the first apply
        # started; and applying -> completed, with the last apply done, verify started and done
        # (ready at the first look: what followed the last cluster write was held for it) ...
        "task_transition_moved": 2,
        # ... between them, the apply done + the next apply started: each resource is recorded
        # applied before the cluster is called again
        "task_write_if_held": 1,
    }
    events = sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s", (task["id"],)
    ).fetchone()["n"]
    assert events == 1 + 3 + 8  # created, three status events, eight steps
    steps = recorded_steps(sql_conn, task["id"])
    # Two steps written by one statement keep their order.
    assert steps == [("render", "started"), ("render", "done")] + [
        ("apply", "started"),
        ("apply", "done"),
    ] * 2 + [("verify", "started"), ("verify", "done")]


def test_a_deployment_not_ready_at_the_first_look_is_recorded_applied_before_it_waits(
    client, create_task, cluster, wait_status, sql_conn
):
    """What follows the last cluster write is held only for the first readiness look: a workload
    not ready then is recorded applied, in phase verify, before the run waits for it."""
    cluster.ready_after_polls = "never"
    task = create_task()

    def recorded():
        snap = wait_status(task["id"], "applying")
        return snap if snap["phase"] == "verify" else None

    snap = wait_for(recorded, message="the phase verify recorded while the run waits")
    assert [r["kind"] for r in snap["appliedResources"]] == ["Deployment", "Service"]
    steps = recorded_steps(sql_conn, task["id"])
    assert steps[-2:] == [("apply", "done"), ("verify", "started")]
    assert cluster.polls >= 1


def test_a_cancel_from_elsewhere_still_reaches_the_runner_through_its_notification(
    runtime, cluster, create_task, client, wait_status
):
    cluster.ready_after_polls = "never"
    task = create_task()
    wait_for(lambda: cluster.polls >= 1, message="the readiness wait")
    reads_before = runtime.db.statements["task_get_lease_state"]
    response = client.post(f"/api/v1/tasks/{task['id']}/cancel")
    assert response.status_code in (200, 202), response.get_json()
    snap = wait_status(task["id"], "cancelled")
    assert snap["cancellation"]["applied"] == "fully"
    # The cancel's own notification carried the lease facts: decided with no read.
    assert runtime.db.statements["task_get_lease_state"] == reads_before


def test_a_run_is_not_aborted_by_the_notification_of_its_own_completion(
    client, runtime, create_task, wait_status, cluster
):
    """The NOTIFY of a run's own terminal write says the lease left it: that is the write landing,
    not a lost lease (an abort then would cancel the finishing statement from a new connection)."""
    before = scrape(client)
    for i in range(20):
        wait_status(create_task(source={**IMAGE_SOURCE, "name": f"w{i}"})["id"], "completed")
    wait_for(lambda: not runtime.runs, message="every run to end")
    # Positive control: an abort is counted, by its reason.
    cluster.ready_after_polls = "never"
    stuck = create_task(source={**IMAGE_SOURCE, "name": "stuck"})
    wait_for(lambda: cluster.polls >= 1, message="the readiness wait")
    client.post(f"/api/v1/tasks/{stuck['id']}/cancel")
    wait_status(stuck["id"], "cancelled")
    wait_for(lambda: not runtime.runs, message="the cancelled run to end")
    after = scrape(client)
    aborts = "deploy_run_aborts_total"
    assert total(after, aborts, reason="cancel") == total(before, aborts, reason="cancel") + 1
    assert total(after, aborts, reason="lease_lost") == total(before, aborts, reason="lease_lost")


def test_runs_in_flight_use_at_most_their_share_of_the_pool_and_requests_still_answer(
    make_app, cluster, database_url
):
    """Stuck runner statements hold only the runner slots: the rest of the pool serves requests."""
    cluster.ready_after_polls = "never"  # every run checkpoints in its readiness loop
    app = make_app(db_pool_size=6, runner_db_slots=2, ready_probe_db_timeout_s=5)
    client = app.test_client()
    for i in range(10):
        response = client.post(
            "/api/v1/tasks",
            json={"projectId": "burst", "source": {**IMAGE_SOURCE, "name": f"b{i}"}},
        )
        assert response.status_code == 201, response.get_json()
    wait_for(lambda: cluster.polls >= 20, message="the runs to reach their readiness loops")
    with psycopg.connect(database_url) as blocker:
        # Every runner's next checkpoint now waits for this lock, holding its connection.
        blocker.execute("LOCK TABLE deploy_tasks IN ACCESS EXCLUSIVE MODE")

        def waiting_on_the_lock() -> int:
            with psycopg.connect(database_url, autocommit=True) as probe:
                return probe.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND query LIKE %s",
                    ("%cancel_requested_at IS NOT NULL AS cancel_pending%",),
                ).fetchone()[0]

        wait_for(lambda: waiting_on_the_lock() == 2, message="both runner slots to be stuck")
        # A request still finds a pool connection at once (without the slots all six would be
        # stuck behind the lock and this probe would time out).
        ready = client.get("/readyz")
        assert ready.status_code == 200, ready.get_data(as_text=True)
        assert waiting_on_the_lock() == 2  # and no more runners got through meanwhile
        blocker.rollback()


def _received(listener, sql_conn, task_id: str) -> list[dict]:
    """The notifications of `task_id` committed so far: read up to a probe sent now (a LISTEN
    connection receives notifications in commit order)."""
    probe = uuid.uuid4().hex
    sql_conn.execute("SELECT pg_notify('deploy_tasks', %s)", (json.dumps({"probe": probe}),))
    got = []
    for notify in listener.notifies(timeout=30):
        payload = json.loads(notify.payload)
        if payload.get("probe") == probe:
            return got
        if payload.get("task") == task_id:
            got.append(payload)
    raise AssertionError(f"the probe never arrived; got {got}")


def test_a_deployments_own_writes_share_one_notice(make_app, database_url, sql_conn):
    """The insert, the claim, eight steps and two status moves commit without a NOTIFY (each
    would take PostgreSQL's server-wide notify lock through its commit); the next tick announces
    them all."""
    app = make_app(runner_notice_interval_s=3600)  # no tick during the run: the test sends it
    runtime = app.extensions["engine"]
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN deploy_tasks")
        response = app.test_client().post(
            "/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE}
        )
        assert response.status_code == 201, response.get_json()
        task_id = response.get_json()["id"]
        wait_for(lambda: task_id not in map(str, runtime.runs), message="the run to end")
        status = sql_conn.execute(
            "SELECT status FROM deploy_tasks WHERE id = %s", (task_id,)
        ).fetchone()["status"]
        assert status == "completed"
        ids = {"workspace": "default", "project": "demo", "task": task_id}
        assert _received(listener, sql_conn, task_id) == []  # nothing yet, not even the insert
        sent = runtime.db.statements["tasks_notify_runner"]
        runtime.runner_notices.send_pending()
        assert runtime.db.statements["tasks_notify_runner"] == sent + 1
        assert _received(listener, sql_conn, task_id) == [{**ids, "runner": True}]


def test_runner_notices_that_fail_to_send_stay_pending(runtime, database_url, sql_conn):
    closed = Database(database_url, max_size=1)
    closed.open()
    closed.close()
    notices = RunnerNotices(closed, interval_s=3600)
    task_id = uuid.uuid4()
    notices.changed("ws", "shop", task_id)
    with pytest.raises(PoolClosed):
        notices.send_pending()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN deploy_tasks")
        notices.db = runtime.db  # the database is back
        notices.send_pending()
        assert _received(listener, sql_conn, str(task_id)) == [
            {"workspace": "ws", "project": "shop", "task": str(task_id), "runner": True}
        ]
