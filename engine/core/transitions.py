"""The one guarded transition: the only code that writes a task's status."""

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from uuid import UUID

from engine.core.abort import AbortSignal
from engine.core.errors import IllegalTransition
from engine.core.status import LEASED, TERMINAL, TRANSITIONS, Status, sources_of
from engine.db import Database, write_key
from engine.operations import metrics


@dataclass(frozen=True)
class Guard:
    """Extra preconditions the CAS re-checks against the row (and the database clock)."""

    #: A lease holder's write: the row must still carry this epoch and owner.
    expect_epoch: int | None = None
    expect_owner: str | None = None
    #: Tenant scoping for request-driven transitions.
    namespace: str | None = None
    if_lease_expired: bool = False
    #: True: a cancel must be pending; False: none may be; None: either.
    if_cancel_pending: bool | None = None
    cancel_older_than_s: float | None = None
    claimed_older_than_s: float | None = None
    created_older_than_s: float | None = None


#: No precondition beyond the transition table's source statuses.
NO_GUARD = Guard()


def transition(
    db: Database,
    task_ids: list[UUID] | UUID,
    to: Status,
    *,
    from_statuses: list[Status] | None = None,
    guard: Guard = NO_GUARD,
    reason: str | None = None,
    message: str | None = None,
    phase: str | None = None,
    actor: str | None = None,
    claim_owner: str | None = None,
    lease_ttl_s: float | None = None,
    now: datetime | None = None,
    abort: AbortSignal | None = None,
    notices=None,
    whole_rows: bool = False,
) -> list[dict]:
    """Move tasks to `to` where the table and the guard allow it; the rows that moved.

    Each moved row says what a mover reads back: id, namespace, project_id, status,
    previous_status, lease_epoch, lease_owner, cancel_requested_at, created_at, finished_at.
    `whole_rows` for a caller that hands the task on (a claim's runner, a cancel's snapshot).

    `from_statuses` narrows the table's sources (a cancel only moves queued/blocked at once);
    naming a pair the table lacks raises IllegalTransition. A claim (`claim_owner`) starts a new
    lease epoch; leaving the leased statuses releases the lease. `notices` only for a run's own
    move (its claim, its status moves): the statement does not notify, and the process's runner
    notices (engine/core/notices.py) announce the moved rows with their next tick.
    """
    allowed = sources_of(to)
    if from_statuses is None:
        from_statuses = allowed
    illegal = [src for src in from_statuses if (src, to) not in TRANSITIONS]
    if illegal or not from_statuses:
        raise IllegalTransition(f"{', '.join(illegal) or 'nothing'} -> {to} is not a transition")
    if claim_owner is not None and (to is not Status.RUNNING or lease_ttl_s is None):
        raise IllegalTransition("only a move to running claims a lease, and it needs a TTL")
    if to in LEASED and claim_owner is None and guard.expect_epoch is None:
        raise IllegalTransition(f"a move to {to} is a lease holder's write")
    ids = [task_ids] if isinstance(task_ids, (UUID, str)) else task_ids
    sources, verdicts, verdicts_json = _verdicts(to, tuple(from_statuses))
    move_key = write_key()
    moved = db.all(
        "task_transition" if whole_rows else "task_transition_moved",
        abort=abort,
        move_key=move_key,
        task_ids=_uuid_array(ids),
        to=str(to),
        from_statuses=sources,
        verdicts=verdicts_json,
        reason=reason,
        message=message,
        phase=phase,
        actor=actor,
        claim_owner=claim_owner,
        lease_ttl_s=lease_ttl_s,
        now=now,
        namespace=guard.namespace,
        expect_epoch=guard.expect_epoch,
        expect_owner=guard.expect_owner,
        if_lease_expired=guard.if_lease_expired,
        if_cancel_pending=guard.if_cancel_pending,
        cancel_older_than_s=guard.cancel_older_than_s,
        claimed_older_than_s=guard.claimed_older_than_s,
        created_older_than_s=guard.created_older_than_s,
        notify=notices is None,
    )
    if len(moved) < len(ids):
        moved += own_moves_already_made(db, ids, moved, move_key)
    if notices is not None:
        for row in moved:
            notices.changed(row["namespace"], row["project_id"], row["id"])
    metrics.record_transitions(moved, verdicts, str(to), terminal=to in TERMINAL)
    return moved


def own_moves_already_made(db: Database, ids, moved: list[dict], move_key: str) -> list[dict]:
    """The tasks this move left out that it moved after all: its statement was sent again after
    a lost connection (engine/db.py), and the first attempt had committed. Its status event,
    recorded under `move_key`, says so; the rows are read back whole. A task that merely was not
    allowed to move has no such event: nothing comes back for it."""
    missing = {str(i) for i in ids} - {str(row["id"]) for row in moved}
    return db.all("task_list_moved_by_key", task_ids=_uuid_array(sorted(missing)), key=move_key)


@lru_cache(maxsize=64)
def _verdicts(to: Status, from_statuses: tuple[Status, ...]) -> tuple[str, dict[str, str], str]:
    """The sources as a PostgreSQL array literal, and each source's verdict (a dict and JSON)."""
    verdicts = {str(src): TRANSITIONS[(src, to)] for src in from_statuses}
    return "{" + ",".join(verdicts) + "}", verdicts, json.dumps(verdicts)


def _uuid_array(ids) -> str:
    """The ids as a PostgreSQL array literal.

    psycopg adapts a Python list by inspecting it on every call (~100 µs for the two lists of a
    transition, as much as the rest of the call's client work); a literal of canonical UUIDs
    (which contain no quoting characters) is a plain string. `UUID(...)` refuses anything else.
    """
    return "{" + ",".join(str(i if isinstance(i, UUID) else UUID(str(i))) for i in ids) + "}"
