"""Durable cleanup intents (seed 001): the `cleanup_jobs` rows, their states and triggers, the retry
ladder, and the functions that enqueue them. The cleanup worker runs them
(engine/maintenance/cleanup_worker.py).

A `cleanup_jobs` row is a durable cleanup intent with a snapshot of every handle, taken before the
task is touched. The worker claims due jobs (`attempts + 1`), revalidates the precondition before
each destructive step, and finishes with writes guarded on (state, attempts). A typed absence
(`NotFound`, a process confirmed dead, a row already gone) is done; any other error waits on the
retry ladder; the 8th failure is terminal `failed` and is never claimed again (the reaper mints a
fresh job for a purge or pause still due after FAILED_JOB_COOLDOWN_S).
"""

import logging
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from engine.db import Database
from engine.operations.streaks import Streaks

log = logging.getLogger(__name__)

#: A job is claimed at most this often; the last failure is terminal.
MAX_ATTEMPTS = 8
#: Wait after failed attempt n (1-based) before the next claim: 1 min, 5 min, 15 min, 1 h, 3 h,
#: 6 h, 12 h. The 8th failure has no delay: it is terminal.
RETRY_DELAYS_S = (60.0, 300.0, 900.0, 3600.0, 10800.0, 21600.0, 43200.0)
#: A job failed for good (MAX_ATTEMPTS) is re-minted by the reaper's sweep after this long (the
#: ladder's longest delay): a devbox outage of any length never strands a purge or a pause.
FAILED_JOB_COOLDOWN_S = 43200.0
#: A finished task's runner pauses its own devbox; the reaper steps in after this grace (the
#: default of the DEVBOX_PAUSE_GRACE_S setting).
DEVBOX_PAUSE_GRACE_S = 60.0
DEVBOX_PAUSE_BATCH = 50
#: Purges one reaper sweep enqueues: enough to start a drain that the worker continues a batch
#: per pass (PURGE_BATCH), few enough to keep every sweep short.
PURGE_KICK = 100


class Trigger(StrEnum):
    """What a cleanup job does (PostgreSQL enum cleanup_trigger)."""

    #: Reaper: a finished task whose devbox was never paused (its runner died first).
    DEVBOX_PAUSE = "devbox_pause"
    #: A devbox no task needs any more (enqueue_devbox_delete).
    DEVBOX_DELETE = "devbox_delete"
    #: A local process group whose stop could not be confirmed, or left by a dead process.
    RUNTIME_STOP = "runtime_stop"
    #: Reaper: a finished task past retention; its devbox is deleted first, then the row.
    RETENTION_PURGE = "retention_purge"


class JobState(StrEnum):
    """A cleanup job's state (PostgreSQL enum cleanup_job_state)."""

    #: Enqueued (by the reaper, reconciliation or a failed stop); the worker claims it.
    PENDING = "pending"
    #: Claimed by a worker (`attempts` counts claims). Past its deadline a claim counts as
    #: abandoned and the job is due again; an abandoned last attempt becomes failed.
    RUNNING = "running"
    #: An attempt failed with a retryable error; due again after the ladder's delay.
    RETRY_WAIT = "retry_wait"
    #: Terminal: done, or the resource was already absent.
    SUCCEEDED = "succeeded"
    #: Terminal: the 8th attempt failed. Keeps last_error; never claimed again automatically.
    FAILED = "failed"
    #: Terminal: the precondition no longer holds (e.g. the task is no longer past retention).
    CANCELLED = "cancelled"


def _runtime_snapshot(row: dict) -> dict:
    keys = (
        "id",
        "task_id",
        "workspace",
        "kind",
        "liveness",
        "label",
        "host",
        "owner",
        "owner_pid",
        "owner_start_ticks",
        "boot_id",
        "pid",
        "pgid",
        "start_ticks",
        "remote_id",
    )
    return {
        "runtime": {k: (str(row[k]) if isinstance(row.get(k), UUID) else row.get(k)) for k in keys}
    }


def enqueue(
    db: Database,
    trigger: Trigger,
    operation_id: str,
    snapshot: dict,
    *,
    task_id=None,
    workspace: str | None = None,
    host: str | None = None,
    needs_devbox: bool = False,
    now: datetime | None = None,
) -> dict:
    """Record a cleanup intent; an open (or terminally failed) job of the same operation is
    returned instead of a new one (its `created` is False)."""
    for _ in range(2):  # a concurrent enqueue can win the unique index between our read and insert
        row = db.one(
            "cleanup_job_enqueue",
            operation_id=operation_id,
            trigger=str(trigger),
            task_id=task_id,
            workspace=workspace,
            snapshot=snapshot,
            host=host,
            needs_devbox=needs_devbox,
            now=now,
        )
        if row is not None:
            return row
    raise RuntimeError(f"could not enqueue cleanup job {operation_id}")


def enqueue_runtime_stop(db: Database, row: dict, *, now: datetime | None = None) -> dict:
    """A durable stop of one local runtime, runnable only by a worker on its host."""
    return enqueue(
        db,
        Trigger.RUNTIME_STOP,
        f"runtime_stop:{row['id']}",
        _runtime_snapshot(row),
        task_id=row["task_id"],
        workspace=row["workspace"],
        host=row["host"],
        now=now,
    )


def enqueue_devbox_delete(
    db: Database, devbox_id: str, *, workspace: str, task_id=None, now: datetime | None = None
) -> dict:
    """A durable delete of a devbox (re-checked against active tasks before it runs)."""
    return enqueue(
        db,
        Trigger.DEVBOX_DELETE,
        f"devbox_delete:{workspace}:{devbox_id}",
        {
            "devboxId": devbox_id,
            "workspace": workspace,
            "taskId": str(task_id) if task_id else None,
        },
        task_id=task_id,
        workspace=workspace,
        needs_devbox=True,
        now=now,
    )


def streak_subject(trigger: Trigger | str) -> str:
    """The failure-streak subject of a trigger's jobs (one name for the worker and the reaper)."""
    if trigger == Trigger.RETENTION_PURGE:
        return "retention_purge"
    return f"cleanup:{trigger}"


def enqueue_devbox_pauses(
    db: Database,
    *,
    limit: int = DEVBOX_PAUSE_BATCH,
    grace_s: float = DEVBOX_PAUSE_GRACE_S,
    streaks: Streaks | None = None,
    now: datetime | None = None,
) -> int:
    """Reaper: a pause job per finished task whose devbox was never paused; how many."""
    rows = db.all(
        "cleanup_job_enqueue_devbox_pauses",
        limit=limit,
        grace_s=grace_s,
        cooldown_s=FAILED_JOB_COOLDOWN_S,
        now=now,
    )
    _report_refailing(Trigger.DEVBOX_PAUSE, rows, streaks, now)
    return len(rows)


def enqueue_purges(
    db: Database,
    *,
    retention_s: float,
    limit: int,
    streaks: Streaks | None = None,
    now: datetime | None = None,
) -> int:
    """A purge job per finished task past retention (oldest first); how many. The reaper starts a
    drain with a few; the worker goes on with a batch per pass while it finds more."""
    rows = db.all(
        "cleanup_job_enqueue_purges",
        retention_s=retention_s,
        limit=limit,
        cooldown_s=FAILED_JOB_COOLDOWN_S,
        now=now,
    )
    _report_refailing(Trigger.RETENTION_PURGE, rows, streaks, now)
    return len(rows)


def _report_refailing(
    trigger: Trigger, rows: list[dict], streaks: Streaks | None, now: datetime | None
) -> None:
    """A fresh job minted where an earlier one failed for good is a persistent failure: say so,
    and record it in the trigger's failure streak (integration errors, e.g. a devbox outage, do
    not count per attempt, so without this the streak would never show it). The failed jobs
    keep their errors (cleanup_jobs, state 'failed'); the trigger's first success ends the
    streak."""
    again = sum(1 for r in rows if r["after_failure"])
    if again:
        log.warning(
            "%s: %d job(s) enqueued again after an earlier job failed %d attempts "
            "(see cleanup_jobs in state failed)",
            trigger,
            again,
            MAX_ATTEMPTS,
        )
        if streaks is not None:
            streaks.failed(
                streak_subject(trigger),
                f"{again} job(s) failed {MAX_ATTEMPTS} attempts and were enqueued "
                f"again (see cleanup_jobs in state failed)",
                now=now,
            )


def finish(
    db: Database, jobs: list[dict], state: JobState, now: datetime | None, note: str | None = None
) -> None:
    """End claimed attempts as succeeded or cancelled (a stale claim's finish changes nothing);
    `note` replaces the last error."""
    if jobs:
        db.all(
            "cleanup_job_finish_if_claimed",
            job_ids=[j["id"] for j in jobs],
            attempts=[j["attempts"] for j in jobs],
            state=str(state),
            note=note,
            now=now,
        )


def retry(db: Database, job: dict, error: str, now: datetime | None) -> None:
    """A claimed attempt failed with `error`: it waits on the retry ladder, or fails for good
    after MAX_ATTEMPTS (a stale claim's failure changes nothing)."""
    row = db.one(
        "cleanup_job_retry_if_claimed",
        job_id=job["id"],
        attempts=job["attempts"],
        error=error[:2000],
        max_attempts=MAX_ATTEMPTS,
        delays_s=list(RETRY_DELAYS_S),
        now=now,
    )
    if row is None:
        log.info("cleanup job %s: attempt %d was superseded", job["id"], job["attempts"])
    elif row["state"] == JobState.FAILED:
        log.error(
            "cleanup job %s (%s %s) failed for good after %d attempts: %s",
            job["id"],
            job["trigger"],
            job["operation_id"],
            row["attempts"],
            error,
        )
    else:
        # Per attempt only at debug: what keeps failing is logged, throttled, by its streak.
        log.debug(
            "cleanup job %s (%s %s) attempt %d failed, next at %s: %s",
            job["id"],
            job["trigger"],
            job["operation_id"],
            row["attempts"],
            row["next_attempt_at"].isoformat(),
            error,
        )
