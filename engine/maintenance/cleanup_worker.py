"""The cleanup worker (seed 001): one greenlet per process that claims due cleanup jobs
(engine/cleanup/jobs.py) and runs them: devbox pauses and deletes, stops of local runtimes, and
retention purges. It also releases this process's local runtimes and reconciles at boot
(engine/cleanup/task_runtimes.py).
"""

import logging
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import gevent
from gevent.event import Event
from gevent.pool import Pool

from engine.abort import SHUTDOWN, Aborted, AbortSignal
from engine.cleanup import task_runtimes as runtimes
from engine.cleanup.jobs import (
    MAX_ATTEMPTS,
    JobState,
    Trigger,
    enqueue_purges,
    finish,
    retry,
    streak_subject,
)
from engine.cleanup.process_groups import HOST, StopUnconfirmed
from engine.core.status import TERMINAL, Status
from engine.db import Database
from engine.integrations import Integrations
from engine.integrations.base import IntegrationError, NotFound
from engine.maintenance import purges
from engine.operations.config import Settings
from engine.operations.streaks import Streaks

log = logging.getLogger(__name__)

#: Jobs other than purges run this many at a time per process.
JOB_CONCURRENCY = 8
NO_DEVBOX_NOTE = (
    "waiting: this process has no devbox integration; a process configured with "
    "one (DEVBOX_URL, or the sandbox devbox) will run it"
)


class PreconditionGone(Exception):
    """The job's precondition no longer holds: it is cancelled, nothing is touched."""


@dataclass(eq=False)
class _Attempt:
    job: dict
    abort: AbortSignal
    timer: gevent.Greenlet | None = None


class CleanupWorker:
    """The per-process cleanup greenlet, local runtime release, and startup reconciliation."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        integrations: Integrations,
        owner: str,
        *,
        streaks: Streaks | None = None,
    ):
        self.db = db
        self.settings = settings
        self.integrations = integrations
        self.owner = owner
        #: Failed attempts are streaks under their cause: `integration:<name>` when an
        #: integration failed (it records that itself), else `cleanup:<trigger>`.
        self.streaks = streaks or Streaks(db, owner=owner)
        self._greenlet: gevent.Greenlet | None = None
        #: No new job is claimed (stop_claiming(), stop()); stopped: attempts are aborted too.
        self._stopping = self._stopped = False
        self._wake = Event()
        self._attempts: set[_Attempt] = set()
        self._pool = Pool(JOB_CONCURRENCY)
        #: The last tick purged something (or filled its batch of other jobs): the next one goes
        #: on at once, looks for more expired tasks itself, and skips housekeeping.
        self._draining = False

    @property
    def devbox(self):
        return self.integrations.devbox

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Reconcile what earlier processes left on this host, then start the worker greenlet."""
        try:
            self.reconcile()
        except Exception:
            log.exception("runtime reconciliation failed; rows are kept for the next boot")
        self._greenlet = gevent.spawn(self._work_forever)

    def stop_claiming(self) -> None:
        """Claim no new job (a draining process); the attempts in flight go on until stop()."""
        self._stopping = True
        self._wake.set()

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop claiming, abort attempts in flight (they end as retryable failures)."""
        self._stopping = self._stopped = True
        self._wake.set()
        for attempt in list(self._attempts):
            attempt.abort.abort(SHUTDOWN)
        if self._greenlet is not None:
            self._greenlet.join(timeout=timeout_s)
            self._greenlet.kill(block=False)

    def _work_forever(self) -> None:
        busy = False
        while not self._stopping:
            if busy:
                gevent.sleep(0)  # more may be due: go on, but let other greenlets run
            else:
                self._wake.wait(self.settings.cleanup_interval_s)
                self._wake.clear()
                if self._stopping:
                    return
            try:
                busy = self.run_once()
            except Exception as exc:
                self.streaks.failed("cleanup_worker", exc)
                busy = False
            else:
                self.streaks.succeeded("cleanup_worker")

    def run_once(self, now: datetime | None = None) -> bool:
        """One tick: claim and run due jobs; whether to go on at once (more may be due)."""
        if not self._draining:
            self._housekeep(now)
        try:
            purged = self._purge(now)
        except Exception as exc:
            # A purge that keeps failing is a streak of its own; the other jobs still run.
            self.streaks.failed("retention_purge", exc, now=now)
            purged = 0
        else:
            if purged:
                self.streaks.succeeded("retention_purge", now=now)
        others = self._claim(
            [Trigger.DEVBOX_PAUSE, Trigger.DEVBOX_DELETE, Trigger.RUNTIME_STOP],
            JOB_CONCURRENCY,
            now,
        )
        for job in others:
            self._pool.spawn(self._run_job, job, now)
        self._pool.join()
        self._draining = (purged > 0 or len(others) >= JOB_CONCURRENCY) and not self._stopping
        return self._draining

    def _purge(self, now: datetime | None) -> int:
        """Run due purges (continuing a drain); how many jobs were taken."""
        s = self.settings
        retention_s = s.retention_days * 86400
        if self._draining:
            # Continue a purge drain the reaper started, one bounded batch per pass.
            enqueue_purges(
                self.db, retention_s=retention_s, limit=s.purge_batch, streaks=self.streaks, now=now
            )
        purged = self._purge_without_devbox(retention_s, now)
        if self.devbox is not None and not self._stopping:
            with_devbox = self.db.all(
                "cleanup_job_claim_purges_with_devbox",
                limit=s.purge_batch,
                max_attempts=MAX_ATTEMPTS,
                retention_s=retention_s,
                worker=self.owner,
                attempt_timeout_s=s.cleanup_attempt_timeout_s,
                now=now,
            )
            if with_devbox:
                self._run_purges(with_devbox, retention_s, now)
            purged += len(with_devbox)
        return purged

    def _housekeep(self, now: datetime | None) -> None:
        for row in self.db.all("cleanup_job_fail_if_abandoned", max_attempts=MAX_ATTEMPTS, now=now):
            log.error("cleanup job %s failed for good: its last attempt was abandoned", row["id"])
        if self.devbox is None:
            self.db.all("cleanup_job_note_if_unclaimable", note=NO_DEVBOX_NOTE, now=now)
        purges.forget_expired(self.db, now)

    def _claim(self, triggers: list[Trigger], limit: int, now: datetime | None) -> list[dict]:
        if self._stopping:
            return []
        return self.db.all(
            "cleanup_job_claim_due",
            triggers=[str(t) for t in triggers],
            limit=limit,
            max_attempts=MAX_ATTEMPTS,
            host=HOST,
            has_devbox=self.devbox is not None,
            worker=self.owner,
            attempt_timeout_s=self.settings.cleanup_attempt_timeout_s,
            now=now,
        )

    def _purge_without_devbox(self, retention_s: float, now: datetime | None) -> int:
        """Due purges with no devbox to delete first: one statement claims, deletes and finishes
        a batch. How many jobs it took."""
        if self._stopping:
            return 0
        outcomes = {
            r["outcome"]: r["n"]
            for r in self.db.all(
                "cleanup_job_purge",
                job_ids=None,
                attempts=None,
                limit=self.settings.purge_batch,
                max_attempts=MAX_ATTEMPTS,
                retention_s=retention_s,
                worker=self.owner,
                now=now,
            )
        }
        if outcomes.get("purged"):
            log.info("retention purge: %d task(s) deleted", outcomes["purged"])
        return sum(n for outcome, n in outcomes.items() if outcome != "purged")

    def _attempt(self, job: dict) -> _Attempt:
        attempt = _Attempt(job, AbortSignal())
        if self._stopped:
            attempt.abort.abort(SHUTDOWN)
        self._attempts.add(attempt)
        # The in-process deadline matches the claim's: past it another worker may claim the job.
        attempt.timer = gevent.spawn_later(
            self.settings.cleanup_attempt_timeout_s, attempt.abort.abort, "attempt_timeout"
        )
        return attempt

    def _done(self, attempt: _Attempt) -> None:
        self._attempts.discard(attempt)
        attempt.timer.kill(block=False)

    def _run_job(self, job: dict, now: datetime | None) -> None:
        attempt = self._attempt(job)
        try:
            handler = {
                Trigger.DEVBOX_PAUSE: self._pause_devbox,
                Trigger.DEVBOX_DELETE: self._delete_devbox,
                Trigger.RUNTIME_STOP: self._stop_runtime,
            }[Trigger(job["trigger"])]
            handler(job, attempt.abort, now)
        except PreconditionGone as exc:
            finish(self.db, [job], JobState.CANCELLED, now, note=f"cancelled: {exc}")
            self.streaks.succeeded(streak_subject(job["trigger"]), now=now)
        except Exception as exc:
            if not isinstance(exc, (StopUnconfirmed, Aborted)) and not _is_integration_error(exc):
                log.debug("cleanup job %s crashed", job["id"], exc_info=True)
            retry(self.db, job, _describe(exc, attempt.abort), now)
            if not _is_integration_error(exc):
                self.streaks.failed(
                    streak_subject(job["trigger"]), _describe(exc, attempt.abort), now=now
                )
        else:
            finish(self.db, [job], JobState.SUCCEEDED, now)
            self.streaks.succeeded(streak_subject(job["trigger"]), now=now)
        finally:
            self._done(attempt)

    # -- the jobs ---------------------------------------------------------------------------------
    def _require_devbox(self):
        if self.devbox is None:
            raise RuntimeError("no devbox integration is configured in this process")
        return self.devbox

    def _pause_devbox(self, job: dict, abort: AbortSignal, now: datetime | None) -> None:
        snap = job["snapshot"]
        row = self.db.one("task_get_devbox_state", task_id=snap["taskId"])
        if row is None:
            return  # purged: its purge deleted the devbox first
        if row["devbox_id"] != snap["devboxId"] or row["devbox_paused_at"] is not None:
            return  # already paused (by its runner) or no longer this task's devbox
        if Status(row["status"]) not in TERMINAL:
            raise PreconditionGone(f"task is {row['status']}")
        if row["devbox_in_use"]:
            raise PreconditionGone("an active task uses this devbox")
        try:
            self._require_devbox().pause(snap["devboxId"], workspace=snap["workspace"], abort=abort)
        except NotFound:
            pass  # gone: nothing is left running
        self.db.one(
            "task_mark_devbox_paused", task_id=snap["taskId"], devbox_id=snap["devboxId"], now=now
        )

    def _delete_devbox(self, job: dict, abort: AbortSignal, now: datetime | None) -> None:
        snap = job["snapshot"]
        users = self.db.all("task_list_ids_active_with_devbox", devbox_id=snap["devboxId"])
        if users:
            raise PreconditionGone(f"active task {users[0]['id']} uses this devbox")
        self._delete_devbox_now(snap["devboxId"], snap["workspace"], abort)

    def _delete_devbox_now(self, devbox_id: str, workspace: str, abort: AbortSignal) -> None:
        try:
            self._require_devbox().delete(devbox_id, workspace=workspace, abort=abort)
        except NotFound:
            pass  # already gone counts as deleted
        self.db.all("runtime_delete_devbox", devbox_id=devbox_id)

    def _stop_runtime(self, job: dict, abort: AbortSignal, now: datetime | None) -> None:
        runtime_id = job["snapshot"]["runtime"]["id"]
        row = self.db.one("runtime_get", runtime_id=runtime_id)
        if row is None or row["status"] == "stopped":
            return  # released meanwhile
        try:
            runtimes.release_confirmed(
                self.db, row, stop_timeout_s=self.settings.runtime_stop_timeout_s
            )
        except StopUnconfirmed as exc:
            self.db.one("runtime_mark_stop_failed", runtime_id=runtime_id, error=str(exc))
            raise

    def _run_purges(self, jobs: list[dict], retention_s: float, now: datetime | None) -> None:
        """Claimed purges of tasks with a devbox: delete the devboxes first (concurrently), then
        the rows and the jobs in one statement. The claim re-read each task (revalidation)."""
        ready, deleting = [], []
        for job in jobs:
            if job["task_exists"] and not job["expired"]:
                ready.append(job)  # the purge statement cancels it: nothing is touched
            elif job["devbox_id"] and not job["devbox_in_use"]:
                deleting.append(job)
            else:
                # No devbox after all, or an active task uses it now: the row goes, the devbox
                # stays with that task's row (and its purge).
                ready.append(job)

        def devbox_step(job):
            attempt = self._attempt(job)
            try:
                try:
                    self._require_devbox().delete(
                        job["devbox_id"], workspace=job["workspace"], abort=attempt.abort
                    )
                except NotFound:
                    pass  # already gone counts as deleted
                if not job["task_exists"]:  # otherwise its runtime row goes with the task row
                    self.db.all("runtime_delete_devbox", devbox_id=job["devbox_id"])
            except Exception as exc:
                if not _is_integration_error(exc) and not isinstance(exc, Aborted):
                    log.debug("purge job %s: devbox delete crashed", job["id"], exc_info=True)
                retry(
                    self.db,
                    job,
                    f"devbox {job['devbox_id']} delete: {_describe(exc, attempt.abort)}",
                    now,
                )
                if not _is_integration_error(exc):
                    self.streaks.failed("retention_purge", _describe(exc, attempt.abort), now=now)
            else:
                ready.append(job)
            finally:
                self._done(attempt)

        for job in deleting:
            self._pool.spawn(devbox_step, job)
        self._pool.join()
        if ready:
            outcomes = {
                r["outcome"]: r["n"]
                for r in self.db.all(
                    "cleanup_job_purge",
                    job_ids=[j["id"] for j in ready],
                    attempts=[j["attempts"] for j in ready],
                    limit=None,
                    max_attempts=MAX_ATTEMPTS,
                    retention_s=retention_s,
                    worker=self.owner,
                    now=now,
                )
            }
            if outcomes.get("purged"):
                log.info(
                    "retention purge: %d task(s) deleted after their devbox", outcomes["purged"]
                )

    # -- local runtimes of this process -----------------------------------------------------------
    def release_runtimes(self, task_id: UUID | None = None) -> int:
        """Stop the local process groups this process started (of one task, or all); how many
        stops were confirmed."""
        return runtimes.release_owned(
            self.db,
            self.owner,
            task_id=task_id,
            stop_timeout_s=self.settings.runtime_stop_timeout_s,
        )

    def reconcile(self, now: datetime | None = None) -> dict:
        """Startup reconciliation of the rows other engine runtimes left on this host."""
        return runtimes.reconcile(self.db, self.owner, now)


def _is_integration_error(exc: BaseException) -> bool:
    return isinstance(exc, IntegrationError)


def _describe(exc: BaseException, abort: AbortSignal) -> str:
    if isinstance(exc, Aborted) or abort.aborted:
        return f"interrupted ({abort.reason or 'aborted'})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
