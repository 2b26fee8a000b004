"""Real server processes: a stopped server leaves honest task states behind.

SIGTERM with no drain wait (DRAIN_WAIT_S=0; tests/integration/test_drain.py waits) fails the task
`failed: interrupted` at once, written by the dying process itself;
SIGKILL leaves an orphan lease that another process's reaper resolves once it expires. Each test
reads the outcome where production keeps it: the task row and its events, or another server's API.
"""

import os
import signal
import time

import gevent
import requests

from engine.core.status import Status
from tests.helpers import IMAGE_SOURCE, poll_status, wait_for

#: The sandbox never turns the workload ready, so a task sits in applying/verify until stopped;
#: a stop aborts it at once.
IN_FLIGHT = {
    "SANDBOX_NEVER_READY": "1",
    "SANDBOX_APPLY_DELAY_S": "0.05",
    "READINESS_POLL_S": "0.1",
    "DRAIN_WAIT_S": "0",
}


def create(server) -> str:
    return create_on(server)[0]


def create_on(server) -> tuple[str, str]:
    """Create a task on a fresh connection: (task id, the process that took it)."""
    response = requests.post(
        server.base + "/api/v1/tasks",
        timeout=10,
        json={"projectId": "demo", "source": IMAGE_SOURCE},
    )
    assert response.status_code == 201, response.text
    return response.json()["id"], response.headers["X-Served-By"]


def wait_verifying(server, task_id) -> dict:
    def verifying():
        snap = requests.get(f"{server.base}/api/v1/tasks/{task_id}", timeout=10).json()
        return snap if (snap["status"], snap["phase"]) == ("applying", "verify") else None

    return wait_for(verifying, 20, interval=0.05, message=f"{task_id} to be verifying")


def stored(sql_conn, task_id) -> dict:
    return sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()


def last_status_event(sql_conn, task_id) -> dict:
    return sql_conn.execute(
        "SELECT payload FROM deploy_task_events WHERE task_id = %s AND kind = 'status' "
        "ORDER BY seq DESC LIMIT 1",
        (task_id,),
    ).fetchone()["payload"]


def assert_drained(sql_conn, task_id, lease_expires_at):
    row = stored(sql_conn, task_id)
    assert (row["status"], row["failure_reason"]) == ("failed", "interrupted"), row
    assert "shutting down" in row["failure_message"]
    # Written by the stopping process before its lease could have expired: not the reaper's doing.
    assert row["finished_at"] < lease_expires_at
    event = last_status_event(sql_conn, task_id)
    assert (event["from"], event["to"], event["reason"], event["by"]) == (
        "applying",
        "failed",
        "interrupted",
        "engine",
    )
    assert row["lease_owner"] is None


def test_sigterm_to_the_dev_server_fails_its_task_as_interrupted(start_server, sql_conn):
    server = start_server("app", env=IN_FLIGHT)
    task_id = create(server)
    wait_verifying(server, task_id)
    lease_expires_at = stored(sql_conn, task_id)["lease_expires_at"]

    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0, server.output()
    assert_drained(sql_conn, task_id, lease_expires_at)


def test_sigterm_to_the_gunicorn_master_drains_every_worker(start_server, sql_conn):
    server = start_server(
        "gunicorn",
        # One connection at a time per worker: while one worker serves a create, the next
        # concurrent one can only be accepted by the other (an idle machine otherwise lets one
        # worker's accept loop win every connection).
        env={**IN_FLIGHT, "GRACEFUL_TIMEOUT": "10", "WORKER_CONNECTIONS": "1"},
        workers=2,
    )
    taken: dict[str, str] = {}
    for _ in range(10):  # concurrent creates spread over both workers' accept loops
        batch = [gevent.spawn(create_on, server) for _ in range(4)]
        gevent.joinall(batch, raise_error=True)
        taken.update(g.value for g in batch)
        if len(set(taken.values())) == 2:
            break
    assert len(set(taken.values())) == 2, "every task landed on one worker"
    task_ids = list(taken)
    for task_id in task_ids:
        wait_verifying(server, task_id)
    leases = {t: stored(sql_conn, t)["lease_expires_at"] for t in task_ids}

    started = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(30)
    # Well inside the graceful timeout: the drain closed the work instead of waiting it out.
    assert time.monotonic() - started < 10, server.output()
    for task_id in task_ids:
        assert_drained(sql_conn, task_id, leases[task_id])


def test_a_killed_servers_orphan_is_reaped_by_the_next_server(start_server, sql_conn):
    first = start_server(
        "app", env={**IN_FLIGHT, "LEASE_TTL_S": "2", "LEASE_RENEW_INTERVAL_S": "0.5"}
    )
    owner = requests.get(first.base + "/healthz", timeout=10).json()["owner"]
    task_id = create(first)
    wait_verifying(first, task_id)

    os.killpg(first.proc.pid, signal.SIGKILL)
    first.proc.wait(10)
    orphan = stored(sql_conn, task_id)
    assert (orphan["status"], orphan["lease_owner"]) == ("applying", owner)  # nobody drained it

    second = start_server(
        "app", env={"LEASE_TTL_S": "2", "LEASE_RENEW_INTERVAL_S": "0.5", "REAPER_INTERVAL_S": "0.5"}
    )

    # The reaper resolves the orphan: it leaves applying.
    snap = poll_status(
        lambda: requests.get(f"{second.base}/api/v1/tasks/{task_id}", timeout=10).json(),
        set(Status) - {Status.APPLYING},
        30,
        interval=0.1,
        message="the orphan",
    )
    assert snap["status"] == "failed"
    assert snap["failure"]["reason"] == "interrupted"
    assert snap["appliedResources"], "what the killed run applied stays recorded"
    event = last_status_event(sql_conn, task_id)
    assert (event["reason"], event["by"]) == ("interrupted", "reaper")
    assert stored(sql_conn, task_id)["finished_at"] >= orphan["lease_expires_at"]
