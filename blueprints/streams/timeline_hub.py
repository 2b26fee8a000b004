"""The timeline hub behind the websocket (blueprints/streams/timeline_websocket.py): channels,
viewers and frames.

Per process and per watched task there is ONE channel: one follow of the task
(engine/readside/follow.py: subscribed first, re-read after a reconnect or a failed read), which
reads the task's new events and its row once per notification, renders each new event's fragment
once, and encodes the websocket frame bytes once. A joining viewer is sent the channel's frames
(no read of its own); afterwards viewers only copy each batch's bytes to their own socket (see
Viewer: one non-blocking send when idle, else through the viewer's own greenlet with `sendall`,
so a frame is never cut short: simple-websocket's `send` can write part of a frame,
STACK_NOTES). A viewer that falls a whole queue behind re-bootstraps instead of buffering without
bound.
"""

import json
import logging
import struct
import time
from math import inf
from uuid import UUID

import gevent
import gevent.socket
from flask import render_template
from gevent.event import Event
from gevent.queue import Full, Queue
from simple_websocket import ConnectionClosed

from blueprints.pages.fragments import render_timeline_sections
from engine.readside import timeline as timelines
from engine.readside.follow import Change, Follow, Idle, Removed, Snapshot
from engine.readside.store import read_task

log = logging.getLogger(__name__)

#: Frames a viewer may lag behind before it re-bootstraps instead.
VIEWER_QUEUE_SIZE = 256
#: How soon after a notification a channel re-reads its late-commit window (the events since
#: Timeline.settled_seq), for an event whose sequence number was taken before a newer event's but
#: committed after it. A notification itself reads only what follows the newest event seen: the
#: window holds every event of the last 30 s (300 at 10 writes/s), and decoding it on every
#: notification was most of the time before the first viewer got its frame.
LATE_COMMIT_SWEEP_S = 1.0
#: Markers a channel puts in its viewers' queues.
RESET, GONE, BYE = object(), object(), object()


def text_frame(payload: str) -> bytes:
    """One complete, unmasked, uncompressed websocket text frame (server to client, RFC 6455).

    Always valid, with or without permessage-deflate (RSV1 unset means "not compressed"), so a
    channel encodes a frame once for all of its viewers.
    """
    data = payload.encode()
    size = len(data)
    if size < 126:
        header = struct.pack("!BB", 0x81, size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", 0x81, 126, size)
    else:
        header = struct.pack("!BBQ", 0x81, 127, size)
    return header + data


def frame(kind: str, **fields) -> bytes:
    return text_frame(json.dumps({"t": kind, **fields}, separators=(",", ":")))


PING = frame("ping")
READY = frame("ready")
RESET_FRAME = frame("reset")


class Viewer:
    """One websocket watching a task.

    A channel hands it each batch of (seq, encoded frame). When the viewer is idle (its own
    greenlet is not writing and nothing is queued), the channel writes the batch straight to the
    socket with ONE non-blocking send, which never yields: a thousand viewers cost a thousand
    syscalls, not a thousand greenlet wake-ups. Whatever does not fit at once (or arrives while
    the viewer is busy) goes through the viewer's queue and its own greenlet, in order, so the
    socket still has one writer at a time and frames are never interleaved.

    The channel calls `offer` once per viewer per write, so its direct path is kept to a few
    attribute reads and the socket's own C `send` (a quarter of a thousand-viewer fanout was the
    Python around the send, BENCHMARKS.md).
    """

    def __init__(self, out: "FrameSocket"):
        self.queue: Queue = Queue(VIEWER_QUEUE_SIZE)
        #: One attempt to write, never waiting (None: always through the queue).
        self.send_now = out.send_now
        #: The viewer's greenlet is writing (its bootstrap first) or has items queued: the
        #: channel must queue. Whoever queues sets it; the greenlet clears it only right before
        #: it waits on an empty queue, so "not busy" means "nothing queued".
        self.busy = True
        #: Event seqs its bootstrap sent; a batch overlapping them goes through the queue.
        self.sent: set[int] = set()
        self.broken = False

    def offer(self, item, joined: bytes | None = None, seqs: frozenset = frozenset()) -> None:
        if not self.busy and joined is not None and self.send_now is not None:
            if self.sent.isdisjoint(seqs):
                try:
                    written = self.send_now(joined)
                except BlockingIOError:
                    written = 0
                except OSError:
                    # The peer is gone: its greenlet notices and leaves; nothing more is sent.
                    self.broken, self.send_now = True, None
                    return
                if written == len(joined):
                    return
                item = [(None, joined[written:])]
        self.busy = True
        try:
            self.queue.put_nowait(item)
        except Full:
            while not self.queue.empty():
                self.queue.get_nowait()
            self.queue.put_nowait(RESET)


class Channel:
    """One watched task in this process: its follow (engine/readside/follow.py), its viewers,
    and what a joining viewer is sent first (the task's sections and every event's frame)."""

    def __init__(self, hub: "TimelineHub", workspace: str, task_id: UUID):
        self.hub = hub
        self.workspace, self.task_id = workspace, task_id
        self.viewers: set[Viewer] = set()
        self.timeline = timelines.Timeline()
        #: Every event's frame, in the order they were added: a joining viewer's bootstrap.
        self.frames: list[tuple[int, bytes]] = []
        self.sections: str | None = None
        self.sections_frame = b""
        #: The task was purged: a viewer is told `gone`.
        self.gone = False
        #: Set once the channel knows the events that exist; viewers join only after that, so an
        #: event is either in a viewer's bootstrap or broadcast to it, never neither.
        self.ready = Event()
        #: When the late-commit window is re-read next (monotonic seconds; None: not due).
        self.sweep_at: float | None = None
        self.follow = Follow(
            hub.runtime,
            workspace=workspace,
            task=task_id,
            snapshot=self._read_all,
            change=lambda _payload: self._read_news(sweep=False),
            idle=self._sweep_if_due,
            wait_s=lambda: inf if self.sweep_at is None else self.sweep_at - time.monotonic(),
        )
        self.greenlet = gevent.spawn(self._run)

    def _run(self) -> None:
        try:
            for update in self.follow:
                if isinstance(update, Snapshot):
                    self._restart(*update.value)
                    if self.ready.is_set():
                        self._broadcast(RESET)
                    self.ready.set()
                elif isinstance(update, Change):
                    if self.sweep_at is None:
                        self.sweep_at = time.monotonic() + LATE_COMMIT_SWEEP_S
                    self._publish(*update.value)
                elif isinstance(update, Removed):
                    self.gone = True
                    self.ready.set()
                    self._broadcast(GONE)
                elif isinstance(update, Idle):
                    if update.value is not None:
                        self._publish(*update.value)
                    elif self.sweep_at is None and not self.viewers:
                        return
            self._broadcast(BYE)  # the listener closed: this server is shutting down
        except Exception:
            log.exception("timeline channel %s failed; its viewers rejoin", self.task_id)
            self._broadcast(RESET)
        finally:
            self.ready.set()
            self.follow.close()
            self.hub.drop(self)

    def _read_all(self) -> tuple[dict, list[dict]] | None:
        """The task's row and its events; None once it is gone."""
        row = read_task(self.hub.runtime.db, self.workspace, self.task_id)
        if row is None:
            return None
        return row, timelines.read_events(self.hub.runtime.db, self.workspace, self.task_id)

    def _read_news(self, sweep: bool) -> tuple[dict, list[dict]] | None:
        """The task's row and the events after the newest one seen, or with `sweep` after the
        timeline's settled seq (late commits included); None once the task is gone."""
        # Both reads at once (two pool connections): they are most of the time before the fanout.
        reading = gevent.spawn(self._read_events_after, sweep)
        row = read_task(self.hub.runtime.db, self.workspace, self.task_id)
        events = reading.get()
        return None if row is None else (row, events)

    def _read_events_after(self, sweep: bool) -> list[dict]:
        if sweep:
            after = self.timeline.settled_seq()
        else:
            after = self.timeline.entries[-1].seq if self.timeline.entries else 0
        events: list[dict] = []
        while True:
            page = timelines.read_events(
                self.hub.runtime.db, self.workspace, self.task_id, after_seq=after
            )
            events += page
            if len(page) < timelines.MAX_EVENTS:
                return events
            after = page[-1]["seq"]

    def _sweep_if_due(self) -> tuple[dict, list[dict]] | None:
        """Re-read the late-commit window once it is due (None: not due, or the task is gone:
        its notification says so)."""
        if self.sweep_at is None or time.monotonic() < self.sweep_at:
            return None
        self.sweep_at = None
        return self._read_news(sweep=True)

    def _restart(self, row: dict, events: list[dict]) -> None:
        """Start over from a whole snapshot (what every viewer is sent again on RESET)."""
        self.timeline, self.frames, self.sections, self.gone = timelines.Timeline(), [], None, False
        self.sweep_at = None
        self._render(row, events)

    def _publish(self, row: dict, events: list[dict]) -> None:
        """Send what is new in `events` and `row` to every viewer, one encoded batch for all."""
        batch = self._render(row, events)
        if batch:
            joined = b"".join(data for _, data in batch)
            seqs = frozenset(seq for seq, _ in batch if seq is not None)
            for viewer in list(self.viewers):
                viewer.offer(batch, joined, seqs)

    def _render(self, row: dict, events: list[dict]) -> list[tuple[int | None, bytes]]:
        """Add `events` to the timeline; the frames of the new ones, and of the sections when
        they changed."""
        batch = []
        with self.hub.app.app_context():
            for event in events:
                added = self.timeline.add(event)
                if added is not None:
                    html = render_event(self.task_id, *added)
                    data = frame("frag", seq=added[0].seq, html=html)
                    self.frames.append((added[0].seq, data))
                    batch.append((added[0].seq, data))
            sections = render_timeline_sections(row)
        if sections != self.sections:
            self.sections, self.sections_frame = sections, frame("frag", html=sections)
            batch.append((None, self.sections_frame))
        return batch

    def _broadcast(self, item) -> None:
        for viewer in list(self.viewers):
            viewer.offer(item)


class TimelineHub:
    """The channels of this process, by (workspace, task id)."""

    def __init__(self, app, runtime):
        self.app = app
        self.runtime = runtime
        self.channels: dict[tuple[str, UUID], Channel] = {}

    def join(self, workspace: str, task_id: UUID, viewer: Viewer) -> Channel:
        key = (workspace, task_id)
        channel = self.channels.get(key)
        if channel is None or channel.greenlet.dead:
            channel = self.channels[key] = Channel(self, workspace, task_id)
        channel.viewers.add(viewer)
        channel.ready.wait()
        return channel

    def leave(self, channel: Channel, viewer: Viewer) -> None:
        channel.viewers.discard(viewer)
        if not channel.viewers:
            channel.greenlet.kill(block=False)
            self.drop(channel)

    def drop(self, channel: Channel) -> None:
        key = (channel.workspace, channel.task_id)
        if self.channels.get(key) is channel:
            del self.channels[key]
        channel.follow.close()


def render_event(task_id, entry, step) -> str:
    html = render_template("partials/timeline_event.html", task_id=task_id, entry=entry)
    if step is not None:
        html += render_template("partials/timeline_step.html", task_id=task_id, step=step)
    return html


def bootstrap(raw: "FrameSocket", channel: Channel) -> set[int]:
    """Send reset, sections and every event so far (the channel's, no read of its own), READY
    last; the seqs sent."""
    if channel.gone:
        raw.send(frame("gone"))
        raise ConnectionClosed()
    events = list(channel.frames)  # before the first send yields: the channel may add to it
    raw.send(b"".join([RESET_FRAME, channel.sections_frame, *(data for _, data in events), READY]))
    return {seq for seq, _ in events}


class FrameSocket:
    """Pre-encoded frames onto a websocket's connection.

    simple-websocket (1.1.0) only sends frames it encodes itself, through a plain `sock.send` that
    can write part of a large frame (STACK_NOTES; upstream simple-websocket#45), and has no way to
    send encoded bytes or to write without waiting. So the frames go to `ws.sock`, the connection
    flask-sock gives it (a gevent socket): `sendall` for whole frames, and `send_now` for one
    attempt that never waits.
    """

    def __init__(self, ws):
        self.ws = ws
        sock = getattr(ws, "sock", None)
        #: One write of what fits now, never waiting: the C `send` of the non-blocking socket
        #: under gevent's (`_sock`), which gevent's own `send(..., timeout=0.0)` calls after a
        #: frame of Python. It returns how many bytes it wrote, raises BlockingIOError when none
        #: fit, and OSError once the connection is closed: it belongs to this socket object, so a
        #: descriptor number reused by a later connection is never written to. None: not a
        #: gevent socket; every frame goes through `send`. `_sock` is gevent's private attribute:
        #: tests/unit/test_frame_socket.py fails when a gevent release moves it.
        self.send_now = sock._sock.send if isinstance(sock, gevent.socket.socket) else None

    def send(self, data: bytes) -> None:
        """Write `data` whole (yields while the peer is slow)."""
        if not self.ws.connected:
            raise ConnectionClosed()
        self.ws.sock.sendall(data)
