"""The drain. A stop signal ends admissions at once (503 `shutting_down`, /readyz not ready);
the runs in flight go on for up to DRAIN_WAIT_S, leases renewed, cancels honoured, viewers
served; what still runs then is aborted and recorded `failed: interrupted`; a second signal ends
the wait at once. The drain and launching are atomic: a create is refused with 503, or its run is
waited for (and aborted if it outlives the wait); no run launched around a SIGTERM keeps writing
after it. In-process tests abort at once (tests/conftest.py QUIET); real processes wait."""

import os
import signal
import threading
import time
from contextlib import contextmanager

import gevent
import psycopg
import pytest
import requests
from gevent.pywsgi import WSGIServer
from gevent.queue import Empty
from psycopg.rows import dict_row

from engine.cleanup import jobs as cleanup_jobs
from tests.helpers import (
    END,
    IMAGE_SOURCE,
    EventStream,
    late_events,
    poll_status,
    recorded_steps,
    wait_for,
)

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


def test_the_drain_ends_with_its_last_run_and_claims_no_cleanup_job_meanwhile(
    make_app, cluster, sql_conn
):
    """The drain's wait ends when the run it waits for ends, not at DRAIN_WAIT_S, and the
    process takes no new cleanup job while it waits (it would abort it on its way out)."""
    app = make_app(drain_wait_s=60.0, cleanup_interval_s=3600.0)
    client, runtime = app.test_client(), app.extensions["engine"]
    looking, ready = threading.Event(), threading.Event()
    real = cluster.readiness

    def readiness(ref, *, abort):
        looking.set()
        while not ready.is_set():
            abort.sleep(0.01)
        return real(ref, abort=abort)

    def job_state(operation_id: str) -> str:
        return sql_conn.execute(
            "SELECT state FROM cleanup_jobs WHERE operation_id = %s", (operation_id,)
        ).fetchone()["state"]

    cluster.readiness = readiness
    task_id = client.post("/api/v1/tasks", json=BODY).get_json()["id"]
    wait_for(looking.is_set, message="the run's readiness look")
    # The control: before the drain, a tick of the worker takes a due job.
    cleanup_jobs.enqueue_devbox_delete(runtime.db, "box-before", workspace="default")
    runtime.cleanup.run_once()
    assert job_state("devbox_delete:default:box-before") != "pending"

    drain = gevent.spawn(runtime.shutdown)
    wait_for(lambda: runtime.stopping, message="the drain to begin")
    cleanup_jobs.enqueue_devbox_delete(runtime.db, "box-during", workspace="default")
    assert runtime.cleanup.run_once() is False
    assert job_state("devbox_delete:default:box-during") == "pending"
    assert not drain.ready() and runtime.runs  # the run goes on

    ready.set()
    drain.get(timeout=30)  # well before its 60 s wait: the run ended, and the drain with it
    row = sql_conn.execute("SELECT status FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()
    assert row["status"] == "completed"


def test_a_stream_opened_once_the_drain_ended_ends_after_its_first_read(make_app):
    """A viewer that reconnects over a kept-alive connection to a process that has drained
    gets its snapshot and the end (it then reconnects elsewhere), instead of holding the
    worker's exit until gunicorn's graceful timeout."""
    app = make_app()
    server = WSGIServer(("127.0.0.1", 0), app, log=None)
    server.start()
    try:
        app.extensions["engine"].shutdown()
        stream = EventStream(f"http://127.0.0.1:{server.server_port}")
        try:
            assert stream.next()[0] == "snapshot"
            assert ends(stream, 10), "the stream outlived the drain"
        finally:
            stream.close()
    finally:
        server.stop(timeout=5)


# -- real server processes: a stop signal lets the runs in flight finish ----------------------
#: A run applies at once and is ready RUN_S later: a few seconds in flight.
RUN_S = 4.0
QUICK = {"SANDBOX_APPLY_DELAY_S": "0.05", "READINESS_POLL_S": "0.1"}
#: Leases that expire during the drain unless renewed, and a reaper that would take them then.
SHORT_LEASES = {"LEASE_TTL_S": "2", "LEASE_RENEW_INTERVAL_S": "0.5", "REAPER_INTERVAL_S": "0.5"}
NEVER_READY = {**QUICK, "SANDBOX_NEVER_READY": "1"}
TERMINAL = ("completed", "failed", "cancelled")


def create_on(server, source=None) -> str:
    response = requests.post(
        server.base + "/api/v1/tasks",
        timeout=20,
        json={"projectId": "demo", "source": source or IMAGE_SOURCE},
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


def stored(sql_conn, task_id) -> dict:
    return sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()


def in_flight(sql_conn, task_id) -> dict:
    """The task's row once its run waits for readiness (applied, verifying)."""
    return wait_for(
        lambda: (row := stored(sql_conn, task_id))["phase"] == "verify" and row,
        30,
        message=f"{task_id} to be verifying",
    )


def database_now(sql_conn):
    return sql_conn.execute("SELECT clock_timestamp() AS t").fetchone()["t"]


def announced(server, line: str) -> str:
    """Waits for the server's log to hold `line`; the log."""
    return wait_for(lambda: line in server.output() and server.output(), 30, message=line)


def ends(stream: EventStream, timeout: float) -> bool:
    """Whether the stream ends within `timeout` seconds (the frames before its end skipped)."""
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        try:
            if stream.frames.get(timeout=left) == END:
                return True
        except Empty:
            return False
    return False


@pytest.mark.parametrize("kind", ["app", "gunicorn"])
def test_a_run_in_flight_at_sigterm_completes_and_the_process_exits_after_it(
    kind, start_server, sql_conn
):
    server = start_server(
        kind,
        workers=1,
        env={**QUICK, **SHORT_LEASES, "SANDBOX_READY_DELAY_S": str(RUN_S), "DRAIN_WAIT_S": "15"},
    )
    blocked = create_on(server, {"kind": "prompt", "prompt": "an admin panel sandbox-needs-input"})
    poll_status(lambda: stored(sql_conn, blocked), ("blocked",), message="the prompt's question")
    viewer = EventStream(server.base)  # a live viewer on the stopping process
    assert viewer.next()[0] == "snapshot"
    # A connection kept alive from before the signal, as a load balancer holds one.
    kept = requests.Session()
    assert kept.get(server.base + "/readyz", timeout=10).ok
    task_id = create_on(server)
    in_flight(sql_conn, task_id)
    signalled = database_now(sql_conn)
    server.proc.send_signal(signal.SIGTERM)
    announced(server, "draining: waiting up to 15 s for 1 run")
    draining = stored(sql_conn, task_id)
    assert draining["status"] == "applying", draining

    # New work is refused from then on, and the process says it is not ready for traffic.
    refused = kept.post(
        server.base + "/api/v1/tasks",
        timeout=10,
        json={"projectId": "demo", "source": IMAGE_SOURCE},
    )
    assert refused.status_code == 503 and refused.json()["code"] == "shutting_down"
    assert int(refused.headers["Retry-After"]) > 0
    unready = kept.get(server.base + "/readyz", timeout=10)
    assert unready.status_code == 503 and unready.json()["reason"] == "draining"
    kept.close()

    # The run goes on: its lease is renewed during the drain (the reaper would otherwise take
    # it 2 s in), and its viewer sees it complete.
    def renewed():
        expires = stored(sql_conn, task_id)["lease_expires_at"]
        return expires is not None and expires > draining["lease_expires_at"]

    wait_for(renewed, 30, message="a lease renewal during the drain")
    viewer.until(lambda e, d: e == "upsert" and d["id"] == task_id and d["status"] == "completed")
    # Then the stream ends with the drain (a reconnecting viewer lands on another process).
    assert ends(viewer, 30), "the stream outlived the drain"
    viewer.close()

    assert server.proc.wait(30) == 0, server.output()[-3000:]
    exited = database_now(sql_conn)
    row = stored(sql_conn, task_id)
    assert (row["status"], row["failure_reason"]) == ("completed", None), row
    assert signalled < row["finished_at"] < exited
    assert "drain: every run finished" in server.output()
    # A blocked task holds no run: the drain leaves it as it was.
    assert stored(sql_conn, blocked)["status"] == "blocked"


def test_a_run_longer_than_the_wait_ends_interrupted_within_the_wait_plus_the_grace(
    start_server, sql_conn
):
    wait_s, grace_s = 2.0, 2.0
    server = start_server(
        "gunicorn",
        workers=1,
        env={**NEVER_READY, "DRAIN_WAIT_S": str(wait_s), "SHUTDOWN_GRACE_S": str(grace_s)},
    )
    task_id = create_on(server)
    in_flight(sql_conn, task_id)
    signalled = database_now(sql_conn)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0, server.output()[-3000:]

    row = stored(sql_conn, task_id)
    assert (row["status"], row["failure_reason"]) == ("failed", "interrupted"), row
    assert "shutting down" in row["failure_message"]
    waited = (row["finished_at"] - signalled).total_seconds()
    assert wait_s <= waited < wait_s + grace_s, waited
    assert "drain: 1 run still in flight after" in server.output()


def test_a_cancel_during_the_drain_is_honoured(start_server, sql_conn):
    env = {**NEVER_READY, "DRAIN_WAIT_S": "30"}
    stopping, other = start_server("app", env=env), start_server("app", env=env)
    task_id = create_on(stopping)
    in_flight(sql_conn, task_id)
    started = time.monotonic()
    stopping.proc.send_signal(signal.SIGTERM)
    announced(stopping, "draining: waiting up to 30 s for 1 run")

    # Through another process, as a load balancer would route it: the stopping process's
    # listener delivers it to the run.
    response = requests.post(f"{other.base}/api/v1/tasks/{task_id}/cancel", timeout=10)
    assert response.status_code in (200, 202), response.text
    assert stopping.proc.wait(30) == 0, stopping.output()[-3000:]
    assert time.monotonic() - started < 20  # the run ended, and the drain with it
    row = stored(sql_conn, task_id)
    assert row["status"] == "cancelled", row
    last = sql_conn.execute(
        "SELECT payload FROM deploy_task_events WHERE task_id = %s AND kind = 'status' "
        "ORDER BY seq DESC LIMIT 1",
        (task_id,),
    ).fetchone()["payload"]
    assert (last["to"], last["reason"]) == ("cancelled", "cancel_acknowledged"), last


GUNICORN_HINT = "SIGINT or SIGQUIT to the master stops now"


@pytest.mark.parametrize(
    ("kind", "first", "second", "hint"),
    [
        # Ctrl-C twice under `make run`.
        ("app", signal.SIGINT, signal.SIGINT, "press Ctrl-C again to stop now"),
        # SIGTERM to the master drains; SIGINT to it is gunicorn's quick shutdown.
        ("gunicorn", signal.SIGTERM, signal.SIGINT, GUNICORN_HINT),
        # A second SIGTERM sent to the worker itself (None: to the worker, not the master).
        ("gunicorn", signal.SIGTERM, None, GUNICORN_HINT),
    ],
    ids=["app-ctrl-c-twice", "gunicorn-sigint", "gunicorn-worker-sigterm-twice"],
)
def test_a_second_signal_ends_the_wait_at_once(kind, first, second, hint, start_server, sql_conn):
    server = start_server(kind, workers=1, env={**NEVER_READY, "DRAIN_WAIT_S": "30"})
    worker = int(requests.get(server.base + "/healthz", timeout=10).json()["owner"].split(":")[1])
    task_id = create_on(server)
    in_flight(sql_conn, task_id)
    server.proc.send_signal(first)
    announced(server, f"draining: waiting up to 30 s for 1 run; {hint}")

    again = time.monotonic()
    if second is None:
        os.kill(worker, signal.SIGTERM)
    else:
        server.proc.send_signal(second)
    assert server.proc.wait(30) == 0, server.output()[-3000:]
    assert time.monotonic() - again < 10, "the second signal did not end the 30 s wait"
    row = stored(sql_conn, task_id)
    assert (row["status"], row["failure_reason"]) == ("failed", "interrupted"), row
    assert "drain: stopping now" in server.output()


def test_no_drain_wait_aborts_the_runs_at_once(start_server, sql_conn):
    """DRAIN_WAIT_S=0: the stop of old, every run in flight aborted and recorded at once."""
    server = start_server(
        "app", env={**QUICK, "SANDBOX_READY_DELAY_S": str(RUN_S), "DRAIN_WAIT_S": "0"}
    )
    task_id = create_on(server)
    in_flight(sql_conn, task_id)
    signalled = database_now(sql_conn)
    server.proc.send_signal(signal.SIGTERM)
    assert server.proc.wait(30) == 0, server.output()[-3000:]

    row = stored(sql_conn, task_id)
    assert (row["status"], row["failure_reason"]) == ("failed", "interrupted"), row
    # Within the default grace (3 s): it never waited for the run, which needed 4 s.
    assert (row["finished_at"] - signalled).total_seconds() < 3.0
    assert "draining: waiting" not in server.output()
