"""Follow what a viewer watches: the one loop behind every live stream.

The project streams (SSE), the timeline websocket's per-task channel and the gateway stream are
adapters over `Follow`; each says how to read (a whole snapshot, one notified change) and turns
the updates into its own frames. The rules live here, once:

- subscribe first, then the first read, so no change falls in between (payloads carry ids only);
- one `Change` per notification, re-read; a retention purge's notice is itself the removal (no
  row is left to read), and so is a re-read that finds no row;
- `Idle` after `stream_keepalive_s` of silence (one setting for every stream): send a keepalive;
- a listener reconnect (or a backlog dropped) means changes were missed: read a whole `Snapshot`
  again;
- a failed read (the database unreachable) never ends the stream: it is an `Idle` (the viewer
  keeps a live connection), then a whole `Snapshot` is read again every RETRY_S until one
  succeeds, since the viewer may have missed a change meanwhile.

The stream ends only when the listener closes (this process is shutting down) or its adapter
stops iterating (the viewer left, or a gateway stream's task finished).
"""

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg

from engine.maintenance.listener import CLOSED, REBOOTSTRAP

log = logging.getLogger(__name__)

#: After a failed read, how soon a follower reads a whole snapshot again (until one succeeds).
RETRY_S = 1.0


@dataclass(frozen=True)
class Snapshot:
    """Everything, read whole: the first read, and again whenever changes may have been missed."""

    value: Any


@dataclass(frozen=True)
class Change:
    """One notified change, re-read."""

    value: Any


@dataclass(frozen=True)
class Removed:
    """The followed task (or, following a project, the notified one) is gone: purged."""

    task: str | None


@dataclass(frozen=True)
class Live:
    """A frame this process's runner published and never persisted (engine.maintenance.listener
    LiveFeed): shown as it is, no read."""

    payload: dict


@dataclass(frozen=True)
class Idle:
    """Nothing new for a while: send a keepalive. `value` is what the `idle` read returned."""

    value: Any = None


Update = Snapshot | Change | Removed | Live | Idle
_FAILED = object()


class Follow:
    """One viewer's (or one channel's) follow of a project or a task; iterate for updates.

    Subscribes when built, so a request can still refuse (404) before it streams: `close()` it
    then; iterating to the end, or closing the iterator, closes it too.

    - `snapshot()` reads everything; `change(payload)` re-reads what one notification names.
      Either returning None means the task is gone (`Removed`).
    - `idle()`, if given, is read on every `Idle` (due work an adapter times, e.g. expiries).
    - `wait_s()`, if given, shortens the next wait below the keepalive (to when that work is due;
      0 or less: due now).
    - `live`: following a task, also receive its runner's unpersisted frames (`Live`).
    """

    def __init__(
        self,
        engine,
        *,
        workspace: str,
        project: str | None = None,
        task=None,
        snapshot: Callable[[], Any],
        change: Callable[[dict], Any],
        idle: Callable[[], Any] | None = None,
        wait_s: Callable[[], float] | None = None,
        live: bool = False,
    ):
        self.keepalive_s: float = engine.settings.stream_keepalive_s
        self.task = None if task is None else str(task)
        self._snapshot, self._change, self._idle, self._wait_s = snapshot, change, idle, wait_s
        self.subscription = engine.listener.subscribe(
            workspace=workspace, project=project, task=self.task
        )
        self._live = engine.live if live else None
        if self._live is not None:
            self._live.watch(self.task, self.subscription)

    def end(self) -> None:
        """End the iteration at its next wait (the viewer's session ended)."""
        self.subscription.end()

    def close(self) -> None:
        """Unsubscribe (idempotent)."""
        if self._live is not None:
            self._live.unwatch(self.task, self.subscription)
        self.subscription.close()

    def __iter__(self) -> Iterator[Update]:
        try:
            yield from self._follow()
        finally:
            self.close()

    def _follow(self) -> Iterator[Update]:
        stale = True  # nothing shown yet: the first read is a whole snapshot
        while True:
            if stale:
                value = self._read(self._snapshot)
                if value is _FAILED:
                    yield Idle()
                    if not self._rest(RETRY_S):
                        return
                    continue
                stale = False
                yield Removed(self.task) if value is None else Snapshot(value)
                continue
            payload = self._next()
            if payload is CLOSED:
                return
            if payload is REBOOTSTRAP:
                stale = True
            elif payload is None:
                value = None if self._idle is None else self._read(self._idle)
                stale = value is _FAILED
                yield Idle(None if stale else value)
            elif "live" in payload:
                yield Live(payload["payload"])
            elif payload.get("removed"):
                yield Removed(payload.get("task"))
            else:
                value = self._read(self._change, payload)
                stale = value is _FAILED
                if stale:
                    yield Idle()
                elif value is None:
                    yield Removed(payload.get("task"))
                else:
                    yield Change(value)

    def _next(self) -> dict | None:
        """The next payload, or None once the wait is over (the keepalive, or due work)."""
        wait = self.keepalive_s
        if self._wait_s is not None:
            wait = min(wait, self._wait_s())
        if wait <= 0:
            return None
        return self.subscription.get(timeout=wait)

    def _rest(self, seconds: float) -> bool:
        """Wait `seconds`, dropping notifications (a whole snapshot follows); False: closed."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            if self.subscription.get(timeout=left) is CLOSED:
                return False
        return True

    def _read(self, read: Callable, *args) -> Any:
        try:
            return read(*args)
        except psycopg.OperationalError as exc:  # PoolTimeout is one too
            log.warning("follow of %s: a read failed (%s); reading again", self._about(), exc)
            return _FAILED

    def _about(self) -> str:
        return f"task {self.task}" if self.task else f"project {self.subscription.project}"
