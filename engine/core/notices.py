"""Runner notices: the notifications of a process's runner writes, sent once per short tick.

A task's insert needs none either: the process that inserts a task claims it next, and the
claim's notice announces both.

A NOTIFY makes its transaction's commit take a lock PostgreSQL holds server-wide until after the
commit (so that notifications are queued in commit order): notifying commits happen one at a
time across the whole service, however many processes and cores it has, and every listening
backend then reads every notification (BENCHMARKS.md, "After the runner notices"). A runner's own
write needs no notification of its own: the process running the task knows what it wrote, a step
write answers it whether a cancel is pending, and a runner's own status move is that process's
decision. So these writes commit without notifying, and each process announces the tasks its
runners wrote to in one statement per tick (`tasks_notify_runner`, payloads marked "runner").
Viewers on other processes see such a write at most one tick later; viewers on this process are
offered the notice at once (`offer_here`), so the text a runner streams live to them never comes
before the persisted event it follows, such as "turn started". Cancel requests and every status
move made by anyone but the task's runner (the reaper, a shutdown, a cancel of a queued task)
still notify in their own statement, at once and with the lease facts.
"""

import logging
from uuid import UUID

import gevent
from gevent.event import Event
from psycopg.types.json import Jsonb

from engine.db import Database

log = logging.getLogger(__name__)

#: After a failed send, wait this long before trying again (the notices are kept).
RETRY_AFTER_S = 1.0


class RunnerNotices:
    """The tasks this process's runners wrote to since the last tick, by task id."""

    def __init__(self, db: Database, *, interval_s: float, offer_here=None, streaks=None):
        self.db = db
        self.interval_s = interval_s
        #: Offers a payload to this process's own subscribers (Listener.offer_here).
        self.offer_here = offer_here
        #: Failed sends are the `runner_notices` streak (engine/operations/streaks.py).
        self.streaks = streaks
        self._pending: dict[str, dict] = {}
        self._wakeup = Event()
        self._greenlet: gevent.Greenlet | None = None

    def changed(self, workspace: str, project: str, task_id: UUID) -> None:
        """A runner's write to this task committed: notify it with the next tick (no I/O)."""
        task = str(task_id)
        notice = {"workspace": workspace, "project": project, "task": task, "runner": True}
        self._pending[task] = notice
        self._wakeup.set()
        if self.offer_here is not None:
            self.offer_here(notice)

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._send_forever)

    def stop(self) -> None:
        """Stop ticking and send what is pending (the last writes of the runs just drained)."""
        if self._greenlet is not None:
            self._greenlet.kill(block=True, timeout=2)
        try:
            self.send_pending()
        except Exception as exc:
            log.warning("runner notices not sent at shutdown: %s", exc)

    def send_pending(self) -> None:
        """Notify every pending task in one statement; on failure they stay pending."""
        if not self._pending:
            return
        batch, self._pending = self._pending, {}
        try:
            self.db.one("tasks_notify_runner", tasks=Jsonb(list(batch.values())))
        except BaseException:  # the ticker killed mid-send at shutdown too: stop() sends them
            for task, notice in batch.items():
                self._pending.setdefault(task, notice)
            raise

    def _send_forever(self) -> None:
        while True:
            self._wakeup.wait()
            # The tick: writes of any run of this process meanwhile go in the same statement.
            gevent.sleep(self.interval_s)
            self._wakeup.clear()
            try:
                self.send_pending()
            except Exception as exc:
                if self.streaks is not None:
                    self.streaks.failed("runner_notices", exc)
                else:
                    log.warning("runner notices not sent (%s); retrying", exc)
                gevent.sleep(RETRY_AFTER_S)
                self._wakeup.set()
            else:
                if self.streaks is not None:
                    self.streaks.succeeded("runner_notices")
