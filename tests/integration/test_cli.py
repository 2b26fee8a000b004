"""Operator commands (`flask --app wsgi ...`) against a real database, through Flask's CliRunner."""

import json
import uuid

import pytest
from psycopg.types.json import Jsonb

from tests.helpers import events


@pytest.fixture
def cli(app):
    runner = app.test_cli_runner()

    def invoke(*args, expect=0):
        result = runner.invoke(args=list(args))
        assert result.exit_code == expect, (result.exit_code, result.output, result.exception)
        return result.output

    return invoke


def test_tasks_list_filters_and_prints_a_table_or_json(cli, insert_task):
    mine = insert_task(status="failed", project_id="shop")
    other = insert_task(status="completed", workspace="tenant-b", project_id="blog")
    table = cli("tasks", "list")
    assert table.splitlines()[0].split() == [
        "ID",
        "WORKSPACE",
        "PROJECT",
        "STATUS",
        "KIND",
        "CREATED",
    ]
    assert str(mine["id"]) in table and str(other["id"]) in table
    listed = json.loads(cli("tasks", "list", "--json", "--workspace", "tenant-b"))
    assert [t["id"] for t in listed] == [str(other["id"])]
    assert listed[0]["workspace"] == "tenant-b"
    # --namespace, the option's old name, still works.
    old_name = json.loads(cli("tasks", "list", "--json", "--namespace", "tenant-b"))
    assert [t["id"] for t in old_name] == [str(other["id"])]
    assert [t["id"] for t in json.loads(cli("tasks", "list", "--json", "--status", "failed"))] == [
        str(mine["id"])
    ]
    assert json.loads(cli("tasks", "list", "--json", "--project", "nothing-here")) == []
    assert "(none)" in cli("tasks", "list", "--project", "nothing-here")
    cli("tasks", "list", "--status", "exploded", expect=2)


def test_tasks_show_gives_snapshot_events_and_explanation(cli, create_task, wait_status):
    task = create_task(project_id="shown")
    wait_status(task["id"], "completed")
    shown = json.loads(cli("tasks", "show", "--json", task["id"]))
    assert shown["snapshot"]["id"] == task["id"] and shown["snapshot"]["status"] == "completed"
    assert [e["kind"] for e in shown["events"]][0] == "created"
    assert "completed" in shown["explanation"]["summary"]
    table = cli("tasks", "show", task["id"])
    assert task["id"] in table and "completed" in table and "SEQ" in table
    cli("tasks", "show", str(uuid.uuid4()), expect=3)


def test_tasks_cancel_goes_through_the_two_phase_cancel(
    cli, create_task, cluster, wait_status, insert_task, client
):
    queued = insert_task(status="queued", workspace="tenant-c")
    assert "cancelled" in cli("tasks", "cancel", str(queued["id"]))
    cluster.ready_after_polls = "never"
    running = create_task(project_id="cancel-me")
    assert json.loads(cli("tasks", "cancel", "--json", running["id"]))["cancelRequestedAt"]
    wait_status(running["id"], "cancelled")
    seen = events(client, running["id"])
    assert any(
        e["kind"] == "cancel_requested" and "operator" in json.dumps(e["payload"]) for e in seen
    ), seen
    assert "cancelled" in cli("tasks", "cancel", running["id"])  # the intent holds: a no-op
    completed = insert_task(status="completed")
    cli("tasks", "cancel", str(completed["id"]), expect=4)  # finished: not allowed from here
    cli("tasks", "cancel", str(uuid.uuid4()), expect=3)


def failed_job(sql_conn, task_id, *, state="failed", operation="devbox_pause:x") -> dict:
    return sql_conn.execute(
        "INSERT INTO cleanup_jobs (operation_id, trigger, state, task_id, workspace, snapshot, "
        "attempts, last_error, completed_at) VALUES (%s, 'devbox_pause', %s, %s, 'default', %s, "
        "8, 'HTTP 503', now()) RETURNING *",
        (operation, state, task_id, Jsonb({"taskId": str(task_id)})),
    ).fetchone()


def test_cleanup_jobs_list_and_retry_with_a_fresh_budget_audited(
    cli, insert_task, sql_conn, client
):
    task = insert_task(status="completed")
    job = failed_job(sql_conn, task["id"])
    table = cli("cleanup-jobs", "list", "--state", "failed")
    assert str(job["id"]) in table and "HTTP 503" in table
    assert json.loads(cli("cleanup-jobs", "list", "--json", "--state", "pending")) == []

    retried = json.loads(cli("cleanup-jobs", "retry", "--json", str(job["id"])))
    assert (retried["state"], retried["attempts"]) == ("pending", 0)
    row = sql_conn.execute("SELECT * FROM cleanup_jobs WHERE id = %s", (job["id"],)).fetchone()
    assert (row["state"], row["attempts"], row["completed_at"]) == ("pending", 0, None)
    assert "HTTP 503" in row["last_error"]  # the history stays readable
    retries = [
        e["payload"]["jobId"] for e in events(client, task["id"]) if e["kind"] == "cleanup_retry"
    ]
    assert retries == [job["id"]]

    cli("cleanup-jobs", "retry", str(job["id"]), expect=4)  # pending now: not failed
    cli("cleanup-jobs", "retry", "999999", expect=3)
    # A failed job whose operation already has an open job is not revived beside it.
    again = failed_job(sql_conn, task["id"])
    cli("cleanup-jobs", "retry", str(again["id"]), expect=4)


def test_streaks_exits_1_while_something_is_failing(cli, runtime):
    assert "(none)" in cli("streaks")
    runtime.streaks.failed("reaper", "connection refused")
    assert "reaper" in cli("streaks", expect=1)
    assert json.loads(cli("streaks", "--json", expect=1))[0]["consecutiveFailures"] == 1
    runtime.streaks.succeeded("reaper")
    assert json.loads(cli("streaks", "--json")) == []


def test_reconcile_prints_its_summary(cli, spawned_leftover):
    summary = json.loads(cli("reconcile", "--json"))
    assert summary["rows"] == 1 and summary["counts"][0]["disposition"] == "removed"
    assert "0 row(s)" in cli("reconcile")


@pytest.fixture
def spawned_leftover(sql_conn, insert_task):
    """A local runtime row another (gone) engine runtime left on this host: its process is dead."""
    import socket

    from engine.cleanup.process_groups import boot_id

    task = insert_task(status="failed")
    sql_conn.execute(
        "INSERT INTO task_runtimes (task_id, workspace, kind, liveness, host, owner, owner_pid, "
        "owner_start_ticks, boot_id, pid, pgid, start_ticks) VALUES "
        "(%s, 'default', 'local', 'process', %s, 'gone:1:x', 1, 1, %s, 2147483, 2147483, 1)",
        (task["id"], socket.gethostname(), boot_id()),
    )
