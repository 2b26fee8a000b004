"""The `task_runtimes` rows (seed 001): the durable handle of each runtime a task started, its
release, and startup reconciliation.

- A row is a local process group (engine/cleanup/process_groups.py identifies it) or a devbox.
  It stays until a stop of that runtime is confirmed; a terminal task does not imply it.
- At boot, each process reconciles the rows other engine runtimes left on this host: confirmed
  dead -> removed (or repaired in place where it carries something to resume); alive or Unknown
  -> preserved; one bounded summary line, one warning per unexpected error only.
"""

import json
import logging
import os
import subprocess
from collections import Counter
from datetime import datetime
from uuid import UUID

import gevent

from engine.abort import Aborted, AbortSignal
from engine.cleanup.jobs import enqueue_runtime_stop
from engine.cleanup.process_groups import (
    HOST,
    KILL_CONFIRM_S,
    Liveness,
    ProcessIdentity,
    StopUnconfirmed,
    group_liveness,
    own_start_ticks,
    process_liveness,
    spawn_group,
    stop_group,
)
from engine.db import Database

log = logging.getLogger(__name__)

#: Rows one boot reconciles at most (the rest wait for the next boot).
RECONCILE_LIMIT = 1000


class RecordedProcessGroup:
    """A process group a runner started (the LocalProcess of engine/runners/context.py); its
    task_runtimes row is the durable handle.

    `wait(abort)` waits for the leader and stops the whole group on an abort; `stop()` stops the
    group and releases the row. Whatever is left when the run ends is stopped by the engine.
    """

    def __init__(
        self,
        popen: subprocess.Popen,
        identity: ProcessIdentity | None,
        runtime_id: UUID | None,
        release,
    ):
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


def start_local_runtime(
    db: Database,
    task_id: UUID,
    *,
    epoch: int,
    owner: str,
    argv: list[str],
    label: str | None,
    resume: dict | None,
    stop_timeout_s: float,
    **popen_kwargs,
) -> RecordedProcessGroup | None:
    """Start argv in its own process group and record it, fenced on the lease, before returning.
    None: the lease is gone (the group was stopped again at once)."""
    popen, identity = spawn_group(argv, **popen_kwargs)
    if identity is None:  # finished before it could be recorded: nothing is left to stop
        return RecordedProcessGroup(popen, None, None, lambda: True)
    row = db.one(
        "runtime_insert_local_if_held",
        task_id=task_id,
        epoch=epoch,
        owner=owner,
        liveness="process",
        label=label or os.path.basename(argv[0]),
        host=HOST,
        owner_pid=os.getpid(),
        owner_start_ticks=own_start_ticks(),
        boot_id=identity.boot_id,
        pid=identity.pid,
        pgid=identity.pgid,
        start_ticks=identity.start_ticks,
        resume=resume,
    )
    if row is None:
        stop_group(identity, timeout_s=stop_timeout_s)
        return None
    return RecordedProcessGroup(
        popen,
        identity,
        row["id"],
        lambda: release_local_runtime(db, row, stop_timeout_s=stop_timeout_s),
    )


def release_local_runtime(
    db: Database, row: dict, *, stop_timeout_s: float, now: datetime | None = None
) -> bool:
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
    return _release_if_process(db, row)


def _release_if_process(db: Database, row: dict) -> str:
    """Release a local row whose process is stopped or dead, if the row still describes that
    process (pid and start ticks); its disposition, or "changed" when it no longer does."""
    released = db.one(
        "runtime_release_if_process",
        runtime_id=row["id"],
        pid=row["pid"],
        start_ticks=row["start_ticks"],
    )
    return released["disposition"] if released else "changed"


def release_owned(
    db: Database, owner: str, *, stop_timeout_s: float, task_id: UUID | None = None
) -> int:
    """Stop the local process groups `owner` started on this host (of one task, or all) and
    release their rows; an unconfirmed stop becomes a runtime_stop job. How many were confirmed."""
    rows = db.all("runtime_list_local_of_owner", host=HOST, owner=owner, task_id=task_id)
    if not rows:
        return 0
    greenlets = [
        gevent.spawn(release_local_runtime, db, row, stop_timeout_s=stop_timeout_s) for row in rows
    ]
    gevent.joinall(greenlets, timeout=stop_timeout_s + KILL_CONFIRM_S + 5)
    return sum(1 for g in greenlets if g.successful() and g.value)


def reconcile(db: Database, owner: str, now: datetime | None = None) -> dict:
    """Judge every row other engine runtimes left on this host; one bounded summary log line,
    counted by the classification seed 001 asks for (never a resume token or a payload)."""
    rows = db.all(
        "runtime_list_reconcilable_on_host", host=HOST, owner=owner, limit=RECONCILE_LIMIT
    )
    counts: Counter = Counter()
    for row in rows:
        stop_error = "none"
        try:
            disposition = _reconcile_row(db, row, now)
        except Exception as exc:
            disposition, stop_error = "error", type(exc).__name__
            log.warning(
                "runtime reconciliation: runtime %s (%s, task %s) failed: %s: %s",
                row["id"],
                row["kind"],
                row["task_id"],
                type(exc).__name__,
                exc,
            )
        counts[
            (
                row["task_state"],
                str(row["kind"]),
                row["liveness"],
                row["pid"] is not None,
                stop_error,
                disposition,
            )
        ] += 1
    summary = {
        "host": HOST,
        "rows": len(rows),
        "truncated": len(rows) >= RECONCILE_LIMIT,
        "counts": [
            {
                "taskState": ts,
                "kind": k,
                "liveness": lv,
                "localPid": pid,
                "stopError": err,
                "disposition": d,
                "count": n,
            }
            for (ts, k, lv, pid, err, d), n in sorted(counts.items())
        ],
    }
    if rows:
        log.info(
            "runtime reconciliation: %s",
            json.dumps(summary, separators=(",", ":")),
            extra={"reconciliation": summary},
        )
    return summary


#: Rows of gone hosts one sweep judges at most.
ORPHAN_BATCH = 100


def judge_orphaned_elsewhere(
    db: Database, *, lease_ttl_s: float, now: datetime | None = None
) -> int:
    """Reaper: local runtimes of another host whose engine is gone (see the query) stop counting
    as running: marked stop_failed with why, and a stop job bound to their host, which runs it if
    that host ever comes back. Never deleted: no process here can confirm them dead. How many."""
    rows = db.all(
        "runtime_list_orphaned_elsewhere",
        host=HOST,
        lease_ttl_s=lease_ttl_s,
        limit=ORPHAN_BATCH,
        now=now,
    )
    for row in rows:
        enqueue_runtime_stop(db, row, now=now)
        db.one(
            "runtime_mark_stop_failed",
            runtime_id=row["id"],
            error=(
                f"the engine that started it on host {row['host']} is gone (its task ended without "
                f"it releasing the process); a stop waits for that host"
            ),
        )
    if rows:
        log.warning(
            "runtimes of gone hosts: %d marked stop_failed (%s)",
            len(rows),
            ", ".join(sorted({r["host"] for r in rows})),
        )
    return len(rows)


def _reconcile_row(db: Database, row: dict, now: datetime | None) -> str:
    identity = ProcessIdentity.of_row(row)
    if identity is None:
        return "preserved_unknown"  # a devbox, or a local row without a liveness handle
    liveness = group_liveness(identity)
    if liveness is Liveness.DEAD:
        return _release_if_process(db, row)
    if liveness is Liveness.UNKNOWN:
        return "preserved_unknown"
    owner = process_liveness(
        row["host"], row["boot_id"], row["owner_pid"], row["owner_start_ticks"]
    )
    if owner is Liveness.ALIVE:
        return "preserved_owner_alive"  # a sibling worker's live runtime
    enqueue_runtime_stop(db, row, now=now)
    return "preserved_stop_enqueued"
