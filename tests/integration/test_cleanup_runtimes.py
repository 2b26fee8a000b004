"""Local runtimes (seed 001) with real processes: process-group stops, pid reuse, the shutdown
drain, and startup reconciliation of rows a SIGKILLed server left behind."""

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
import uuid

import gevent
import psycopg.sql
import pytest
import requests

from engine.abort import Aborted, AbortSignal
from engine.cleanup import jobs as cleanup_jobs
from engine.cleanup import process_groups as processes
from engine.cleanup.process_groups import HOST, Liveness, ProcessIdentity
from engine.core.handle import FencedHandle
from engine.errors import LeaseLost
from tests.helpers import ROOT, free_port, wait_for

STOP_TIMEOUT_S = 0.3
#: How long a wait on a process (to start, to end) or on the cleanup worker may take before the
#: test fails: it bounds a failure only, so it is generous for a loaded machine.
WAIT_S = 60.0


@pytest.fixture
def app(make_app):
    return make_app(cleanup_interval_s=3600.0, runtime_stop_timeout_s=STOP_TIMEOUT_S)


@pytest.fixture
def spawned():
    """Processes a test starts outside the engine; their groups are killed afterwards."""
    groups = []

    def factory(argv):
        proc = subprocess.Popen(argv, start_new_session=True)
        groups.append(proc.pid)
        return proc

    yield factory
    for pgid in groups:
        try:
            os.killpg(pgid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def held_handle(runtime, insert_task, sql_conn):
    """Factory: a task running under this runtime's lease, and the handle its runner would get.
    Afterwards any group a failed test left behind is killed."""

    def factory(epoch=1):
        task = insert_task(status="running", lease_owner=runtime.owner, lease_epoch=1)
        handle = FencedHandle(
            runtime.db, task["id"], epoch=epoch, owner=runtime.owner, abort=AbortSignal()
        )
        handle.runtime_stop_timeout_s = STOP_TIMEOUT_S
        return handle

    yield factory
    for row in sql_conn.execute("SELECT pgid FROM task_runtimes WHERE pgid IS NOT NULL"):
        try:
            os.killpg(row["pgid"], signal.SIGKILL)
        except ProcessLookupError:
            pass


def running(pid: int) -> bool:
    """Whether pid is a live (non-zombie) process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def members(pgid: int) -> list[int]:
    return processes.group_members(pgid)


def runtime_rows(sql_conn, **where):
    clause = " AND ".join(f"{k} = %({k})s" for k in where) or "true"
    return sql_conn.execute(
        f"SELECT * FROM task_runtimes WHERE {clause} ORDER BY created_at", where
    ).fetchall()


def identity_of(pid: int) -> ProcessIdentity:
    return ProcessIdentity(HOST, processes.boot_id(), pid, pid, processes._stat(pid).start_ticks)


def insert_runtime(
    sql_conn,
    *,
    task_id=None,
    kind="local",
    liveness="process",
    owner=None,
    owner_pid=None,
    owner_start_ticks=None,
    identity: ProcessIdentity | None = None,
    host=HOST,
    resume=None,
    remote_id=None,
):
    """Arrange a runtime row as an earlier process on this host would have left it."""
    from psycopg.types.json import Jsonb

    return sql_conn.execute(
        "INSERT INTO task_runtimes (task_id, workspace, kind, liveness, host, owner, owner_pid, "
        "owner_start_ticks, boot_id, pid, pgid, start_ticks, resume, remote_id) VALUES "
        "(%s, 'default', %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s) RETURNING *",
        (
            task_id or uuid.uuid4(),
            kind,
            liveness,
            host,
            owner or f"{host}:1:gone",
            owner_pid,
            owner_start_ticks,
            identity and identity.boot_id,
            identity and identity.pid,
            identity and identity.pgid,
            identity and identity.start_ticks,
            Jsonb(resume) if resume else None,
            remote_id,
        ),
    ).fetchone()


def by_disposition(summary) -> list[dict]:
    """A reconciliation summary's counts by kind, liveness and disposition only."""
    from collections import Counter

    counted = Counter()
    for c in summary["counts"]:
        counted[(c["kind"], c["liveness"], c["disposition"])] += c["count"]
    return [
        {"kind": k, "liveness": lv, "disposition": d, "count": n}
        for (k, lv, d), n in sorted(counted.items())
    ]


def dead_identity(spawned) -> ProcessIdentity:
    """The identity of a process that existed and is gone."""
    # Alive until killed: a process that exits at once can be reaped before it is identified.
    proc = spawned(["sleep", "300"])
    identity = wait_for(lambda: processes._stat(proc.pid) and identity_of(proc.pid), WAIT_S)
    proc.kill()
    proc.wait()
    wait_for(lambda: not running(proc.pid), WAIT_S, message="the killed process to end")
    return identity


# -- stopping process groups ----------------------------------------------------------------------


def test_a_group_whose_leader_ignores_sigterm_is_killed_and_nothing_survives(held_handle, sql_conn):
    handle = held_handle()
    proc = handle.start_local_process(
        ["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"], label="stubborn"
    )
    [row] = runtime_rows(sql_conn, task_id=handle.task_id)
    assert (row["kind"], row["liveness"], row["pid"], row["pgid"], row["status"]) == (
        "local",
        "process",
        proc.pid,
        proc.pid,
        "running",
    )
    assert row["start_ticks"] == processes._stat(proc.pid).start_ticks
    group = wait_for(
        lambda: len(members(proc.pid)) == 3 and members(proc.pid),
        WAIT_S,
        message="the stubborn group's three members",
    )

    started = time.monotonic()
    assert proc.stop() is True
    assert time.monotonic() - started >= STOP_TIMEOUT_S  # SIGTERM was not enough: SIGKILL
    assert [pid for pid in group if running(pid)] == []
    assert members(proc.pid) == []
    assert runtime_rows(sql_conn, task_id=handle.task_id) == []


def test_a_wrapper_whose_child_outlives_it_is_fully_reaped(runtime, held_handle, sql_conn):
    handle = held_handle()
    proc = handle.start_local_process(
        ["sh", "-c", "sleep 300 & echo $!"], stdout=subprocess.PIPE, text=True
    )
    child = int(proc.popen.stdout.readline())
    assert proc.wait(AbortSignal()) == 0  # the wrapper is gone...
    assert running(child)  # ...its child lives on, reparented away from it
    assert processes.group_liveness(proc.identity) is Liveness.ALIVE
    assert len(runtime_rows(sql_conn, task_id=handle.task_id)) == 1  # so the row stays

    # The end of the run releases what the task left behind.
    assert runtime.cleanup.release_runtimes(handle.task_id) == 1
    assert not running(child)
    assert runtime_rows(sql_conn, task_id=handle.task_id) == []


def test_an_abort_stops_the_group_a_runner_waits_on(held_handle, sql_conn):
    handle = held_handle()
    proc = handle.start_local_process(["sleep", "300"])
    abort = AbortSignal()
    gevent.spawn_later(0.1, abort.abort, "cancel")
    with pytest.raises(Aborted):
        proc.wait(abort)
    assert not running(proc.pid)
    assert runtime_rows(sql_conn, task_id=handle.task_id) == []


def test_a_fenced_off_runner_cannot_leave_a_process_behind(held_handle, spawned, sql_conn):
    handle = held_handle(epoch=0)  # a stale epoch: the lease moved on
    marker = f"{time.time() % 1000:.6f}"
    with pytest.raises(LeaseLost):
        handle.start_local_process(["sleep", f"3{marker}"])
    assert handle.abort.aborted
    assert runtime_rows(sql_conn, task_id=handle.task_id) == []

    def survivors():
        found = []
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                        if marker.encode() in f.read() and running(int(entry.name)):
                            found.append(entry.name)
                except OSError:
                    pass
        return found

    assert survivors() == []
    # The control: the same scan finds such a process while it runs.
    control = spawned(["sleep", f"3{marker}"])
    assert wait_for(survivors, WAIT_S, message="the scan to see the control") == [str(control.pid)]


def test_the_shutdown_drain_stops_this_process_groups(runtime, held_handle, sql_conn):
    procs = [
        held_handle().start_local_process(["sh", "-c", "trap '' TERM; sleep 300"]) for _ in range(2)
    ]
    runtime.shutdown()
    assert [p.pid for p in procs if running(p.pid) or members(p.pid)] == []
    assert runtime_rows(sql_conn, kind="local") == []


# -- liveness: confirmed dead only with pid and start time ----------------------------------------


def test_pid_reuse_is_not_mistaken_for_liveness(runtime, spawned, sql_conn, caplog):
    bystander = spawned(["sleep", "300"])
    real = wait_for(lambda: processes._stat(bystander.pid) and identity_of(bystander.pid), WAIT_S)
    reused = ProcessIdentity(HOST, real.boot_id, real.pid, real.pgid, real.start_ticks - 1)
    other_boot = ProcessIdentity(HOST, "another-boot", real.pid, real.pgid, real.start_ticks)
    assert processes.group_liveness(real) is Liveness.ALIVE
    assert processes.group_liveness(reused) is Liveness.DEAD
    assert processes.group_liveness(other_boot) is Liveness.DEAD
    assert processes.stop_group(reused, timeout_s=STOP_TIMEOUT_S) == "absent"

    # A row naming the bystander's pid with another start time is a dead runtime of ours...
    row = insert_runtime(sql_conn, identity=reused)
    caplog.set_level(logging.INFO, logger="engine.cleanup.task_runtimes")
    summary = runtime.cleanup.reconcile()
    assert by_disposition(summary) == [
        {"kind": "local", "liveness": "process", "disposition": "removed", "count": 1}
    ]
    assert runtime_rows(sql_conn, id=row["id"]) == []
    # ...and the unrelated process that now holds the pid was never signalled.
    assert running(bystander.pid)
    assert bystander.poll() is None


def test_a_stop_job_for_a_runtime_confirmed_dead_succeeds_at_once(runtime, spawned, sql_conn):
    row = insert_runtime(sql_conn, identity=dead_identity(spawned))
    job = cleanup_jobs.enqueue_runtime_stop(runtime.db, row)
    assert job["host"] == HOST
    runtime.cleanup.run_once()
    state = sql_conn.execute(
        "SELECT state, attempts FROM cleanup_jobs WHERE id = %s", (job["id"],)
    ).fetchone()
    assert state == {"state": "succeeded", "attempts": 1}
    assert runtime_rows(sql_conn, id=row["id"]) == []


def test_a_runtime_without_a_process_handle_is_never_pruned(runtime, sql_conn):
    row = insert_runtime(sql_conn, liveness="none")
    job = cleanup_jobs.enqueue_runtime_stop(runtime.db, row)
    runtime.cleanup.run_once()
    state = sql_conn.execute(
        "SELECT state, last_error FROM cleanup_jobs WHERE id = %s", (job["id"],)
    ).fetchone()
    assert state["state"] == "retry_wait" and "liveness unknown" in state["last_error"]
    assert len(runtime_rows(sql_conn, id=row["id"])) == 1


def test_a_stop_job_of_another_host_is_left_to_that_host(runtime, spawned, sql_conn):
    row = insert_runtime(sql_conn, identity=dead_identity(spawned), host="another-host")
    job = cleanup_jobs.enqueue_runtime_stop(runtime.db, row)
    runtime.cleanup.run_once()
    state = sql_conn.execute(
        "SELECT state, attempts FROM cleanup_jobs WHERE id = %s", (job["id"],)
    ).fetchone()
    assert state == {"state": "pending", "attempts": 0}


# -- startup reconciliation -----------------------------------------------------------------------


def test_boot_reconciles_rows_by_liveness_with_one_bounded_summary(
    make_app, spawned, sql_conn, caplog
):
    me = identity_of(os.getpid())
    dead = insert_runtime(sql_conn, identity=dead_identity(spawned))
    resumable = insert_runtime(sql_conn, identity=dead_identity(spawned), resume={"session": "s-1"})
    sibling_proc = spawned(["sleep", "300"])
    sibling = insert_runtime(
        sql_conn,
        identity=wait_for(lambda: identity_of(sibling_proc.pid), WAIT_S),
        owner=f"{HOST}:{os.getpid()}:sibling",
        owner_pid=os.getpid(),
        owner_start_ticks=me.start_ticks,
    )
    devbox = insert_runtime(sql_conn, kind="devbox", liveness="remote", remote_id="box-r")
    handleless = insert_runtime(sql_conn, liveness="none")
    elsewhere = insert_runtime(sql_conn, identity=dead_identity(spawned), host="another-host")

    caplog.set_level(logging.INFO, logger="engine.cleanup.task_runtimes")
    make_app(cleanup_interval_s=3600.0)

    records = [r for r in caplog.records if r.name == "engine.cleanup.task_runtimes"]
    assert [r.levelno for r in records] == [logging.INFO]  # one line, no per-row warnings
    summary = records[0].reconciliation
    assert summary["rows"] == 5
    assert by_disposition(summary) == [
        {"kind": "devbox", "liveness": "remote", "disposition": "preserved_unknown", "count": 1},
        {"kind": "local", "liveness": "none", "disposition": "preserved_unknown", "count": 1},
        {
            "kind": "local",
            "liveness": "process",
            "disposition": "preserved_owner_alive",
            "count": 1,
        },
        {"kind": "local", "liveness": "process", "disposition": "removed", "count": 1},
        {"kind": "local", "liveness": "process", "disposition": "repaired", "count": 1},
    ]
    left = {r["id"]: r for r in runtime_rows(sql_conn)}
    assert dead["id"] not in left
    assert (
        left[resumable["id"]]["status"],
        left[resumable["id"]]["pid"],
        left[resumable["id"]]["resume"],
    ) == ("stopped", None, {"session": "s-1"})
    assert {sibling["id"], devbox["id"], handleless["id"], elsewhere["id"]} <= set(left)
    assert running(sibling_proc.pid)

    # A second boot finds nothing new to remove and repeats no warning.
    caplog.clear()
    make_app(cleanup_interval_s=3600.0)
    summary = [r for r in caplog.records if r.name == "engine.cleanup.task_runtimes"][
        0
    ].reconciliation
    assert summary["rows"] == 3
    assert {c["disposition"] for c in by_disposition(summary)} == {
        "preserved_unknown",
        "preserved_owner_alive",
    }


def test_the_summary_classifies_each_row_as_seed_001_lists_and_forgets_paused_devboxes(
    runtime, spawned, insert_task, sql_conn
):
    finished = insert_task(
        status="failed",
        failure_reason="x",
        failure_message="y",
        devbox_id="box-paused",
        devbox_paused_at=psycopg.sql.SQL("now()"),
    )
    running = insert_task(status="running", devbox_id="box-live")
    insert_runtime(
        sql_conn, task_id=finished["id"], kind="devbox", liveness="remote", remote_id="box-paused"
    )
    insert_runtime(
        sql_conn, task_id=running["id"], kind="devbox", liveness="remote", remote_id="box-live"
    )
    insert_runtime(sql_conn, identity=dead_identity(spawned))  # its task was purged
    summary = runtime.cleanup.reconcile()
    assert summary["counts"] == [
        {
            "taskState": "missing",
            "kind": "local",
            "liveness": "process",
            "localPid": True,
            "stopError": "none",
            "disposition": "removed",
            "count": 1,
        },
        {
            "taskState": "running",
            "kind": "devbox",
            "liveness": "remote",
            "localPid": False,
            "stopError": "none",
            "disposition": "preserved_unknown",
            "count": 1,
        },
    ]
    # The paused devbox of the finished task is not reported (now or at any later boot); the
    # live one is, again, and its row is kept.
    assert runtime.cleanup.reconcile()["counts"] == [summary["counts"][1]]
    assert len(runtime_rows(sql_conn)) == 2


def test_runtimes_of_a_gone_host_are_judged_after_the_lease_ttl(runtime, insert_task, sql_conn):
    ttl = runtime.settings.lease_ttl_s
    long_ago = psycopg.sql.SQL(f"now() - interval '{int(ttl) + 30} seconds'")
    ended = insert_task(
        status="failed", failure_reason="interrupted", failure_message="gone", finished_at=long_ago
    )
    just_ended = insert_task(status="failed", failure_reason="x", failure_message="y")
    active = insert_task(status="running")
    identity = ProcessIdentity("gone-pod", "boot-x", 4242, 4242, 1)
    rows = {
        name: insert_runtime(sql_conn, task_id=task["id"], identity=identity, host="gone-pod")
        for name, task in (("ended", ended), ("just_ended", just_ended), ("active", active))
    }
    rows["purged"] = insert_runtime(sql_conn, identity=identity, host="gone-pod")
    sql_conn.execute(
        "UPDATE task_runtimes SET updated_at = now() - make_interval(secs => %s)", (ttl + 30,)
    )

    assert runtime.reaper.sweep()["orphaned_runtimes"] == 2
    after = {r["id"]: r for r in runtime_rows(sql_conn)}
    for name in ("ended", "purged"):
        row = after[rows[name]["id"]]
        assert row["status"] == "stop_failed" and "gone-pod" in row["last_error"]
    # Within the lease TTL of the task's end, or with the task still active: left alone.
    assert after[rows["just_ended"]["id"]]["status"] == "running"
    assert after[rows["active"]["id"]]["status"] == "running"
    # The stop waits for that host, durably; a second sweep judges nothing again.
    jobs = sql_conn.execute("SELECT trigger, state, host FROM cleanup_jobs ORDER BY id").fetchall()
    assert jobs == [{"trigger": "runtime_stop", "state": "pending", "host": "gone-pod"}] * 2
    assert runtime.reaper.sweep()["orphaned_runtimes"] == 0


HELPER = """
from gevent import monkey; monkey.patch_all()
import json, os, socket, sys
import gevent
from engine.abort import AbortSignal
from engine.db import Database
from engine.core.handle import FencedHandle
from engine.core.status import Status
from engine.core.transitions import Claim, Move, transition

db = Database(sys.argv[1], max_size=2)
db.open()
owner = f"{socket.gethostname()}:{os.getpid()}:helper"
row = transition(db, Move(sys.argv[2], Status.RUNNING, claim=Claim(owner, 60)))[0]
handle = FencedHandle(db, row["id"], epoch=row["lease_epoch"], owner=owner, abort=AbortSignal())
lasting = handle.start_local_process(["sh", "-c", "trap '' TERM; sleep 300 & sleep 300 & wait"])
brief = handle.start_local_process(["sleep", "1"])
print(json.dumps({"lasting": lasting.pid, "brief": brief.pid}), flush=True)
gevent.sleep(600)
"""


def test_a_sigkilled_servers_runtime_rows_are_reconciled_by_the_next_boot(
    make_app, database_url, insert_task, sql_conn, caplog
):
    task = insert_task(status="queued")
    pids = {}
    server = subprocess.Popen(
        [sys.executable, "-c", HELPER, database_url, str(task["id"])],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        pids.update(json.loads(server.stdout.readline()))
        lasting = wait_for(
            lambda: len(members(pids["lasting"])) == 3 and members(pids["lasting"]),
            WAIT_S,
            message="the lasting group's three members",
        )
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        wait_for(lambda: not running(pids["brief"]), WAIT_S, message="the brief runtime to end")
        # The killed server's groups had their own sessions: they outlive it.
        assert all(running(pid) for pid in lasting)
        assert len(runtime_rows(sql_conn, task_id=task["id"])) == 2

        caplog.set_level(logging.INFO, logger="engine.cleanup.task_runtimes")
        make_app(cleanup_interval_s=0.05, runtime_stop_timeout_s=STOP_TIMEOUT_S)
        summary = [r for r in caplog.records if r.name == "engine.cleanup.task_runtimes"][
            0
        ].reconciliation
        assert by_disposition(summary) == [
            {
                "kind": "local",
                "liveness": "process",
                "disposition": "preserved_stop_enqueued",
                "count": 1,
            },
            {"kind": "local", "liveness": "process", "disposition": "removed", "count": 1},
        ]
        # The stop job runs on this host's worker: SIGTERM is ignored, SIGKILL ends it.
        wait_for(
            lambda: runtime_rows(sql_conn, task_id=task["id"]) == [],
            timeout=WAIT_S,
            message="the left-behind group to be stopped and its row released",
        )
        assert [pid for pid in lasting if running(pid)] == []
        # The worker finishes the job in its own statement, after the row is released.
        job = wait_for(
            lambda: sql_conn.execute(
                "SELECT trigger, state, attempts FROM cleanup_jobs WHERE state <> 'running'"
            ).fetchone(),
            WAIT_S,
            message="the stop job to finish",
        )
        assert job == {"trigger": "runtime_stop", "state": "succeeded", "attempts": 1}
    finally:
        if server.poll() is None:
            server.kill()
        for pgid in pids.values():
            try:
                os.killpg(pgid, signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.mark.skipif(shutil.which("make") is None, reason="needs make")
def test_make_run_stops_gracefully_and_reaps_the_servers_groups(
    database_url, spawned, sql_conn, tmp_path
):
    port = free_port()
    log_path = tmp_path / "make-run.log"
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "PORT": str(port),
        "HOST": "127.0.0.1",
        "RUNTIME_STOP_TIMEOUT_S": "1",
        "PYTHONUNBUFFERED": "1",
    }
    with open(log_path, "wb") as log:
        # -o: treat the venv stamp as up to date (the suite runs inside that venv already).
        make = subprocess.Popen(
            ["make", "-o", ".venv/.installed", "run"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def healthy():
            assert make.poll() is None, log_path.read_text()
            try:
                return requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).json()
            except requests.RequestException:
                return None

        owner = wait_for(healthy, WAIT_S, interval=0.1, message="make run to serve")["owner"]
        # A group the server started (its runtime row names the server as owner) that ignores
        # SIGTERM: only the server's shutdown can end it, and only with SIGKILL.
        stubborn = spawned(["sh", "-c", "trap '' TERM; sleep 300 & wait"])
        wait_for(lambda: len(members(stubborn.pid)) == 2, WAIT_S, message="the stubborn group")
        server_pid = int(owner.split(":")[1])
        insert_runtime(
            sql_conn,
            identity=identity_of(stubborn.pid),
            owner=owner,
            owner_pid=server_pid,
            owner_start_ticks=processes._stat(server_pid).start_ticks,
        )

        started = time.monotonic()
        make.send_signal(signal.SIGTERM)  # to make alone, as a launcher or a terminal would
        make.wait(WAIT_S)
        assert time.monotonic() - started >= 1.0  # make waited for the server's drain
        assert members(stubborn.pid) == []
        assert runtime_rows(sql_conn, kind="local") == []
        output = log_path.read_text()
        assert "drained" in output and "Traceback" not in output
    finally:
        if make.poll() is None:
            os.killpg(make.pid, signal.SIGKILL)
