"""Two-phase cancel through the API: the idempotency matrix, cancel mid-apply, cross-process."""

import threading

import pytest

from tests.helpers import events, wait_for, wait_for_status


def cancel(client, task_id):
    return client.post(f"/api/v1/tasks/{task_id}/cancel")


@pytest.mark.parametrize("status", ["queued", "blocked"])
def test_queued_and_blocked_cancel_at_once(client, insert_task, cluster, status):
    row = insert_task(status=status)
    response = cancel(client, row["id"])
    assert response.status_code == 200
    snap = response.get_json()
    assert snap["status"] == "cancelled" and snap["cancelRequestedAt"] is not None
    assert cluster.calls == []  # nothing ran
    status_events = [e["payload"] for e in events(client, row["id"]) if e["kind"] == "status"]
    assert status_events[-1]["to"] == "cancelled" and status_events[-1]["by"] == "dev"


def test_a_repeat_cancel_on_a_cancelled_task_is_200_with_the_snapshot(
    client, insert_task, sql_conn
):
    row = insert_task(status="cancelled")
    events_before = sql_conn.execute("SELECT count(*) AS n FROM deploy_task_events").fetchone()
    response = cancel(client, row["id"])
    assert response.status_code == 200
    snap = response.get_json()
    assert snap["id"] == str(row["id"]) and snap["status"] == "cancelled"
    # Satisfied intent: nothing is written.
    assert (
        sql_conn.execute("SELECT count(*) AS n FROM deploy_task_events").fetchone() == events_before
    )


@pytest.mark.parametrize("status", ["completed", "failed"])
def test_cancel_on_a_finished_task_is_409_with_the_snapshot(client, insert_task, status):
    row = insert_task(status=status)
    response = cancel(client, row["id"])
    assert response.status_code == 409
    body = response.get_json()
    assert body["code"] == "task_already_finished"
    assert body["snapshot"]["id"] == str(row["id"]) and body["snapshot"]["status"] == status


def test_cancel_of_an_unknown_or_foreign_task_is_404(client, insert_task):
    assert cancel(client, "00000000-0000-0000-0000-000000000000").status_code == 404
    foreign = insert_task(status="running", workspace="someone-else")
    response = cancel(client, foreign["id"])
    assert response.status_code == 404 and response.get_json()["code"] == "task_not_found"


def test_cancel_during_apply_stops_between_documents_and_deletes_nothing(
    client, create_task, cluster, wait_status
):
    cluster.apply_delay_s = 0.3
    task = create_task()
    wait_for(lambda: cluster.applying.is_set(), message="first apply in flight")
    first = cancel(client, task["id"])
    assert first.status_code == 200 and first.get_json()["cancelRequestedAt"] is not None
    # A repeat while cancelling is harmless and silent.
    assert cancel(client, task["id"]).status_code == 200
    snap = wait_status(task["id"], "cancelled")
    assert cluster.deletes() == []
    # The in-flight apply was aborted, and no document was applied after the cancel.
    assert [c.outcome for c in cluster.calls if c.op == "apply"] == ["aborted"]
    assert snap["cancellation"]["applied"] == "nothing"
    assert [r["kind"] for r in snap["cancellation"]["notAppliedResources"]] == [
        "Deployment",
        "Service",
    ]
    assert snap["failure"] is None
    # A cancel on the now-cancelled task is already satisfied: the snapshot again.
    again = cancel(client, task["id"])
    assert again.status_code == 200 and again.get_json()["status"] == "cancelled"


def test_cancel_after_some_documents_itemizes_a_partial_apply(
    client, create_task, cluster, wait_status
):
    cluster.apply_delay_s = 0.2
    task = create_task()
    wait_for(lambda: any(c.outcome == "ok" for c in cluster.calls), message="one document applied")
    cancel(client, task["id"])
    snap = wait_status(task["id"], "cancelled")
    assert snap["cancellation"]["applied"] == "partially"
    assert [r["kind"] for r in snap["cancellation"]["appliedResources"]] == ["Deployment"]
    assert snap["hasAppliedResources"] is True
    assert cluster.deletes() == []


def test_cancel_while_waiting_for_readiness_stops_waiting(
    client, create_task, cluster, wait_status
):
    cluster.ready_after_polls = "never"
    task = create_task()
    wait_status(task["id"], "applying")
    wait_for(lambda: cluster.polls > 0, message="readiness polling")
    cancel(client, task["id"])
    snap = wait_status(task["id"], "cancelled")
    assert snap["cancellation"]["applied"] == "fully"
    assert cluster.deletes() == []


def test_cancel_landing_on_another_process_reaches_the_runner_through_notify(
    make_app, cluster, wait_status
):
    """Two engine runtimes on one database: the cancel lands on the one not running the task."""
    owner_app, other_app = make_app(), make_app()
    owner, other = owner_app.test_client(), other_app.test_client()
    other_app.extensions["engine"].listener.connected.wait(5)
    owner_app.extensions["engine"].listener.connected.wait(5)
    cluster.apply_delay_s = 30  # only an abort ends this call
    task = owner.post(
        "/api/v1/tasks",
        json={"projectId": "demo", "source": {"kind": "image", "image": "nginx", "name": "web"}},
    ).get_json()
    wait_for(lambda: cluster.applying.is_set(), message="apply in flight")
    assert other.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 200
    # Renewal is off in these apps (QUIET cadences), so only the NOTIFY can deliver it.
    snap = wait_for_status(owner, task["id"], "cancelled")
    assert snap["cancellation"]["applied"] == "nothing"
    assert [c.outcome for c in cluster.calls] == ["aborted"]


def test_concurrent_cancels_resolve_deterministically(
    client, app, create_task, cluster, wait_status
):
    cluster.apply_delay_s = 0.5
    task = create_task()
    wait_for(lambda: cluster.applying.is_set(), message="apply in flight")
    results = []

    def one():
        results.append(app.test_client().post(f"/api/v1/tasks/{task['id']}/cancel").status_code)

    threads = [threading.Thread(target=one) for _ in range(10)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)  # bounds a failure only
    assert not any(t.is_alive() for t in threads), "a request hung"
    assert set(results) == {200}  # every cancel's intent is satisfied, whichever came first
    snap = wait_status(task["id"], "cancelled")
    cancel_events = [e for e in events(client, task["id"]) if e["kind"] == "cancel_requested"]
    assert len(cancel_events) == 1 and snap["status"] == "cancelled"


def test_an_abort_cancels_the_runners_sql_statement_in_flight(
    client, runtime, create_task, cluster, database_url, sql_conn, wait_status
):
    """A runner write stuck behind a row lock is cancelled server-side when the abort fires."""
    import psycopg

    cluster.apply_delay_s = 0.5
    task = create_task()
    wait_for(lambda: cluster.applying.is_set(), message="apply in flight")
    locker = psycopg.connect(database_url)
    locker.execute("SELECT 1 FROM deploy_tasks WHERE id = %s FOR UPDATE", (task["id"],))

    def blocked_statements():
        return {
            (r["pid"], r["query_start"])
            for r in sql_conn.execute(
                "SELECT pid, query_start FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                "AND datname = current_database()"
            ).fetchall()
        }

    try:
        blocked = wait_for(blocked_statements, message="runner write blocked on the row lock")
        runtime.abort_local(UUID(task["id"]), "cancel")
        # The statement that was blocked is gone (the acknowledgement may now wait in its place).
        wait_for(
            lambda: not (blocked & blocked_statements()),
            timeout=30,
            message="the blocked statement to be cancelled",
        )
    finally:
        locker.rollback()
        locker.close()
    snap = wait_status(task["id"], "cancelled")
    assert snap["failure"] is None


from uuid import UUID  # noqa: E402


def test_a_cancel_recorded_once_the_resources_are_ready_wins_over_completed(
    client, runtime, create_task, cluster, wait_status
):
    """The completion is guarded on no pending cancel: a cancel that lands after the last
    readiness poll answered "ready" ends the run cancelled (fully applied), never completed."""
    ready = cluster.readiness
    answered = []

    def readiness(ref, *, abort):
        answer = ready(ref, abort=abort)
        if not answered:  # the resources are ready; the user cancels before the run says so
            (task_id,) = runtime.runs
            answered.append(cancel(client, task_id).status_code)
        return answer

    cluster.readiness = readiness
    task = create_task()
    snap = wait_status(task["id"], "cancelled", "completed")
    assert answered == [200]
    assert snap["status"] == "cancelled"
    assert snap["cancellation"]["applied"] == "fully"
    # The run held the last apply's end and "verify started" for this readiness look; the
    # refused completion gave them back and the cancel they led to recorded them.
    assert [r["kind"] for r in snap["appliedResources"]] == ["Deployment", "Service"]
    timeline = [
        (e["payload"]["step"], e["payload"]["state"])
        for e in events(client, task["id"])
        if e["kind"] == "step"
    ]
    assert timeline[-3:] == [("apply", "started"), ("apply", "done"), ("verify", "started")]
    assert timeline.count(("apply", "done")) == 2
