"""Claiming and renewing leases: the only execution right a process has on a task."""

from uuid import UUID

from engine.core.status import Status
from engine.core.transitions import Claim, Move, transition
from engine.db import Database


def claim(
    db: Database,
    task_id: UUID,
    *,
    owner: str,
    lease_ttl_s: float,
    workspace: str,
    from_status: Status,
    actor: str | None = None,
    notices=None,
) -> dict | None:
    """queued|blocked -> running under a new lease epoch; the claimed row, or None if it moved
    (or has a cancel pending: a claim never starts a run the user cancelled).

    With `notices` (the claiming process's RunnerNotices, engine/core/notices.py) the claim is
    announced with the run's own writes instead of notifying at once: the process that will run
    the task is the only one whose decisions depend on its lease, and it made the claim.
    """
    move = Move(
        task_id,
        Status.RUNNING,
        from_statuses=(from_status,),
        claim=Claim(owner, lease_ttl_s),
        workspace=workspace,
        actor=actor,
        phase="starting",
    )
    rows = transition(db, move, whole_rows=True, notices=notices)
    return rows[0] if rows else None


def renew_all(
    db: Database,
    held: dict[UUID, int],
    *,
    owner: str,
    lease_ttl_s: float,
    retry_until: float | None = None,
) -> dict[UUID, bool]:
    """Renew every held lease in one statement: {task id still held: cancel pending}. Through a
    database blip it is retried until `retry_until` (time.monotonic())."""
    if not held:
        return {}
    # In id order, like every multi-row write of tasks: two statements locking rows in one
    # order can never wait on each other in a cycle.
    ids = sorted(held, key=str)
    rows = db.all(
        "task_renew_leases_if_held",
        retry_until=retry_until,
        task_ids=ids,
        epochs=[held[i] for i in ids],
        owner=owner,
        lease_ttl_s=lease_ttl_s,
        now=None,
    )
    return {row["id"]: row["cancel_pending"] for row in rows}
