"""SSE of a task's gateway turns for viewers: `GET /api/v1/tasks/<id>/gateway/stream`.

Subscribe first (NOTIFY for persisted batches, the live feed for this process's pieces), then
bootstrap from the persisted, scrubbed `gateway` events. The two sources overlap; text is
deduplicated by (turn, offset), so a viewer sees each character once and in order. Viewers on
another process than the runner's see the persisted batches only (every BATCH_INTERVAL_S).

Frames: `status` {status, phase}; `turn_started` {turn, sessionId}; `delta` {turn, offset, text};
`turn_done` {turn, chars}; `end` {status} once the task has finished (then the stream closes).
"""

from flask import Blueprint, current_app

from blueprints.auth import current_identity
from blueprints.streams import KEEPALIVE_S, end_with_session, sse, sse_response
from engine.core.status import TERMINAL, Status
from engine.lifecycle import actions
from engine.readside.listener import CLOSED, REBOOTSTRAP
from engine.readside.store import read_task
from engine.readside.timeline import read_events

bp = Blueprint("gateway_stream", __name__)

EVENT_PAGE = 500


class GatewayView:
    """What one viewer has been shown, so overlapping sources show each piece once."""

    def __init__(self):
        self.after_seq = 0
        self.delivered: dict[int, int] = {}  # turn -> characters shown
        self.started: set[int] = set()
        self.done: set[int] = set()
        self.status: tuple | None = None

    def frame(self, payload: dict) -> str | None:
        """The SSE frame for one gateway payload, or None when the viewer already has it."""
        kind, turn = payload.get("type"), payload.get("turn")
        if not isinstance(turn, int):
            return None
        if kind == "turn_started" and turn not in self.started:
            self.started.add(turn)
            return sse("turn_started", {"turn": turn, "sessionId": payload.get("sessionId")})
        if kind == "turn_done" and turn not in self.done:
            self.done.add(turn)
            return sse("turn_done", {"turn": turn, "chars": payload.get("chars")})
        if kind == "delta":
            offset, text = payload.get("offset"), payload.get("text")
            if not isinstance(offset, int) or not isinstance(text, str):
                return None
            have = self.delivered.get(turn, 0)
            # Only contiguous text: a gap (live pieces from before we subscribed) is filled by
            # the persisted batch that covers it.
            if offset > have or offset + len(text) <= have:
                return None
            fresh = text[have - offset :]
            self.delivered[turn] = have + len(fresh)
            return sse("delta", {"turn": turn, "offset": have, "text": fresh})
        return None

    def catch_up(self, runtime, namespace: str, task_id) -> list[str]:
        """Frames for the persisted gateway events this viewer has not seen."""
        frames = []
        while True:
            rows = read_events(
                runtime.db, namespace, task_id, after_seq=self.after_seq, limit=EVENT_PAGE
            )
            for row in rows:
                self.after_seq = row["seq"]
                if row["kind"] == "gateway":
                    frame = self.frame(row["payload"])
                    if frame:
                        frames.append(frame)
            if len(rows) < EVENT_PAGE:
                return frames

    def status_frame(self, row: dict) -> str | None:
        current = (row["status"], row["phase"])
        if current == self.status:
            return None
        self.status = current
        return sse("status", {"status": row["status"], "phase": row["phase"]})


@bp.get("/api/v1/tasks/<uuid:task_id>/gateway/stream")
def gateway_stream(task_id):
    """SSE of a task's gateway turns: persisted (scrubbed) text, then live pieces (404: none)."""
    runtime = current_app.extensions["engine"]
    identity = current_identity()
    namespace = identity.namespace
    subscription = runtime.fanout.subscribe(namespace=namespace, task=str(task_id))
    runtime.live.watch(task_id, subscription)

    def close() -> None:
        runtime.live.unwatch(task_id, subscription)
        subscription.close()

    try:
        row = actions.get_task(runtime, identity, task_id)
    except Exception:
        close()
        raise

    def frames():
        view = GatewayView()
        current = row
        stop_watching = end_with_session(subscription)
        try:
            while True:
                for frame in view.catch_up(runtime, namespace, task_id):
                    yield frame
                frame = view.status_frame(current)
                if frame:
                    yield frame
                if Status(current["status"]) in TERMINAL:
                    yield sse("end", {"status": current["status"]})
                    return
                # Wait for something new: live pieces are shown at once; anything else (a
                # NOTIFY, a re-bootstrap) sends us back to re-read events and status.
                while True:
                    payload = subscription.get(timeout=KEEPALIVE_S)
                    if payload is None:
                        yield ": keepalive\n\n"
                    elif payload is CLOSED:
                        return
                    elif payload is not REBOOTSTRAP and "live" in payload:
                        frame = view.frame(payload["payload"])
                        if frame:
                            yield frame
                    else:
                        break
                current = read_task(runtime.db, namespace, task_id)
                if current is None:  # purged
                    yield sse("end", {"status": None})
                    return
        finally:
            stop_watching()
            close()

    return sse_response(frames())
