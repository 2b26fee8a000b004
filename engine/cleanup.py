"""Releasing what tasks leave behind (seed 001): runtime rows, local process groups, durable
cleanup jobs, the cleanup worker and startup reconciliation.

- A `task_runtimes` row is the durable handle of one runtime a task started: a local process
  group (pid, pgid and the leader's start time, so a reused pid is never mistaken for it) or a
  devbox. It stays until a stop of that runtime is confirmed; a terminal task does not imply it.
- A `cleanup_jobs` row is a durable cleanup intent with a snapshot of every handle, taken before
  the task is touched. The worker claims due jobs (`attempts + 1`), revalidates the precondition
  before each destructive step, and finishes with writes guarded on (state, attempts). A typed
  absence (`NotFound`, a process confirmed dead, a row already gone) is done; any other error
  waits on the retry ladder; the 8th failure is terminal `failed` and is never claimed again.
- At boot, each process reconciles the rows other engine runtimes left on this host: confirmed
  dead -> removed (or repaired in place where it carries something to resume); alive or Unknown
  -> preserved; one bounded summary line, one warning per unexpected error only.
"""
import json
import logging
import os
import signal
import socket
import subprocess
import time
from collections import Counter
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from functools import lru_cache
from uuid import UUID

import gevent
from gevent.event import Event
from gevent.pool import Pool

from engine.abort import SHUTDOWN, Aborted, AbortSignal
from engine.config import Settings
from engine.db import Database
from engine.integrations import Integrations
from engine.integrations.base import IntegrationError, NotFound

log = logging.getLogger(__name__)

#: A job is claimed at most this often; the last failure is terminal.
MAX_ATTEMPTS = 8
#: Wait after failed attempt n (1-based) before the next claim: 1 min, 5 min, 15 min, 1 h, 3 h,
#: 6 h, 12 h. The 8th failure has no delay: it is terminal.
RETRY_DELAYS_S = (60.0, 300.0, 900.0, 3600.0, 10800.0, 21600.0, 43200.0)
#: Jobs other than purges run this many at a time per process.
JOB_CONCURRENCY = 8
#: After SIGKILL, how long a group may take to disappear before the stop counts as unconfirmed.
KILL_CONFIRM_S = 2.0
PROCESS_POLL_S = 0.05
#: A finished task's runner pauses its own devbox; the reaper steps in after this grace.
DEVBOX_PAUSE_GRACE_S = 60.0
DEVBOX_PAUSE_BATCH = 50
#: Purges one reaper sweep enqueues: enough to start a drain that the worker continues a batch
#: per pass (PURGE_BATCH), few enough to keep every sweep short.
PURGE_KICK = 100
#: Succeeded and cancelled jobs are forgotten after this; failed ones stay for diagnosis.
COMPLETED_JOB_KEEP_S = 7 * 24 * 3600.0
COMPLETED_JOB_DELETE_BATCH = 1000
#: Rows one boot reconciles at most (the rest wait for the next boot).
RECONCILE_LIMIT = 1000
HOST = socket.gethostname()
NO_DEVBOX_NOTE = ("waiting: this process has no devbox integration; a process configured with "
                  "one (DEVBOX_URL, or the sandbox devbox) will run it")


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



class Liveness(StrEnum):
    ALIVE = "alive"
    #: Only ever said of a local process group on this host, pid and start time both checked.
    DEAD = "dead"
    #: Remote, another host, or no handle: never pruned.
    UNKNOWN = "unknown"


class StopUnconfirmed(Exception):
    """A process group could not be confirmed stopped (retryable)."""


class PreconditionGone(Exception):
    """The job's precondition no longer holds: it is cancelled, nothing is touched."""


# -- local processes ---------------------------------------------------------------------------

@dataclass(frozen=True)
class ProcessIdentity:
    """Enough to find a process group again and to tell it from a reused pid."""

    host: str
    boot_id: str
    pid: int
    pgid: int
    #: The leader's start time in clock ticks since boot (/proc/<pid>/stat field 22).
    start_ticks: int

    @classmethod
    def of_row(cls, row: dict) -> "ProcessIdentity | None":
        if row.get("liveness") != "process" or None in (row.get("pid"), row.get("pgid"),
                                                        row.get("start_ticks"), row.get("boot_id")):
            return None
        return cls(row["host"], row["boot_id"], row["pid"], row["pgid"], row["start_ticks"])


@dataclass(frozen=True)
class _Stat:
    state: str
    pgrp: int
    start_ticks: int


@lru_cache(maxsize=1)
def boot_id() -> str:
    """This boot of this host (a pid and start time mean nothing across a reboot)."""
    with open("/proc/sys/kernel/random/boot_id") as f:
        return f.read().strip()


def _stat(pid: int) -> _Stat | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # comm may hold spaces and parentheses: the fields start after the last ')'.
    fields = raw[raw.rindex(")") + 2:].split()
    return _Stat(state=fields[0], pgrp=int(fields[2]), start_ticks=int(fields[19]))


def _running(stat: _Stat | None) -> bool:
    return stat is not None and stat.state not in ("Z", "X", "x")


def group_members(pgid: int, *, started_since: int = 0) -> list[int]:
    """Live (non-zombie) processes of group `pgid` started at or after `started_since`."""
    members = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        stat = _stat(int(entry.name))
        if _running(stat) and stat.pgrp == pgid and stat.start_ticks >= started_since:
            members.append(int(entry.name))
    return members


def process_liveness(host: str, boot: str | None, pid: int | None,
                     start_ticks: int | None) -> Liveness:
    """Whether one recorded process (not a group) still runs here."""
    if host != HOST or None in (boot, pid, start_ticks):
        return Liveness.UNKNOWN
    if boot != boot_id():
        return Liveness.DEAD
    stat = _stat(pid)
    return Liveness.ALIVE if _running(stat) and stat.start_ticks == start_ticks else Liveness.DEAD


def group_liveness(identity: ProcessIdentity) -> Liveness:
    """Whether a recorded process group still has a member on this host.

    The kernel never hands out a pid equal to a live group's id, so a process that now holds the
    leader's pid with another start time proves our group ended first (pid reuse). With the
    leader gone, members that started no earlier than it are our group's survivors.
    """
    if identity.host != HOST:
        return Liveness.UNKNOWN
    if identity.boot_id != boot_id():
        return Liveness.DEAD
    leader = _stat(identity.pid)
    if leader is not None and leader.start_ticks != identity.start_ticks:
        return Liveness.DEAD
    if _running(leader):
        return Liveness.ALIVE
    if group_members(identity.pgid, started_since=identity.start_ticks):
        return Liveness.ALIVE
    return Liveness.DEAD


def spawn_group(argv: list[str], **popen_kwargs) -> tuple[subprocess.Popen, ProcessIdentity | None]:
    """Start argv as the leader of a new session and process group; the process and its identity
    (None when the whole group had already exited before its start time could be read)."""
    for reserved in ("start_new_session", "process_group", "preexec_fn"):
        if reserved in popen_kwargs:
            raise ValueError(f"{reserved} is set by spawn_group")
    popen_kwargs.setdefault("stdin", subprocess.DEVNULL)
    popen = subprocess.Popen(argv, start_new_session=True, **popen_kwargs)
    stat = _stat(popen.pid)
    start_ticks = stat.start_ticks if stat is not None else None
    if start_ticks is None:
        # The leader was already reaped: its children (same tick or later) still identify the group.
        survivors = [s for s in map(_stat, group_members(popen.pid)) if s is not None]
        if not survivors:
            return popen, None
        start_ticks = min(s.start_ticks for s in survivors)
    return popen, ProcessIdentity(HOST, boot_id(), popen.pid, popen.pid, start_ticks)


def _signal_group(identity: ProcessIdentity, sig: int) -> bool:
    """Signal the group if it is still ours; whether anything was there to signal."""
    if identity.pgid <= 1 or identity.pgid == os.getpgrp():
        raise StopUnconfirmed(f"refusing to signal process group {identity.pgid}")
    if group_liveness(identity) is not Liveness.ALIVE:
        return False
    try:
        os.killpg(identity.pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _wait_gone(identity: ProcessIdentity, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while group_liveness(identity) is Liveness.ALIVE:
        if time.monotonic() >= deadline:
            return False
        gevent.sleep(PROCESS_POLL_S)
    return True


def stop_group(identity: ProcessIdentity, *, timeout_s: float,
               kill_wait_s: float = KILL_CONFIRM_S) -> str:
    """SIGTERM to the whole group, SIGKILL after `timeout_s`, then confirm no member is left.

    Returns "absent" (already gone), "terminated" or "killed"; raises StopUnconfirmed when a
    member survives SIGKILL, or Liveness is Unknown (another host). A leader that exits while
    its children live is not stopped: the group is judged by every member.
    """
    liveness = group_liveness(identity)
    if liveness is Liveness.UNKNOWN:
        raise StopUnconfirmed(f"process group {identity.pgid} is on host {identity.host}")
    if liveness is Liveness.DEAD:
        return "absent"
    if not _signal_group(identity, signal.SIGTERM):
        return "absent"
    if _wait_gone(identity, timeout_s):
        return "terminated"
    _signal_group(identity, signal.SIGKILL)
    if _wait_gone(identity, kill_wait_s):
        return "killed"
    left = group_members(identity.pgid, started_since=identity.start_ticks)
    raise StopUnconfirmed(f"process group {identity.pgid}: {len(left)} member(s) survived SIGKILL")


# -- runtime rows --------------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _self_start_ticks() -> int | None:
    stat = _stat(os.getpid())
    return stat.start_ticks if stat else None


class LocalProcess:
    """A process group a runner started; its task_runtimes row is the durable handle.

    `wait(abort)` waits for the leader and stops the whole group on an abort; `stop()` stops the
    group and releases the row. Whatever is left when the run ends is stopped by the engine.
    """

    def __init__(self, popen: subprocess.Popen, identity: ProcessIdentity | None,
                 runtime_id: UUID | None, release):
        self.popen = popen
        self.identity = identity
        self.runtime_id = runtime_id
        self._release = release

    @property
    def pid(self) -> int:
        return self.popen.pid

    def wait(self, abort: AbortSignal) -> int:
        """The leader's exit code; on an abort, the group is stopped and Aborted raised."""
        try:
            return abort.run(self.popen.wait)
        except Aborted:
            self.stop()
            raise

    def stop(self) -> bool:
        """Stop the whole group (graceful, then SIGKILL) and release its row; whether confirmed."""
        return self._release()


def start_local_runtime(db: Database, task_id: UUID, *, epoch: int, owner: str, argv: list[str],
                        label: str | None, resume: dict | None, stop_timeout_s: float,
                        **popen_kwargs) -> LocalProcess | None:
    """Start argv in its own process group and record it, fenced on the lease, before returning.
    None: the lease is gone (the group was stopped again at once)."""
    popen, identity = spawn_group(argv, **popen_kwargs)
    if identity is None:  # finished before it could be recorded: nothing is left to stop
        return LocalProcess(popen, None, None, lambda: True)
    row = db.one("runtime_insert_local_if_held", task_id=task_id, epoch=epoch, owner=owner,
                 liveness="process", label=label or os.path.basename(argv[0]), host=HOST,
                 owner_pid=os.getpid(), owner_start_ticks=_self_start_ticks(),
                 boot_id=identity.boot_id, pid=identity.pid, pgid=identity.pgid,
                 start_ticks=identity.start_ticks, resume=resume)
    if row is None:
        stop_group(identity, timeout_s=stop_timeout_s)
        return None
    return LocalProcess(popen, identity, row["id"],
                        lambda: release_local_runtime(db, row, stop_timeout_s=stop_timeout_s))


def release_local_runtime(db: Database, row: dict, *, stop_timeout_s: float,
                          now: datetime | None = None) -> bool:
    """Stop a local runtime's group and drop (or repair) its row. An unconfirmed stop keeps the
    row, marks it stop_failed and enqueues a runtime_stop job; returns whether confirmed."""
    try:
        release_confirmed(db, row, stop_timeout_s=stop_timeout_s)
        return True
    except StopUnconfirmed as exc:
        log.warning("runtime %s (task %s): stop not confirmed: %s", row["id"], row["task_id"], exc)
        db.one("runtime_mark_stop_failed", runtime_id=row["id"], error=str(exc))
        enqueue_runtime_stop(db, row, now=now)
        return False


def release_confirmed(db: Database, row: dict, *, stop_timeout_s: float) -> str:
    """Stop the group of a local row and release the row; its disposition ("removed", "repaired",
    or "changed" when the row no longer describes that process). Raises StopUnconfirmed."""
    identity = ProcessIdentity.of_row(row)
    if identity is None:
        raise StopUnconfirmed("the runtime has no local process handle (liveness unknown)")
    stop_group(identity, timeout_s=stop_timeout_s)
    released = db.one("runtime_release_if_process", runtime_id=row["id"], pid=row["pid"],
                      start_ticks=row["start_ticks"])
    return released["disposition"] if released else "changed"


def _runtime_snapshot(row: dict) -> dict:
    keys = ("id", "task_id", "namespace", "kind", "liveness", "label", "host", "owner",
            "owner_pid", "owner_start_ticks", "boot_id", "pid", "pgid", "start_ticks", "remote_id")
    return {"runtime": {k: (str(row[k]) if isinstance(row.get(k), UUID) else row.get(k))
                        for k in keys}}


def enqueue(db: Database, trigger: Trigger, operation_id: str, snapshot: dict, *,
            task_id=None, namespace: str | None = None, host: str | None = None,
            needs_devbox: bool = False, now: datetime | None = None) -> dict:
    """Record a cleanup intent; an open (or terminally failed) job of the same operation is
    returned instead of a new one (its `created` is False)."""
    for _ in range(2):  # a concurrent enqueue can win the unique index between our read and insert
        row = db.one("cleanup_job_enqueue", operation_id=operation_id, trigger=str(trigger),
                     task_id=task_id, namespace=namespace, snapshot=snapshot, host=host,
                     needs_devbox=needs_devbox, now=now)
        if row is not None:
            return row
    raise RuntimeError(f"could not enqueue cleanup job {operation_id}")


def enqueue_runtime_stop(db: Database, row: dict, *, now: datetime | None = None) -> dict:
    """A durable stop of one local runtime, runnable only by a worker on its host."""
    return enqueue(db, Trigger.RUNTIME_STOP, f"runtime_stop:{row['id']}", _runtime_snapshot(row),
                   task_id=row["task_id"], namespace=row["namespace"], host=row["host"], now=now)


def enqueue_devbox_delete(db: Database, devbox_id: str, *, namespace: str, task_id=None,
                          now: datetime | None = None) -> dict:
    """A durable delete of a devbox (re-checked against active tasks before it runs)."""
    return enqueue(db, Trigger.DEVBOX_DELETE, f"devbox_delete:{namespace}:{devbox_id}",
                   {"devboxId": devbox_id, "namespace": namespace,
                    "taskId": str(task_id) if task_id else None},
                   task_id=task_id, namespace=namespace, needs_devbox=True, now=now)


def enqueue_devbox_pauses(db: Database, *, limit: int = DEVBOX_PAUSE_BATCH,
                          grace_s: float = DEVBOX_PAUSE_GRACE_S,
                          now: datetime | None = None) -> int:
    """Reaper: a pause job per finished task whose devbox was never paused; how many."""
    return len(db.all("cleanup_job_enqueue_devbox_pauses", limit=limit, grace_s=grace_s, now=now))


def enqueue_purges(db: Database, *, retention_s: float, limit: int,
                   now: datetime | None = None) -> int:
    """A purge job per finished task past retention (oldest first); how many. The reaper starts a
    drain with a few; the worker goes on with a batch per pass while it finds more."""
    return len(db.all("cleanup_job_enqueue_purges", retention_s=retention_s, limit=limit, now=now))


# -- the worker -------------------------------------------------------------------------------

@dataclass(eq=False)
class _Attempt:
    job: dict
    abort: AbortSignal
    timer: gevent.Greenlet | None = None


class CleanupWorker:
    """The per-process cleanup greenlet, local runtime release, and startup reconciliation."""

    def __init__(self, db: Database, settings: Settings, integrations: Integrations, owner: str):
        self.db = db
        self.settings = settings
        self.integrations = integrations
        self.owner = owner
        self._greenlet: gevent.Greenlet | None = None
        self._stopping = False
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

    def stop(self, timeout_s: float = 2.0) -> None:
        """Stop claiming, abort attempts in flight (they end as retryable failures)."""
        self._stopping = True
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
            except Exception:
                log.exception("cleanup worker tick failed")
                busy = False

    def run_once(self, now: datetime | None = None) -> bool:
        """One tick: claim and run due jobs; whether to go on at once (more may be due)."""
        s = self.settings
        if not self._draining:
            self._housekeep(now)
        retention_s = s.retention_days * 86400
        if self._draining:
            # Continue a purge drain the reaper started, one bounded batch per pass.
            enqueue_purges(self.db, retention_s=retention_s, limit=s.purge_batch, now=now)
        purged = self._purge_without_devbox(retention_s, now)
        if self.devbox is not None and not self._stopping:
            with_devbox = self.db.all(
                "cleanup_job_claim_purges_with_devbox", limit=s.purge_batch,
                max_attempts=MAX_ATTEMPTS, retention_s=retention_s, worker=self.owner,
                attempt_timeout_s=s.cleanup_attempt_timeout_s, now=now)
            if with_devbox:
                self._run_purges(with_devbox, retention_s, now)
            purged += len(with_devbox)
        others = self._claim([Trigger.DEVBOX_PAUSE, Trigger.DEVBOX_DELETE, Trigger.RUNTIME_STOP],
                             JOB_CONCURRENCY, now)
        for job in others:
            self._pool.spawn(self._run_job, job, now)
        self._pool.join()
        self._draining = (purged > 0 or len(others) >= JOB_CONCURRENCY) and not self._stopping
        return self._draining

    def _housekeep(self, now: datetime | None) -> None:
        for row in self.db.all("cleanup_job_fail_if_abandoned", max_attempts=MAX_ATTEMPTS, now=now):
            log.error("cleanup job %s failed for good: its last attempt was abandoned", row["id"])
        if self.devbox is None:
            self.db.all("cleanup_job_note_if_unclaimable", note=NO_DEVBOX_NOTE, now=now)
        self.db.execute("cleanup_job_delete_completed", keep_s=COMPLETED_JOB_KEEP_S,
                        limit=COMPLETED_JOB_DELETE_BATCH, now=now)

    def _claim(self, triggers: list[Trigger], limit: int, now: datetime | None) -> list[dict]:
        if self._stopping:
            return []
        return self.db.all("cleanup_job_claim_due", triggers=[str(t) for t in triggers],
                           limit=limit, max_attempts=MAX_ATTEMPTS, host=HOST,
                           has_devbox=self.devbox is not None, worker=self.owner,
                           attempt_timeout_s=self.settings.cleanup_attempt_timeout_s, now=now)

    def _purge_without_devbox(self, retention_s: float, now: datetime | None) -> int:
        """Due purges with no devbox to delete first: one statement claims, deletes and finishes
        a batch. How many jobs it took."""
        if self._stopping:
            return 0
        outcomes = {r["outcome"]: r["n"] for r in self.db.all(
            "cleanup_job_purge_due_if_no_devbox", limit=self.settings.purge_batch,
            max_attempts=MAX_ATTEMPTS, retention_s=retention_s, worker=self.owner, now=now)}
        if outcomes.get("purged"):
            log.info("retention purge: %d task(s) deleted", outcomes["purged"])
        return sum(n for outcome, n in outcomes.items() if outcome != "purged")

    # -- finishing attempts ---------------------------------------------------------------------
    def _finish(self, jobs: list[dict], state: JobState, now: datetime | None,
                note: str | None = None) -> None:
        if jobs:
            self.db.all("cleanup_job_finish_if_claimed", job_ids=[j["id"] for j in jobs],
                        attempts=[j["attempts"] for j in jobs], state=str(state), note=note,
                        now=now)

    def _retry(self, job: dict, error: str, now: datetime | None) -> None:
        row = self.db.one("cleanup_job_retry_if_claimed", job_id=job["id"],
                          attempts=job["attempts"], error=error[:2000], max_attempts=MAX_ATTEMPTS,
                          delays_s=list(RETRY_DELAYS_S), now=now)
        if row is None:
            log.info("cleanup job %s: attempt %d was superseded", job["id"], job["attempts"])
        elif row["state"] == JobState.FAILED:
            log.error("cleanup job %s (%s %s) failed for good after %d attempts: %s", job["id"],
                      job["trigger"], job["operation_id"], row["attempts"], error)
        else:
            log.warning("cleanup job %s (%s %s) attempt %d failed, next at %s: %s", job["id"],
                        job["trigger"], job["operation_id"], row["attempts"],
                        row["next_attempt_at"].isoformat(), error)

    def _attempt(self, job: dict) -> _Attempt:
        attempt = _Attempt(job, AbortSignal())
        if self._stopping:
            attempt.abort.abort(SHUTDOWN)
        self._attempts.add(attempt)
        # The in-process deadline matches the claim's: past it another worker may claim the job.
        attempt.timer = gevent.spawn_later(self.settings.cleanup_attempt_timeout_s,
                                           attempt.abort.abort, "attempt_timeout")
        return attempt

    def _done(self, attempt: _Attempt) -> None:
        self._attempts.discard(attempt)
        attempt.timer.kill(block=False)

    def _run_job(self, job: dict, now: datetime | None) -> None:
        attempt = self._attempt(job)
        try:
            handler = {Trigger.DEVBOX_PAUSE: self._pause_devbox,
                       Trigger.DEVBOX_DELETE: self._delete_devbox,
                       Trigger.RUNTIME_STOP: self._stop_runtime}[Trigger(job["trigger"])]
            handler(job, attempt.abort, now)
        except PreconditionGone as exc:
            self._finish([job], JobState.CANCELLED, now, note=f"cancelled: {exc}")
        except Exception as exc:
            if not isinstance(exc, (StopUnconfirmed, Aborted)) and not _is_integration_error(exc):
                log.exception("cleanup job %s crashed", job["id"])
            self._retry(job, _describe(exc, attempt.abort), now)
        else:
            self._finish([job], JobState.SUCCEEDED, now)
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
        if row["status"] not in ("completed", "failed", "cancelled"):
            raise PreconditionGone(f"task is {row['status']}")
        if row["devbox_in_use"]:
            raise PreconditionGone("an active task uses this devbox")
        try:
            self._require_devbox().pause(snap["devboxId"], namespace=snap["namespace"], abort=abort)
        except NotFound:
            pass  # gone: nothing is left running
        self.db.one("task_mark_devbox_paused", task_id=snap["taskId"], devbox_id=snap["devboxId"],
                    now=now)

    def _delete_devbox(self, job: dict, abort: AbortSignal, now: datetime | None) -> None:
        snap = job["snapshot"]
        users = self.db.all("task_list_ids_active_with_devbox", devbox_id=snap["devboxId"])
        if users:
            raise PreconditionGone(f"active task {users[0]['id']} uses this devbox")
        self._delete_devbox_now(snap["devboxId"], snap["namespace"], abort)

    def _delete_devbox_now(self, devbox_id: str, namespace: str, abort: AbortSignal) -> None:
        try:
            self._require_devbox().delete(devbox_id, namespace=namespace, abort=abort)
        except NotFound:
            pass  # already gone counts as deleted
        self.db.all("runtime_delete_devbox", devbox_id=devbox_id)

    def _stop_runtime(self, job: dict, abort: AbortSignal, now: datetime | None) -> None:
        runtime_id = job["snapshot"]["runtime"]["id"]
        row = self.db.one("runtime_get", runtime_id=runtime_id)
        if row is None or row["status"] == "stopped":
            return  # released meanwhile
        try:
            release_confirmed(self.db, row, stop_timeout_s=self.settings.runtime_stop_timeout_s)
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
                    self._require_devbox().delete(job["devbox_id"], namespace=job["namespace"],
                                                  abort=attempt.abort)
                except NotFound:
                    pass  # already gone counts as deleted
                if not job["task_exists"]:  # otherwise its runtime row goes with the task row
                    self.db.all("runtime_delete_devbox", devbox_id=job["devbox_id"])
            except Exception as exc:
                if not _is_integration_error(exc) and not isinstance(exc, Aborted):
                    log.exception("purge job %s: devbox delete crashed", job["id"])
                self._retry(job, f"devbox {job['devbox_id']} delete: "
                                 f"{_describe(exc, attempt.abort)}", now)
            else:
                ready.append(job)
            finally:
                self._done(attempt)

        for job in deleting:
            self._pool.spawn(devbox_step, job)
        self._pool.join()
        if ready:
            outcomes = {r["outcome"]: r["n"] for r in self.db.all(
                "cleanup_job_purge_claimed", job_ids=[j["id"] for j in ready],
                attempts=[j["attempts"] for j in ready], retention_s=retention_s, now=now)}
            if outcomes.get("purged"):
                log.info("retention purge: %d task(s) deleted after their devbox",
                         outcomes["purged"])

    # -- local runtimes of this process -----------------------------------------------------------
    def release_runtimes(self, task_id: UUID | None = None) -> int:
        """Stop the local process groups this process started (of one task, or all) and release
        their rows; an unconfirmed stop becomes a runtime_stop job. How many were confirmed."""
        rows = self.db.all("runtime_list_local_of_owner", host=HOST, owner=self.owner,
                           task_id=task_id)
        if not rows:
            return 0
        timeout_s = self.settings.runtime_stop_timeout_s
        greenlets = [gevent.spawn(release_local_runtime, self.db, row, stop_timeout_s=timeout_s)
                     for row in rows]
        gevent.joinall(greenlets, timeout=timeout_s + KILL_CONFIRM_S + 5)
        return sum(1 for g in greenlets if g.successful() and g.value)

    # -- startup reconciliation -------------------------------------------------------------------
    def reconcile(self, now: datetime | None = None) -> dict:
        """Judge every row other engine runtimes left on this host; one summary log line."""
        rows = self.db.all("runtime_list_reconcilable_on_host", host=HOST, owner=self.owner,
                           limit=RECONCILE_LIMIT)
        counts: Counter = Counter()
        for row in rows:
            try:
                disposition = self._reconcile_row(row, now)
            except Exception as exc:
                disposition = "error"
                log.warning("runtime reconciliation: runtime %s (%s, task %s) failed: %s: %s",
                            row["id"], row["kind"], row["task_id"], type(exc).__name__, exc)
            counts[(str(row["kind"]), row["liveness"], disposition)] += 1
        summary = {"host": HOST, "rows": len(rows), "truncated": len(rows) >= RECONCILE_LIMIT,
                   "counts": [{"kind": k, "liveness": lv, "disposition": d, "count": n}
                              for (k, lv, d), n in sorted(counts.items())]}
        if rows:
            log.info("runtime reconciliation: %s", json.dumps(summary, separators=(",", ":")),
                     extra={"reconciliation": summary})
        return summary

    def _reconcile_row(self, row: dict, now: datetime | None) -> str:
        identity = ProcessIdentity.of_row(row)
        if identity is None:
            return "preserved_unknown"  # a devbox, or a local row without a liveness handle
        liveness = group_liveness(identity)
        if liveness is Liveness.DEAD:
            released = self.db.one("runtime_release_if_process", runtime_id=row["id"],
                                   pid=row["pid"], start_ticks=row["start_ticks"])
            return released["disposition"] if released else "changed"
        if liveness is Liveness.UNKNOWN:
            return "preserved_unknown"
        owner = process_liveness(row["host"], row["boot_id"], row["owner_pid"],
                                 row["owner_start_ticks"])
        if owner is Liveness.ALIVE:
            return "preserved_owner_alive"  # a sibling worker's live runtime
        enqueue_runtime_stop(self.db, row, now=now)
        return "preserved_stop_enqueued"


def _is_integration_error(exc: BaseException) -> bool:
    return isinstance(exc, IntegrationError)


def _describe(exc: BaseException, abort: AbortSignal) -> str:
    if isinstance(exc, Aborted) or abort.aborted:
        return f"interrupted ({abort.reason or 'aborted'})"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
