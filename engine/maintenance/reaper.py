"""The reaper: resolves what no live runner will. Every sweep is a guarded CAS, so several
processes sweeping at once is harmless; every verdict records a task event."""

import logging
from dataclasses import dataclass, replace
from datetime import datetime

import gevent

from engine.cleanup import jobs as cleanup_jobs
from engine.cleanup import task_runtimes as runtimes
from engine.core.status import LEASED, Status
from engine.core.transitions import Move, Overdue, transition
from engine.db import Database
from engine.operations import metrics
from engine.operations.config import Settings
from engine.operations.streaks import Streaks

log = logging.getLogger(__name__)

#: Rows one sweep resolves at most; the rest wait for the next tick.
SWEEP_BATCH = 500
LEASED_SOURCES = tuple(sorted(LEASED))


@dataclass(frozen=True)
class _Sweep:
    name: str
    candidates: str  # named query listing candidate ids
    deadline: str | None  # settings attribute holding the deadline, if any
    move: Move  # what each candidate's move asks, for the ids it lists


class Reaper:
    def __init__(self, db: Database, settings: Settings, streaks: Streaks | None = None):
        self.db = db
        self.settings = settings
        #: Where a cleanup re-enqueued after failing for good is recorded (persistent failure).
        self.streaks = streaks

    def sweeps(self) -> list[_Sweep]:
        """The sweeps, in the order they run (a pending cancel outranks a failure)."""
        s = self.settings
        return [
            _Sweep(
                "cancel_deadline",
                "task_list_ids_cancel_overdue",
                "cancel_ack_deadline_s",
                # From every status the table cancels: a cancel is recorded on a leased task,
                # but one pending on a task no run holds has nobody else to end it.
                Move(
                    (),
                    Status.CANCELLED,
                    reason="cancel_deadline",
                    message="cancel was not acknowledged in time; cancelled by the engine",
                    actor="reaper",
                    overdue=Overdue(cancel_older_than_s=s.cancel_ack_deadline_s),
                ),
            ),
            _Sweep(
                "lease_expired_cancel",
                "task_list_ids_lease_expired",
                None,
                Move(
                    (),
                    Status.CANCELLED,
                    from_statuses=LEASED_SOURCES,
                    reason="cancel_acknowledged",
                    message="the run's process is gone; the pending cancel resolves it",
                    actor="reaper",
                    if_cancel_pending=True,
                    overdue=Overdue(lease_expired=True),
                ),
            ),
            _Sweep(
                "run_timeout",
                "task_list_ids_run_overdue",
                "max_run_s",
                Move(
                    (),
                    Status.FAILED,
                    from_statuses=LEASED_SOURCES,
                    reason="timeout",
                    message=f"the run exceeded the maximum duration of {s.max_run_s:g}s",
                    actor="reaper",
                    overdue=Overdue(claimed_older_than_s=s.max_run_s),
                ),
            ),
            _Sweep(
                "lease_expired",
                "task_list_ids_lease_expired",
                None,
                Move(
                    (),
                    Status.FAILED,
                    from_statuses=LEASED_SOURCES,
                    reason="interrupted",
                    message="the server running this deployment stopped",
                    actor="reaper",
                    if_cancel_pending=False,
                    overdue=Overdue(lease_expired=True),
                ),
            ),
            _Sweep(
                "never_started",
                "task_list_ids_queued_overdue",
                "queued_start_deadline_s",
                Move(
                    (),
                    Status.FAILED,
                    from_statuses=(Status.QUEUED,),
                    reason="never_started",
                    message="the deployment was never started",
                    actor="reaper",
                    overdue=Overdue(created_older_than_s=s.queued_start_deadline_s),
                ),
            ),
        ]

    def run_forever(self) -> None:
        """One sweep every REAPER_INTERVAL_S; a failing sweep is the `reaper` streak."""
        while True:
            gevent.sleep(self.settings.reaper_interval_s)
            try:
                self.sweep()
            except Exception as exc:
                self.streaks.failed("reaper", exc)
            else:
                self.streaks.succeeded("reaper")

    def sweep(self, now: datetime | None = None) -> dict[str, int]:
        """Run every sweep once; how many tasks each resolved (or enqueued cleanup for)."""
        with metrics.timed(metrics.SWEEP_DURATION, sweep="all"):
            return self._sweep(now)

    def _sweep(self, now: datetime | None) -> dict[str, int]:
        resolved = {}
        for sweep in self.sweeps():
            params = {"now": now, "limit": SWEEP_BATCH}
            if sweep.deadline:
                params["deadline_s"] = getattr(self.settings, sweep.deadline)
            with metrics.timed(metrics.SWEEP_DURATION, sweep=sweep.name):
                ids = [row["id"] for row in self.db.all(sweep.candidates, **params)]
                # One task per statement: a statement that locks one row can never be part of a
                # deadlock (several reapers and a process's lease renewal lock the same rows at
                # once, each in its own order), and a row a runner's write holds delays only
                # that one task's verdict by the runner's one statement. Nothing to resolve, the
                # usual case, costs nothing more.
                moved = [
                    row
                    for task_id in sorted(ids, key=str)
                    for row in transition(self.db, replace(sweep.move, task_ids=[task_id], now=now))
                ]
            resolved[sweep.name] = len(moved)
            if moved:
                log.info("reaper %s: %d task(s) -> %s", sweep.name, len(moved), sweep.move.to)
        # Then seed 000's devbox duties, in its order: pause devboxes of finished tasks, then
        # purge. Both only enqueue durable cleanup jobs (the cleanup worker runs them).
        with metrics.timed(metrics.SWEEP_DURATION, sweep="pause_devboxes"):
            resolved["pause_devboxes"] = cleanup_jobs.enqueue_devbox_pauses(
                self.db, grace_s=self.settings.devbox_pause_grace_s, streaks=self.streaks, now=now
            )
        with metrics.timed(metrics.SWEEP_DURATION, sweep="purge"):
            resolved["purge"] = cleanup_jobs.enqueue_purges(
                self.db,
                retention_s=self.settings.retention_days * 86400,
                limit=min(cleanup_jobs.PURGE_KICK, self.settings.purge_batch),
                streaks=self.streaks,
                now=now,
            )
        with metrics.timed(metrics.SWEEP_DURATION, sweep="orphaned_runtimes"):
            resolved["orphaned_runtimes"] = runtimes.judge_orphaned_elsewhere(
                self.db, lease_ttl_s=self.settings.lease_ttl_s, now=now
            )
        for name in ("pause_devboxes", "purge"):
            if resolved[name]:
                log.info("reaper %s: %d cleanup job(s) enqueued", name, resolved[name])
        return resolved
