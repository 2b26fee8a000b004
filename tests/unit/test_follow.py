"""The one follow every live stream adapts (engine/readside/follow.py), on a real in-process
listener: what it yields for each notification, and that a failed read never ends it."""

import time
from types import SimpleNamespace

import gevent
import psycopg
import pytest

from engine.maintenance.listener import CLOSED, REBOOTSTRAP, Listener, LiveFeed
from engine.operations.config import Settings
from engine.readside import follow as follows
from engine.readside.follow import Change, Follow, Idle, Live, Removed, Snapshot

TASK = "6c1d7f0e-9f7e-4a53-8a43-5d2f3a0c1b11"


class Reads:
    """What the store holds, read by the follow; a read can be made to fail as the pool does."""

    def __init__(self):
        self.rows = {TASK: {"id": TASK, "status": "running"}}
        self.failing = 0  # reads still to fail
        self.snapshots = 0
        self.changes: list[dict] = []

    def _maybe_fail(self):
        if self.failing:
            self.failing -= 1
            raise psycopg.OperationalError("the connection is lost")

    def snapshot(self):
        self._maybe_fail()
        self.snapshots += 1
        return dict(self.rows)

    def change(self, payload):
        self._maybe_fail()
        self.changes.append(payload)
        return self.rows.get(payload["task"])


@pytest.fixture
def engine():
    return SimpleNamespace(
        settings=Settings(stream_keepalive_s=30.0), listener=Listener(db=None), live=LiveFeed()
    )


@pytest.fixture
def reads():
    return Reads()


def following(engine, reads, **options):
    follow = Follow(
        engine,
        workspace="default",
        project="demo",
        snapshot=reads.snapshot,
        change=reads.change,
        **options,
    )
    return follow, iter(follow)


def notify(engine, task=TASK, **extra):
    engine.listener.dispatch({"workspace": "default", "project": "demo", "task": task, **extra})


def next_update(updates, timeout=5.0):
    with gevent.Timeout(timeout, AssertionError(f"no update within {timeout}s")):
        return next(updates)


def test_it_subscribes_before_the_first_read_so_a_change_meanwhile_is_not_lost(engine, reads):
    def snapshot():
        assert len(engine.listener.subscribers) == 1  # subscribed already
        notify(engine)  # a change that commits while the snapshot is read
        return reads.snapshot()

    follow = Follow(
        engine, workspace="default", project="demo", snapshot=snapshot, change=reads.change
    )
    updates = iter(follow)
    assert isinstance(next_update(updates), Snapshot)
    assert next_update(updates) == Change({"id": TASK, "status": "running"})


def test_a_change_a_purge_and_a_row_that_is_gone(engine, reads):
    _, updates = following(engine, reads)
    assert next_update(updates) == Snapshot({TASK: {"id": TASK, "status": "running"}})
    notify(engine)
    assert next_update(updates) == Change({"id": TASK, "status": "running"})  # the control
    notify(engine, removed=True)
    assert next_update(updates) == Removed(TASK)
    assert len(reads.changes) == 1  # a purge notice is the removal: nothing is read
    notify(engine, task="0f0e0d0c-0000-4000-8000-000000000000")  # a row no longer there
    assert next_update(updates) == Removed("0f0e0d0c-0000-4000-8000-000000000000")


def test_a_listener_reconnect_reads_a_whole_snapshot_again(engine, reads):
    _, updates = following(engine, reads)
    assert isinstance(next_update(updates), Snapshot)
    for subscription in engine.listener.subscribers:
        subscription.offer(REBOOTSTRAP)
    assert isinstance(next_update(updates), Snapshot)
    assert reads.snapshots == 2


def test_a_failed_first_read_keeps_the_stream_and_snapshots_once_it_can(engine, reads, monkeypatch):
    monkeypatch.setattr(follows, "RETRY_S", 0.05)
    reads.failing = 2
    _, updates = following(engine, reads)
    assert next_update(updates) == Idle()  # a keepalive while the database is away
    assert next_update(updates) == Idle()
    assert isinstance(next_update(updates), Snapshot)


def test_a_failed_re_read_keeps_the_stream_and_sends_a_whole_fresh_snapshot(
    engine, reads, monkeypatch
):
    monkeypatch.setattr(follows, "RETRY_S", 0.05)
    _, updates = following(engine, reads)
    assert isinstance(next_update(updates), Snapshot)
    reads.failing = 2  # the re-read of the change, then the first snapshot after it
    reads.rows["0f0e0d0c-0000-4000-8000-000000000000"] = {"id": "new"}
    notify(engine)
    assert next_update(updates) == Idle()
    assert next_update(updates) == Idle()
    update = next_update(updates)
    assert isinstance(update, Snapshot) and "0f0e0d0c-0000-4000-8000-000000000000" in update.value
    notify(engine)  # and it follows changes again
    assert isinstance(next_update(updates), Change)


def test_silence_is_an_idle_after_the_keepalive_setting(engine, reads):
    engine.settings = Settings(stream_keepalive_s=0.1)
    follow, updates = following(engine, reads)
    assert follow.keepalive_s == 0.1
    assert isinstance(next_update(updates), Snapshot)
    started = time.monotonic()
    assert next_update(updates) == Idle()
    assert 0.05 <= time.monotonic() - started < 2.0


def test_due_work_is_read_on_an_idle_without_waiting_for_the_keepalive(engine, reads):
    due = [0.0]  # seconds until the adapter's work is due
    _, updates = following(engine, reads, idle=lambda: "expired", wait_s=lambda: due[0])
    assert isinstance(next_update(updates), Snapshot)
    assert next_update(updates, timeout=1.0) == Idle("expired")


def test_a_runners_live_frame_is_passed_on_unread(engine, reads):
    follow = Follow(
        engine,
        workspace="default",
        task=TASK,
        snapshot=reads.snapshot,
        change=reads.change,
        live=True,
    )
    updates = iter(follow)
    assert isinstance(next_update(updates), Snapshot)
    engine.live.publish(TASK, "gateway", {"type": "delta", "text": "hi"})
    assert next_update(updates) == Live({"type": "delta", "text": "hi"})
    assert reads.changes == []


def test_the_listener_closing_ends_it_and_every_way_out_unsubscribes(engine, reads):
    _, updates = following(engine, reads)
    assert isinstance(next_update(updates), Snapshot)
    assert len(engine.listener.subscribers) == 1  # the control
    for subscription in engine.listener.subscribers:
        subscription.offer(CLOSED)
    with pytest.raises(StopIteration):
        next_update(updates)
    assert engine.listener.subscribers == set()

    follow = Follow(
        engine, workspace="default", task=TASK, snapshot=reads.snapshot, change=reads.change
    )
    follow.close()  # a 404 before the stream
    assert engine.listener.subscribers == set()
    watching = Follow(
        engine,
        workspace="default",
        task=TASK,
        snapshot=reads.snapshot,
        change=reads.change,
        live=True,
    )
    updates = iter(watching)
    next_update(updates)
    updates.close()  # the viewer left
    engine.live.publish(TASK, "gateway", {"type": "delta", "text": "hi"})
    assert engine.listener.subscribers == set() and watching.subscription.queue.empty()
