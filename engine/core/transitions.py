"""The one guarded transition: the only code that writes a task's status."""

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from uuid import UUID

from engine.abort import AbortSignal
from engine.core.status import CANCEL_REFUSES, LEASED, TERMINAL, TRANSITIONS, Status, sources_of
from engine.db import Database, write_key
from engine.errors import IllegalTransition
from engine.operations import metrics


@dataclass(frozen=True)
class Fence:
    """A lease holder's write: the row must still carry this epoch and owner."""

    epoch: int
    owner: str


@dataclass(frozen=True)
class Claim:
    """A claim's new lease: the next epoch, held by `owner` for `ttl_s` seconds."""

    owner: str
    ttl_s: float


@dataclass(frozen=True)
class Overdue:
    """The reaper's guard on a sweep's move: what the task must be past, re-checked by the CAS
    against the row and the database clock. A limit left at None is not asked."""

    #: The lease has expired: the process that held it is gone.
    lease_expired: bool = False
    #: The cancel request is older than this (the acknowledgement deadline).
    cancel_older_than_s: float | None = None
    #: The lease was claimed longer ago than this (the maximum run).
    claimed_older_than_s: float | None = None
    #: The task was created longer ago than this (the start deadline).
    created_older_than_s: float | None = None


#: A move no sweep guards.
NOT_OVERDUE = Overdue()


@dataclass(frozen=True)
class Move:
    """One guarded status move of some tasks: legal by construction (IllegalTransition).

    Every precondition left at its default is not asked; the CAS re-checks the others against
    the row and the database clock.
    """

    #: One task or several (the reaper moves a batch).
    task_ids: UUID | Sequence[UUID]
    to: Status
    #: Narrows the table's sources (a cancel moves only what it read); None: all of them.
    from_statuses: tuple[Status, ...] | None = None
    # -- who may move it -------------------------------------------------------------------------
    #: A claim (queued|blocked -> running) starts a new lease epoch.
    claim: Claim | None = None
    #: A lease holder's move.
    fence: Fence | None = None
    #: A request's move: only within the caller's workspace.
    workspace: str | None = None
    # -- what the row must say now (a runner's completion, the reaper's sweeps) ------------------
    #: True: a cancel must be pending; False: none may be; None: either. A move to a status a
    #: pending cancel refuses (status.py, CANCEL_REFUSES) always asks False.
    if_cancel_pending: bool | None = None
    #: The reaper's sweep guard: what the task must be past (None: nothing).
    overdue: Overdue | None = None
    # -- what the move records -------------------------------------------------------------------
    reason: str | None = None
    message: str | None = None
    phase: str | None = None
    actor: str | None = None
    #: A lease holder's timeline steps ({kind, payload}, scrubbed by its handle), recorded in
    #: order before the verdict, and keys merged into the artifact summary, in the same statement.
    steps: tuple[dict, ...] = ()
    artifacts: dict | None = None
    #: The database clock, pinned by tests (None: now()).
    now: datetime | None = None

    def __post_init__(self):
        _sources(self.to, self.from_statuses)  # IllegalTransition: a pair the table lacks
        if self.claim is not None and self.to is not Status.RUNNING:
            raise IllegalTransition("only a move to running claims a lease")
        if self.to in LEASED and self.claim is None and self.fence is None:
            raise IllegalTransition(f"a move to {self.to} is a lease holder's write")
        if (self.steps or self.artifacts is not None) and self.fence is None:
            raise IllegalTransition("only a lease holder's move records steps and artifacts")
        if self.to in CANCEL_REFUSES and self.if_cancel_pending:
            raise IllegalTransition(f"a pending cancel refuses every move to {self.to}")

    @property
    def sources(self) -> tuple[Status, ...]:
        """The statuses this move leaves."""
        return _sources(self.to, self.from_statuses)


def transition(
    db: Database,
    move: Move,
    *,
    whole_rows: bool = False,
    abort: AbortSignal | None = None,
    notices=None,
) -> list[dict]:
    """Make `move` where the table and its preconditions allow it; the rows that moved.

    Each moved row says what a mover reads back: id, workspace, project_id, status,
    previous_status, lease_epoch, lease_owner, cancel_requested_at, created_at, finished_at.
    `whole_rows` for a caller that hands the task on (a claim's runner, a cancel's snapshot).

    Leaving the leased statuses releases the lease. `notices` only for a run's own move (its
    claim, its status moves): the statement does not notify, and the process's runner notices
    (engine/core/notices.py) announce the moved rows with their next tick.
    """
    move_key = write_key()
    moved = db.all(
        "task_transition" if whole_rows else "task_transition_moved",
        abort=abort,
        **statement_params(move, notify=notices is None, move_key=move_key),
    )
    ids = [move.task_ids] if isinstance(move.task_ids, (UUID, str)) else move.task_ids
    if len(moved) < len(ids):  # a statement sent again: had its first attempt moved them?
        moved += own_moves_already_made(db, ids, moved, move_key)
    if notices is not None:
        for row in moved:
            notices.changed(row["workspace"], row["project_id"], row["id"])
    _, verdicts, _ = _verdicts(move.to, move.sources)
    metrics.record_transitions(moved, verdicts, str(move.to), terminal=move.to in TERMINAL)
    return moved


def statement_params(move: Move, *, notify: bool, move_key: str) -> dict:
    """The parameters of task_transition(_moved) for `move`, recorded under `move_key` (a
    benchmark sends them raw)."""
    sources, _, verdicts_json = _verdicts(move.to, move.sources)
    ids = [move.task_ids] if isinstance(move.task_ids, (UUID, str)) else move.task_ids
    claim, fence, overdue = move.claim, move.fence, move.overdue or NOT_OVERDUE
    return {
        "task_ids": _uuid_array(ids),
        "to": str(move.to),
        "from_statuses": sources,
        "verdicts": verdicts_json,
        "reason": move.reason,
        "message": move.message,
        "phase": move.phase,
        "actor": move.actor,
        # JSON text, like the verdicts: no per-call adaptation of a Python list.
        "steps": json.dumps(list(move.steps)) if move.steps else "[]",
        "patch": move.artifacts,
        "claim_owner": claim.owner if claim else None,
        "claim_ttl_s": claim.ttl_s if claim else None,
        "now": move.now,
        "workspace": move.workspace,
        "fence_epoch": fence.epoch if fence else None,
        "fence_owner": fence.owner if fence else None,
        "if_lease_expired": overdue.lease_expired,
        # Checked against the newest row under its lock: a cancel request (which needs a leased
        # task) and such a move can never both succeed.
        "if_cancel_pending": False if move.to in CANCEL_REFUSES else move.if_cancel_pending,
        "cancel_older_than_s": overdue.cancel_older_than_s,
        "claimed_older_than_s": overdue.claimed_older_than_s,
        "created_older_than_s": overdue.created_older_than_s,
        "notify": notify,
        "move_key": move_key,
    }


@lru_cache(maxsize=64)
def _sources(to: Status, from_statuses: tuple[Status, ...] | None) -> tuple[Status, ...]:
    """`from_statuses`, or every status the table moves to `to` from; IllegalTransition when
    one of them (or nothing) leads to `to`."""
    sources = tuple(sources_of(to)) if from_statuses is None else from_statuses
    illegal = [src for src in sources if (src, to) not in TRANSITIONS]
    if illegal or not sources:
        raise IllegalTransition(f"{', '.join(illegal) or 'nothing'} -> {to} is not a transition")
    return sources


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
