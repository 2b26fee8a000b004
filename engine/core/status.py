"""Task statuses and the transition table (seed 000), as data."""

from enum import StrEnum


class Status(StrEnum):
    #: Inserted by create; left at once by the inline claim (actions) or a cancel. The reaper
    #: fails a row still queued past the start deadline (a crash between insert and claim).
    QUEUED = "queued"
    #: Claimed under a lease by the request that holds the kubeconfig. Left by the runner
    #: (applying, blocked, failed, cancelled), the reaper (expired lease, timeout, cancel
    #: deadline) or the shutdown drain.
    RUNNING = "running"
    #: Parked, leaseless, waiting for inputs as long as it takes; never entered with a cancel
    #: pending (CANCEL_REFUSES). Left by an input submission (inline claim) or a cancel, or by
    #: the reaper's cancel deadline should a cancel be pending on it all the same (a row parked
    #: before that rule).
    BLOCKED = "blocked"
    #: Artifacts generated and being applied, then verified (verify is a phase, not a status).
    #: Left like running, or to completed once every required result resource is ready.
    APPLYING = "applying"
    #: Terminal: every required result resource was ready.
    COMPLETED = "completed"
    #: Terminal: runner failure, readiness timeout, interrupted, timed out or never started.
    FAILED = "failed"
    #: Terminal: a cancel was acknowledged or forced. Nothing applied is ever deleted.
    CANCELLED = "cancelled"


ACTIVE = frozenset({Status.QUEUED, Status.RUNNING, Status.BLOCKED, Status.APPLYING})
LEASED = frozenset({Status.RUNNING, Status.APPLYING})
TERMINAL = frozenset({Status.COMPLETED, Status.FAILED, Status.CANCELLED})

#: (from, to) -> the verdict the task event records. Anything not listed is rejected.
TRANSITIONS: dict[tuple[Status, Status], str] = {
    (Status.QUEUED, Status.RUNNING): "claimed",
    (Status.QUEUED, Status.CANCELLED): "cancelled_before_start",
    (Status.QUEUED, Status.FAILED): "never_started",
    (Status.RUNNING, Status.BLOCKED): "inputs_requested",
    (Status.RUNNING, Status.APPLYING): "apply_started",
    (Status.BLOCKED, Status.RUNNING): "resumed",
    (Status.BLOCKED, Status.CANCELLED): "cancelled_while_blocked",
    (Status.RUNNING, Status.FAILED): "failed",
    (Status.APPLYING, Status.FAILED): "failed",
    (Status.RUNNING, Status.CANCELLED): "cancelled",
    (Status.APPLYING, Status.CANCELLED): "cancelled",
    (Status.APPLYING, Status.COMPLETED): "completed",
}


#: Moves a pending cancel refuses, whoever asks: a claim (nothing starts once a cancel was
#: accepted), a park (blocked has no runner left to acknowledge the cancel: the task would wait
#: for inputs with the cancel pending for ever) and a completion (a user who asked to cancel never
#: sees completed). The lease holder acknowledges the cancel instead (engine/core/handle.py).
CANCEL_REFUSES = frozenset({Status.RUNNING, Status.BLOCKED, Status.COMPLETED})


def sources_of(to: Status) -> list[Status]:
    """Every status the table allows a move to `to` from."""
    return [src for (src, dst) in TRANSITIONS if dst == to]
