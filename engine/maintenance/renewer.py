"""The lease renewer: every lease this process holds renewed in ONE statement per tick. The same
statement says which leases were lost and which tasks have a cancel pending; those runs are told
to stop (engine/abort.py).

Through a database blip the renewal is retried until the first held lease would expire; a run
whose lease expired unrenewed is stopped as lost (the reaper resolves it once the database is
back), and the others are renewed at once.
"""

import time
from collections.abc import Callable, Mapping
from uuid import UUID

import gevent

from engine.abort import CANCEL, LEASE_LOST
from engine.core import leases
from engine.core.handle import FencedHandle
from engine.db import Database
from engine.errors import DatabaseUnavailable
from engine.operations import metrics
from engine.operations.config import Settings
from engine.operations.streaks import Streaks


class LeaseRenewer:
    """Renews the leases of `handles` (the runs this process holds, by task id, read live)."""

    def __init__(
        self,
        db: Database,
        settings: Settings,
        streaks: Streaks,
        *,
        owner: str,
        handles: Callable[[], Mapping[UUID, FencedHandle]],
        abort_run: Callable[[UUID, str], bool],
    ):
        self.db = db
        self.settings = settings
        self.streaks = streaks
        self.owner = owner
        self.handles = handles
        #: Fires the abort of one of this process's runs (EngineRuntime.abort_local).
        self.abort_run = abort_run

    def run_forever(self) -> None:
        """One tick every LEASE_RENEW_INTERVAL_S; a failing tick is the `lease_renewal` streak."""
        while True:
            gevent.sleep(self.settings.lease_renew_interval_s)
            try:
                with metrics.timed(metrics.RENEWAL_DURATION):
                    self.renew_once()
            except Exception as exc:
                self.streaks.failed("lease_renewal", exc)
            else:
                self.streaks.succeeded("lease_renewal")

    def renew_once(self) -> None:
        """One renewal tick: renew all held leases; abort runners whose lease is gone."""
        while True:
            now = time.monotonic()
            held: dict[UUID, FencedHandle] = {}
            for task_id, handle in list(self.handles().items()):
                if handle.ending is not None:
                    continue
                deadline = handle.lease_deadline
                if deadline is not None and deadline <= now:
                    self.abort_run(task_id, LEASE_LOST)
                else:
                    held[task_id] = handle
            if not held:
                return
            deadlines = [h.lease_deadline for h in held.values()]
            first = min((d for d in deadlines if d is not None), default=None)
            try:
                still_held = leases.renew_all(
                    self.db,
                    {task_id: handle.epoch for task_id, handle in held.items()},
                    owner=self.owner,
                    lease_ttl_s=self.settings.lease_ttl_s,
                    retry_until=first,
                )
            except DatabaseUnavailable:
                if first is None or time.monotonic() < first:
                    raise
                continue  # the first lease expired meanwhile: stop it, renew the rest
            break
        current = self.handles()
        for task_id, handle in held.items():
            if current.get(task_id) is not handle or handle.ending is not None:
                continue  # it ended while the tick ran: its own terminal write moved the lease
            if task_id not in still_held:
                self.abort_run(task_id, LEASE_LOST)
                continue
            # The renewed lease runs from no earlier than this statement was sent.
            handle.lease_deadline = now + self.settings.lease_ttl_s
            if still_held[task_id]:
                self.abort_run(task_id, CANCEL)
