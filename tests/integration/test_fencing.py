"""Fenced runner writes on a real database: a write either lands before the terminal event or is
fenced off, and a runner whose lease was taken writes nothing at all."""

import os
from dataclasses import replace

import gevent
import gevent.event
import psycopg.sql
import pytest

from engine.abort import AbortSignal
from engine.core.handle import FencedHandle
from engine.core.status import Status
from engine.core.transitions import transition
from engine.errors import LeaseLost
from engine.maintenance.reaper import Reaper
from tests.helpers import late_events

#: Races per run of the race test (each a fresh task: a fenced event against the reaper).
RACES = int(os.environ.get("FENCE_RACES", "200"))
OWNER = "host-a:1:runner"


def test_a_fenced_event_never_lands_after_the_reapers_terminal_event(
    runtime, insert_task, sql_conn
):
    sweep = next(
        s for s in Reaper(runtime.db, runtime.settings).sweeps() if s.name == "lease_expired"
    )
    outcomes = {"landed": 0, "fenced": 0}
    ids = []
    for _ in range(RACES):
        task = insert_task(
            status="applying",
            lease_owner=OWNER,
            lease_epoch=1,
            lease_expires_at=psycopg.sql.SQL("now() - interval '1 second'"),
        )
        ids.append(task["id"])
        handle = FencedHandle(runtime.db, task["id"], epoch=1, owner=OWNER, abort=AbortSignal())
        barrier = gevent.event.Event()

        def reap(task=task, barrier=barrier):
            barrier.wait()
            return transition(runtime.db, replace(sweep.move, task_ids=[task["id"]]))

        def emit(handle=handle, barrier=barrier):
            barrier.wait()
            try:
                handle.update_timeline("apply", "done", "Deployment/web created")
                return "landed"
            except LeaseLost:
                return "fenced"

        # The reaper's statement is sent first: the event's starts while it runs, the window in
        # which an unlocked check reads the task as still applying.
        reaper, runner = gevent.spawn(reap), gevent.spawn(emit)
        barrier.set()
        gevent.joinall([reaper, runner], timeout=30, raise_error=True)  # bounds a failure only
        assert reaper.ready() and runner.ready(), "a racing statement hung"
        assert len(reaper.value) == 1  # the reaper always wins: the lease had expired
        outcomes[runner.value] += 1

    late = late_events(sql_conn, ids)
    print(
        f"races run: {RACES}, events written: {outcomes['landed']}, "
        f"fenced off: {outcomes['fenced']}, late events: {len(late)}"
    )
    # Positive control: the races really overlapped (both outcomes happen).
    assert outcomes["fenced"] > 0
    assert late == []


@pytest.fixture
def taken_handle(runtime, insert_task, sql_conn):
    """A real FencedHandle whose lease another process has since taken (it was never told)."""
    task = insert_task(status="running", lease_owner=OWNER, lease_epoch=1)
    handle = FencedHandle(runtime.db, task["id"], epoch=1, owner=OWNER, abort=AbortSignal())
    # Positive control: while the lease is held, a write lands.
    handle.emit_event("step", {"step": "render", "state": "done"})
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s", (task["id"],)
        ).fetchone()["n"]
        == 1
    )
    # What a re-claim elsewhere leaves (a new epoch and owner) after this lease expired.
    sql_conn.execute(
        "UPDATE deploy_tasks SET lease_epoch = 2, lease_owner = 'host-b:2:other' WHERE id = %s",
        (task["id"],),
    )
    return handle


def task_state(sql_conn, task_id) -> tuple:
    row = sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()
    events = sql_conn.execute(
        "SELECT seq, kind, payload FROM deploy_task_events WHERE task_id = %s ORDER BY seq",
        (task_id,),
    ).fetchall()
    runtimes = sql_conn.execute(
        "SELECT id FROM task_runtimes WHERE task_id = %s", (task_id,)
    ).fetchall()
    return row, events, runtimes


@pytest.mark.parametrize(
    "write",
    [
        lambda h: h.emit_event("step", {"step": "apply", "state": "done"}),
        lambda h: h.update_timeline("apply", "started"),
        lambda h: h.set_artifacts(resultIdentities=[{"kind": "Deployment", "name": "web"}]),
        lambda h: h.set_state(status=Status.APPLYING, phase="apply"),
        lambda h: h.set_state(phase="verify"),
        lambda h: h.checkpoint(),
        lambda h: h.complete(),
        lambda h: h.fail("apply_failed", "nope"),
        lambda h: h.acknowledge_cancel(),
        lambda h: h.record_devbox("dbx-1"),
    ],
    ids=[
        "emit_event",
        "update_timeline",
        "set_artifacts",
        "set_state_status",
        "set_state_phase",
        "checkpoint",
        "complete",
        "fail",
        "acknowledge_cancel",
        "record_devbox",
    ],
)
def test_a_runner_whose_lease_was_taken_gets_lease_lost_and_writes_nothing(
    taken_handle, sql_conn, write
):
    before = task_state(sql_conn, taken_handle.task_id)
    with pytest.raises(LeaseLost):
        write(taken_handle)
    assert taken_handle.abort.aborted  # the runner stops at once, told by its own write
    assert task_state(sql_conn, taken_handle.task_id) == before


def test_a_runner_whose_lease_was_taken_records_no_process(taken_handle, sql_conn):
    import sys

    before = task_state(sql_conn, taken_handle.task_id)
    with pytest.raises(LeaseLost):
        taken_handle.start_local_process([sys.executable, "-c", "import time; time.sleep(60)"])
    assert task_state(sql_conn, taken_handle.task_id) == before
