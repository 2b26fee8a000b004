"""The transition table, exhaustively, through the one guarded transition."""

import itertools
from datetime import UTC, datetime

import pytest

from engine.core.status import CANCEL_REFUSES, TRANSITIONS, Status
from engine.core.transitions import Claim, Fence, Move, transition
from engine.errors import IllegalTransition

PAIRS = list(itertools.product(Status, Status))


def _attempt(db, row, to):
    asks = {}
    if to is Status.RUNNING:
        asks = {"claim": Claim("me", 60)}
    elif to is Status.APPLYING:
        asks = {"fence": Fence(row["lease_epoch"], row["lease_owner"])}
    return transition(db, Move(row["id"], to, reason="test", **asks))


@pytest.mark.parametrize("src,dst", PAIRS, ids=[f"{a}->{b}" for a, b in PAIRS])
def test_every_pair_is_accepted_or_rejected_as_the_table_says(
    runtime, insert_task, sql_conn, src, dst
):
    row = insert_task(status=str(src))
    try:
        moved = _attempt(runtime.db, row, dst)
    except IllegalTransition:  # no row of the table leads to dst at all (e.g. queued)
        moved = []
    stored = sql_conn.execute(
        "SELECT status FROM deploy_tasks WHERE id = %s", (row["id"],)
    ).fetchone()
    events = sql_conn.execute(
        "SELECT payload FROM deploy_task_events WHERE task_id = %s AND kind = 'status'",
        (row["id"],),
    ).fetchall()
    if (src, dst) in TRANSITIONS:
        assert [m["status"] for m in moved] == [str(dst)]
        assert stored["status"] == str(dst)
        assert events[-1]["payload"]["verdict"] == TRANSITIONS[(src, dst)]
        assert events[-1]["payload"]["from"] == str(src)
    else:
        assert moved == []
        assert stored["status"] == str(src)
        assert events == []
        with pytest.raises(IllegalTransition):
            Move(
                row["id"],
                dst,
                from_statuses=(src,),
                claim=Claim("me", 60) if dst is Status.RUNNING else None,
            )


@pytest.mark.parametrize("src,dst", list(TRANSITIONS), ids=[f"{a}->{b}" for a, b in TRANSITIONS])
def test_a_pending_cancel_refuses_a_claim_a_park_and_a_completion_and_nothing_else(
    runtime, insert_task, src, dst
):
    """A park (blocked) with a cancel pending would leave no runner to acknowledge it, a claim
    would start a run the user cancelled, a completion would tell them it completed."""
    row = insert_task(status=str(src), cancel_requested_at=datetime.now(UTC))
    moved = _attempt(runtime.db, row, dst)
    assert [m["status"] for m in moved] == ([] if dst in CANCEL_REFUSES else [str(dst)])
    if dst in CANCEL_REFUSES:
        with pytest.raises(IllegalTransition):  # a move cannot ask for the opposite
            Move(
                row["id"],
                dst,
                claim=Claim("me", 60) if dst is Status.RUNNING else None,
                if_cancel_pending=True,
            )


def test_claim_starts_a_new_epoch_and_terminal_releases_the_lease(runtime, insert_task, sql_conn):
    row = insert_task(status="queued")
    claimed = transition(
        runtime.db, Move(row["id"], Status.RUNNING, claim=Claim("me", 60)), whole_rows=True
    )[0]
    assert claimed["lease_epoch"] == row["lease_epoch"] + 1
    assert claimed["lease_owner"] == "me" and claimed["lease_expires_at"] is not None
    moved = transition(
        runtime.db,
        Move(
            row["id"],
            Status.FAILED,
            fence=Fence(claimed["lease_epoch"], "me"),
            reason="x",
            message="y",
        ),
    )
    assert [(m["id"], m["previous_status"], m["status"]) for m in moved] == [
        (row["id"], "running", "failed")
    ]
    failed = sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (row["id"],)).fetchone()
    assert failed["lease_owner"] is None and failed["lease_expires_at"] is None
    assert failed["finished_at"] is not None
    assert (failed["failure_reason"], failed["failure_message"]) == ("x", "y")


def test_a_move_into_a_leased_status_needs_a_claim_or_the_lease(runtime, insert_task):
    row = insert_task(status="running")
    with pytest.raises(IllegalTransition):
        Move(row["id"], Status.APPLYING)
    with pytest.raises(IllegalTransition):
        Move(row["id"], Status.RUNNING)
    with pytest.raises(IllegalTransition):  # a claim is only ever a move to running
        Move(row["id"], Status.APPLYING, claim=Claim("me", 60), fence=Fence(1, "me"))
    assert Move(row["id"], Status.APPLYING, fence=Fence(1, "me"))  # the control


def test_stale_epoch_writes_are_no_ops(runtime, insert_task, sql_conn):
    row = insert_task(status="running", lease_owner="me", lease_epoch=7)
    stale = Fence(6, "me")
    assert transition(runtime.db, Move(row["id"], Status.COMPLETED, fence=stale)) == []
    assert transition(runtime.db, Move(row["id"], Status.FAILED, fence=stale)) == []
    other_owner = Fence(7, "not-me")
    assert transition(runtime.db, Move(row["id"], Status.CANCELLED, fence=other_owner)) == []
    assert (
        sql_conn.execute("SELECT status FROM deploy_tasks WHERE id = %s", (row["id"],)).fetchone()[
            "status"
        ]
        == "running"
    )


def test_a_lease_holders_move_records_its_steps_before_its_verdict_and_merges_its_artifacts(
    runtime, insert_task, sql_conn
):
    row = insert_task(status="running", lease_owner="me", lease_epoch=7)
    steps = ({"kind": "step", "payload": {"step": "render", "state": "done"}},)
    with pytest.raises(IllegalTransition):  # only a fenced move carries a runner's steps
        Move(row["id"], Status.FAILED, steps=steps)
    with pytest.raises(IllegalTransition):
        Move(row["id"], Status.FAILED, artifacts={"plannedResources": []})

    def events():
        return [
            (r["kind"], r["payload"].get("step") or r["payload"].get("to"), r["key"] is None)
            for r in sql_conn.execute(
                "SELECT kind, payload, key FROM deploy_task_events WHERE task_id = %s ORDER BY seq",
                (row["id"],),
            )
        ]

    planned = {"plannedResources": [{"kind": "Deployment", "name": "web"}]}
    stale = Move(row["id"], Status.APPLYING, fence=Fence(6, "me"), steps=steps, artifacts=planned)
    assert transition(runtime.db, stale) == []
    assert events() == []  # the control: fenced off, the steps are not written either
    held = Move(
        row["id"], Status.APPLYING, fence=Fence(7, "me"), steps=steps * 2, artifacts=planned
    )
    assert transition(runtime.db, held)
    # The steps first, in order and keyless (the verdict's key is the move's), then the verdict.
    assert events() == [
        ("step", "render", True),
        ("step", "render", True),
        ("status", "applying", False),
    ]
    summary = sql_conn.execute(
        "SELECT artifact_summary FROM deploy_tasks WHERE id = %s", (row["id"],)
    ).fetchone()["artifact_summary"]
    assert summary["plannedResources"] == planned["plannedResources"]


def test_python_and_postgres_enums_agree(sql_conn):
    labels = [
        r["enumlabel"]
        for r in sql_conn.execute(
            "SELECT enumlabel FROM pg_enum JOIN pg_type t ON t.oid = enumtypid "
            "WHERE t.typname = 'task_status' ORDER BY enumsortorder"
        ).fetchall()
    ]
    assert labels == [str(s) for s in Status]


def test_namespace_guard_keeps_tenants_apart(runtime, insert_task):
    row = insert_task(status="queued", workspace="other")
    assert transition(runtime.db, Move(row["id"], Status.CANCELLED, workspace="default")) == []
