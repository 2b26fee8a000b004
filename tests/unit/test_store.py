"""The deployment-tasks store against synthetic stream events (no database, clock pinned)."""

import pytest

from engine.core.status import Status
from engine.readside.store import GRACE_WINDOW_S, TaskStore
from tests.helpers import at, iso


def ids(items):
    return [i["id"] for i in items]


def test_bootstrap_keeps_only_the_project_and_orders_chips_newest_first(projection):
    a = projection(created=1)
    b = projection(created=3)
    other = projection(created=2, project="elsewhere")
    store = TaskStore("demo")
    changes = store.bootstrap([a, other, b], now=at(10))
    assert changes.reset and changes.cards
    assert ids(store.chips()) == [b["id"], a["id"]]
    assert changes.upserted == [b["id"], a["id"]]
    assert other["id"] not in store


def test_upsert_inserts_then_updates_in_place(projection):
    store = TaskStore("demo")
    store.bootstrap([], now=at(0))
    task = projection("running", created=1)
    assert store.apply({"type": "upsert", "item": task}, now=at(1)).upserted == [task["id"]]
    applying = {**task, "status": "applying"}
    changes = store.apply({"type": "upsert", "item": applying}, now=at(2))
    assert changes.upserted == [task["id"]] and changes.removed == []
    assert store.get(task["id"])["status"] == "applying"
    assert len(store) == 1


def test_remove_event_drops_the_task_and_ignores_unknown_ids(projection):
    task = projection("running")
    store = TaskStore("demo")
    store.bootstrap([task], now=at(0))
    assert store.apply({"type": "remove", "id": task["id"]}, now=at(1)).removed == [task["id"]]
    assert task["id"] not in store and store.chips() == []
    assert not store.apply({"type": "remove", "id": task["id"]}, now=at(2))


def test_a_snapshot_event_replaces_everything(projection):
    old = projection("running")
    store = TaskStore("demo")
    store.bootstrap([old], now=at(0))
    fresh = projection("queued", created=5)
    changes = store.apply({"type": "snapshot", "items": [fresh]}, now=at(6))
    assert changes.reset
    assert ids(store.chips()) == [fresh["id"]]


def test_unknown_event_types_are_rejected_loudly():
    with pytest.raises(ValueError):
        TaskStore("demo").apply({"type": "bogus"}, now=at(0))


def test_completed_and_cancelled_leave_after_the_grace_window(projection):
    done = projection("completed", created=0, finished=10)
    cancelled = projection("cancelled", created=0, finished=20)
    running = projection("running", created=0)
    store = TaskStore("demo")
    store.bootstrap([done, cancelled, running], now=at(11))
    assert len(store) == 3
    assert store.next_expiry() == at(10 + GRACE_WINDOW_S)
    assert not store.expire(at(10 + GRACE_WINDOW_S - 1))
    assert store.expire(at(10 + GRACE_WINDOW_S)).removed == [done["id"]]
    assert store.expire(at(20 + GRACE_WINDOW_S)).removed == [cancelled["id"]]
    # Active tasks never expire; nothing else is left to wait for.
    assert ids(store.chips()) == [running["id"]]
    assert store.next_expiry() is None


def test_a_task_finishing_long_ago_never_enters(projection):
    stale = projection("completed", created=0, finished=0)
    store = TaskStore("demo")
    store.bootstrap([], now=at(0))
    changes = store.apply({"type": "upsert", "item": stale}, now=at(GRACE_WINDOW_S + 1))
    assert changes.removed == [stale["id"]] and changes.upserted == []
    assert stale["id"] not in store


def test_an_upsert_that_finishes_a_task_starts_its_grace_window(projection):
    task = projection("applying", created=0)
    store = TaskStore("demo")
    store.bootstrap([task], now=at(0))
    store.apply(
        {"type": "upsert", "item": {**task, "status": "completed", "finishedAt": iso(100)}},
        now=at(100),
    )
    assert store.get(task["id"])["status"] == "completed"
    assert store.expire(at(100 + GRACE_WINDOW_S)).removed == [task["id"]]


def test_failed_keeps_attention_until_superseded_by_a_redeploy(projection):
    failed = projection("failed", created=0, finished=10)
    store = TaskStore("demo")
    store.bootstrap([failed], now=at(11))
    assert store.attention(failed["id"]) is Status.FAILED
    # Still there well past the grace window: a failure is never missed.
    assert not store.expire(at(10 + GRACE_WINDOW_S + 60))
    assert store.attention(failed["id"]) is Status.FAILED
    # A redeploy arrives: the predecessor is re-rendered as superseded (lineage on the successor).
    clone = projection("running", created=GRACE_WINDOW_S + 61, predecessor=failed["id"])
    changes = store.apply({"type": "upsert", "item": clone}, now=at(GRACE_WINDOW_S + 61))
    assert store.is_superseded(failed["id"])
    assert store.successor_of(failed["id"]) == clone["id"]
    # ... and, now that it needs no attention, its grace window is over: it leaves at once.
    assert failed["id"] in changes.removed
    assert failed["id"] not in store
    assert ids(store.chips()) == [clone["id"]]


def test_a_fresh_failure_superseded_stays_visible_without_attention(projection):
    failed = projection("failed", created=0, finished=10)
    store = TaskStore("demo")
    store.bootstrap([failed], now=at(11))
    clone = projection("running", created=12, predecessor=failed["id"])
    changes = store.apply({"type": "upsert", "item": clone}, now=at(12))
    assert changes.upserted == [clone["id"], failed["id"]]
    assert store.is_superseded(failed["id"]) and store.attention(failed["id"]) is None
    assert store.expire(at(10 + GRACE_WINDOW_S)).removed == [failed["id"]]


def test_supersession_from_the_servers_successor_id(projection):
    failed = projection("failed", created=0, finished=10, successor="someone-else")
    store = TaskStore("demo")
    store.bootstrap([failed], now=at(11))
    assert store.is_superseded(failed["id"]) and store.attention(failed["id"]) is None


def test_a_failed_task_keeps_attention_until_dismissed_however_old(projection):
    failed = projection("failed", created=0, finished=0)
    store = TaskStore("demo")
    store.bootstrap([failed], now=at(1))
    a_year = 365 * 86400
    assert store.expire(at(a_year)).removed == [] and store.next_expiry() is None
    assert store.attention(failed["id"]) is Status.FAILED
    assert store.dismiss([failed["id"]], now=at(a_year + 1)).removed == [failed["id"]]


def test_a_failed_task_bootstrapped_long_after_it_failed_still_shows(projection):
    failed = projection("failed", created=0, finished=0)
    store = TaskStore("demo")
    store.bootstrap([failed], now=at(30 * 86400))
    assert ids(store.chips()) == [failed["id"]]


def test_cancelled_needs_no_attention_and_blocked_keeps_its_reminder(projection):
    cancelled = projection("cancelled", created=0, finished=5)
    blocked = projection("blocked", created=1)
    store = TaskStore("demo", dismissed={blocked["id"]})
    store.bootstrap([cancelled, blocked], now=at(6))
    assert store.attention(cancelled["id"]) is None
    # A blocked task cannot be dismissed: it keeps asking, however long it waits.
    assert store.attention(blocked["id"]) is Status.BLOCKED
    assert blocked["id"] in store
    assert store.expire(at(GRACE_WINDOW_S * 1000)).removed == [cancelled["id"]]
    assert ids(store.chips()) == [blocked["id"]]


def test_dismissed_finished_tasks_do_not_show(projection):
    failed = projection("failed", created=0, finished=1)
    running = projection("running", created=2)
    store = TaskStore("demo", dismissed={failed["id"], running["id"]})
    store.bootstrap([failed, running], now=at(3))
    assert ids(store.chips()) == [running["id"]]
    other = projection("failed", created=3, finished=4)
    store.apply({"type": "upsert", "item": other}, now=at(5))
    assert store.dismiss([other["id"]], now=at(6)).removed == [other["id"]]


def test_project_switch_drops_everything_and_ignores_the_old_project(projection):
    a = projection("running", project="demo")
    store = TaskStore("demo")
    store.bootstrap([a], now=at(0))
    changes = store.switch_project("shop")
    assert changes.reset and store.chips() == [] and store.project_id == "shop"
    # A late event of the old project (e.g. still in flight on the old stream) never leaks in.
    late = {**a, "status": "applying"}
    assert not store.apply({"type": "upsert", "item": late}, now=at(1)).upserted
    assert a["id"] not in store
    b = projection("queued", project="shop", created=2)
    store.apply({"type": "upsert", "item": b}, now=at(2))
    assert ids(store.chips()) == [b["id"]]


def test_placeholders_are_the_active_tasks_oldest_first(projection):
    first = projection("running", created=1)
    done = projection("completed", created=2, finished=3)
    second = projection("blocked", created=4)
    store = TaskStore("demo")
    store.bootstrap([second, done, first], now=at(5))
    assert ids(store.placeholders()) == [first["id"], second["id"]]
    store.apply(
        {"type": "upsert", "item": {**first, "status": "cancelled", "finishedAt": iso(6)}},
        now=at(6),
    )
    assert ids(store.placeholders()) == [second["id"]]


def test_resource_cards_belong_to_the_newest_task_and_report_changes(projection):
    old = projection("failed", created=0, finished=1, applied=[("Deployment", "web")])
    store = TaskStore("demo")
    store.bootstrap([old], now=at(2))
    [card] = store.resource_cards()
    assert (card.kind, card.name, card.owner_id, card.owner_status) == (
        "Deployment",
        "web",
        old["id"],
        "failed",
    )
    clone = projection(
        "applying",
        created=3,
        predecessor=old["id"],
        applied=[("Deployment", "web"), ("Service", "web")],
    )
    changes = store.apply({"type": "upsert", "item": clone}, now=at(3))
    assert changes.cards
    assert [(c.kind, c.owner_id) for c in store.resource_cards()] == [
        ("Deployment", clone["id"]),
        ("Service", clone["id"]),
    ]
    # A change that does not touch resources reports no card change.
    moved = {**clone, "canvas": {"x": 1, "y": 2}}
    assert not store.apply({"type": "upsert", "item": moved}, now=at(4)).cards
    completed = {**moved, "status": "completed", "finishedAt": iso(5)}
    assert store.apply({"type": "upsert", "item": completed}, now=at(5)).cards
    assert {c.owner_status for c in store.resource_cards()} == {"completed"}


def test_selectors_are_memoized_until_the_store_changes(projection):
    task = projection("running")
    store = TaskStore("demo")
    store.bootstrap([task], now=at(0))
    first = store.chips()
    assert store.chips() is first
    store.apply({"type": "upsert", "item": {**task, "status": "applying"}}, now=at(1))
    assert store.chips() is not first
    assert store.chips()[0]["status"] == "applying"
