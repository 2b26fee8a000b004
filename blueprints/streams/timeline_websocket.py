"""The timeline websocket: /ws/tasks/<id>/timeline (flask-sock), one small frame per event.

Each viewer joins its task's channel (blueprints/streams/timeline_hub.py: one follow of the task per
process, engine/readside/follow.py), which sends it a `reset` frame, the timeline sections and one
frame per event from what the channel has read; afterwards it relays the channel's frames,
skipping events its bootstrap already sent.

Frames are JSON: {"t": "reset"}, {"t": "frag", "html", "seq"?}, {"t": "ready"} (bootstrap
sent), {"t": "ping"} (every STREAM_KEEPALIVE_S of silence), {"t": "gone"}
(the task was purged: stop), {"t": "bye"} (this server is shutting down: reconnect).
"""

from flask import Blueprint, abort, current_app, request
from flask_sock import Sock
from gevent.queue import Empty
from simple_websocket import ConnectionClosed

from blueprints.auth.edge import origin_allowed
from blueprints.auth.gate import current_identity, watch_session
from blueprints.request_helpers import runtime
from blueprints.streams.timeline_hub import (
    BYE,
    GONE,
    PING,
    RESET,
    FrameSocket,
    TimelineHub,
    Viewer,
    bootstrap,
    frame,
)
from engine.readside.store import read_task

bp = Blueprint("ws", __name__)
sock = Sock()


def hub() -> TimelineHub:
    return current_app.extensions["timeline_hub"]


@bp.before_request
def check_handshake():
    """Refuse before the upgrade: a foreign Origin is 403, a task not ours is 404."""
    # Browsers always send Origin and a cross-site page cannot forge it; it must name this
    # site's configured public origin (never merely whatever Host the request came with).
    if not origin_allowed(request.headers.get("Origin")):
        abort(403, description="websocket Origin does not match this site")
    task_id = (request.view_args or {}).get("task_id")
    if task_id is None or read_task(runtime().db, current_identity().workspace, task_id) is None:
        abort(404)


@sock.route("/ws/tasks/<uuid:task_id>/timeline", bp=bp)
def timeline_socket(ws, task_id):
    """Stream a task's timeline: reset, sections, its events, then every new one."""
    workspace = current_identity().workspace
    keepalive_s = runtime().settings.stream_keepalive_s
    raw = FrameSocket(ws)
    viewer = Viewer(raw)
    channel = hub().join(workspace, task_id, viewer)  # subscribe before the bootstrap read
    # A session that ends (signed out, expired) gets "bye": the page reconnects and is refused.
    stop_watching = watch_session(lambda: viewer.queue.put(BYE))
    try:
        viewer.sent = sent = bootstrap(raw, channel)
        while ws.connected and not viewer.broken:
            # Idle only while waiting: with items queued, get() returns them without yielding,
            # so the channel never sees "not busy" with anything queued (Viewer.busy).
            viewer.busy = False
            try:
                item = viewer.queue.get(timeout=keepalive_s)
            except Empty:
                viewer.busy = True
                raw.send(PING)
                continue
            viewer.busy = True
            if item is GONE or item is BYE:
                raw.send(frame("gone" if item is GONE else "bye"))
                return
            if item is RESET:
                if channel.greenlet.dead:
                    hub().leave(channel, viewer)
                    channel = hub().join(workspace, task_id, viewer)
                viewer.sent = sent = bootstrap(raw, channel)
                continue
            out = []
            for seq, data in item:
                if seq is not None:
                    if seq in sent:
                        continue
                    sent.add(seq)
                out.append(data)
            if out:
                raw.send(b"".join(out))
    except (ConnectionClosed, OSError):
        pass
    finally:
        stop_watching()
        hub().leave(channel, viewer)


def init_app(app, runtime) -> None:
    """Register the websocket blueprint and this process's timeline hub."""
    app.extensions["timeline_hub"] = TimelineHub(app, runtime)
    sock.init_app(app)
    app.register_blueprint(bp)
