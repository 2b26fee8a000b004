"""One LISTEN connection per process, fanned out in-process to subscribers.

Payloads carry ids only ({workspace, project, task}); subscribers re-read rows. After the
listener reconnects, every subscriber receives REBOOTSTRAP because notifications in the gap
are lost. A subscriber that falls behind gets REBOOTSTRAP instead of an unbounded queue.
"""

import json
import logging
import time
import uuid

import gevent
from gevent.event import Event
from gevent.queue import Empty, Full, Queue

from engine.db import NOTIFY_CHANNEL, Database
from engine.operations import metrics

log = logging.getLogger(__name__)

REBOOTSTRAP = {"rebootstrap": True}
CLOSED = {"closed": True}
SUBSCRIBER_QUEUE_SIZE = 1000
#: How often the listener measures its delivery lag with a probe notification of its own.
PROBE_INTERVAL_S = 30.0


class Subscription:
    """A filtered view of the channel; iterate `get()` for payload dicts."""

    def __init__(
        self, listener: "Listener", *, workspace: str | None, project: str | None, task: str | None
    ):
        self.listener = listener
        self.workspace, self.project, self.task = workspace, project, task
        self.queue: Queue = Queue(SUBSCRIBER_QUEUE_SIZE)

    def matches(self, payload: dict) -> bool:
        return (
            (self.workspace is None or payload.get("workspace") == self.workspace)
            and (self.project is None or payload.get("project") == self.project)
            and (self.task is None or payload.get("task") == self.task)
        )

    def offer(self, payload: dict) -> None:
        try:
            self.queue.put_nowait(payload)
        except Full:
            # Behind by a whole queue: drop the backlog, the subscriber re-bootstraps instead.
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(REBOOTSTRAP)

    def get(self, timeout: float | None = None) -> dict | None:
        """The next payload, or None after `timeout` seconds."""
        try:
            return self.queue.get(timeout=timeout)
        except Empty:
            return None

    def end(self) -> None:
        """Deliver CLOSED next, whatever is queued: the subscriber's stream is over (its
        viewer's session ended)."""
        while not self.queue.empty():
            self.queue.get_nowait()
        self.queue.put_nowait(CLOSED)

    def close(self) -> None:
        self.listener.unsubscribe(self)


class Listener:
    """The per-process listener greenlet and its subscribers."""

    RECONNECT_BACKOFF_S = (0.1, 0.5, 1.0, 2.0, 5.0)

    def __init__(self, db: Database, *, streaks=None):
        self.db = db
        #: The listener's connection failures are the `listener` streak
        #: (engine/operations/streaks.py).
        self.streaks = streaks
        self.subscribers: set[Subscription] = set()
        self.callbacks: list = []
        self._stopping = False
        self._greenlet = None
        self._prober = None
        self.connected = Event()
        #: Probes this process sent and not yet received: id -> perf_counter at send.
        self._probes: dict[str, float] = {}

    def subscribe(self, *, workspace=None, project=None, task=None) -> Subscription:
        """Subscribe BEFORE reading the bootstrap, so nothing falls in between."""
        sub = Subscription(self, workspace=workspace, project=project, task=task)
        if self._stopping:
            # The process is on its way out: the stream ends after its first read (its viewer
            # reconnects to another process) instead of holding the worker's exit.
            sub.queue.put_nowait(CLOSED)
        self.subscribers.add(sub)
        metrics.STREAM_VIEWERS.set(len(self.subscribers))
        return sub

    def unsubscribe(self, sub: Subscription) -> None:
        self.subscribers.discard(sub)
        metrics.STREAM_VIEWERS.set(len(self.subscribers))

    def on_notify(self, callback) -> None:
        """Call `callback(payload)` for every notification (the runtime's cancel delivery)."""
        self.callbacks.append(callback)

    def start(self) -> None:
        self._greenlet = gevent.spawn(self._listen_forever)
        self._prober = gevent.spawn(self._probe_forever)

    def stop(self) -> None:
        self._stopping = True
        for sub in list(self.subscribers):
            sub.queue.put(CLOSED)
        if self._prober is not None:
            self._prober.kill(block=False)
        if self._greenlet is not None:
            # Killing the wait drops the dedicated connection with it; nothing else uses it.
            self._greenlet.kill(block=True, timeout=2)

    def dispatch(self, payload: dict) -> None:
        if "probe" in payload:
            sent = self._probes.pop(payload["probe"], None)
            if sent is not None:
                metrics.NOTIFY_LAG.observe(time.perf_counter() - sent)
            return  # a probe is nobody else's business
        for callback in self.callbacks:
            try:
                callback(payload)
            except Exception:
                log.exception("notify callback failed")
        self.offer_here(payload)

    def offer_here(self, payload: dict) -> None:
        """Offer a payload to this process's subscribers only: a runner's own write, which other
        processes learn of with the next tick of its runner notices (engine/core/notices.py)."""
        for sub in list(self.subscribers):
            if sub.matches(payload):
                sub.offer(payload)

    def _listen_forever(self) -> None:
        failures = 0
        first = True
        while not self._stopping:
            try:
                with self.db.dedicated_connection() as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self.connected.set()
                    if not first:
                        log.info("listener reconnected; subscribers re-bootstrap")
                        for sub in list(self.subscribers):
                            sub.offer(REBOOTSTRAP)
                    first = False
                    failures = 0
                    if self.streaks is not None:
                        self.streaks.succeeded("listener")
                    while not self._stopping:
                        for notify in conn.notifies(timeout=0.5):
                            self.dispatch(_parse(notify.payload))
            except Exception as exc:
                self.connected.clear()
                if self._stopping:
                    return
                delay = self.RECONNECT_BACKOFF_S[min(failures, len(self.RECONNECT_BACKOFF_S) - 1)]
                failures += 1
                if self.streaks is not None:
                    self.streaks.failed("listener", exc)
                else:
                    log.warning("listener connection lost (%s); reconnecting in %.1fs", exc, delay)
                gevent.sleep(delay)

    def probe(self) -> None:
        """Send one probe notification; its delivery lag is observed when it comes back."""
        probe = uuid.uuid4().hex
        self._probes = {probe: time.perf_counter()}  # an unanswered older probe is dropped
        self.db.one("notify_probe", probe=probe)

    def _probe_forever(self) -> None:
        while not self._stopping:
            if self.connected.wait(timeout=PROBE_INTERVAL_S):
                try:
                    self.probe()
                except Exception as exc:
                    log.debug("notify probe failed: %s", exc)
            gevent.sleep(PROBE_INTERVAL_S)


def _parse(payload: str) -> dict:
    try:
        return json.loads(payload)
    except ValueError:
        return {}


class LiveFeed:
    """Unpersisted frames a runner shows to viewers on this process (streamed model tokens).

    Viewers in other processes see the same text when the runner persists it in batches; the
    gateway stream dedupes the two by offset. Frames go into a viewer's Subscription queue, so
    one loop serves both, and a viewer that falls behind re-bootstraps like any other.
    """

    def __init__(self):
        self._viewers: dict[str, set[Subscription]] = {}

    def watch(self, task_id, subscription: Subscription) -> None:
        self._viewers.setdefault(str(task_id), set()).add(subscription)

    def unwatch(self, task_id, subscription: Subscription) -> None:
        viewers = self._viewers.get(str(task_id))
        if viewers is not None:
            viewers.discard(subscription)
            if not viewers:
                del self._viewers[str(task_id)]

    def publish(self, task_id, kind: str, payload: dict) -> None:
        """Offer one frame to this task's viewers (never blocks the runner)."""
        for subscription in list(self._viewers.get(str(task_id), ())):
            subscription.offer({"task": str(task_id), "live": kind, "payload": payload})
