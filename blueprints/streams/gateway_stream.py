"""SSE of a task's gateway turns for viewers: `GET /api/v1/tasks/<id>/gateway/stream`.

An adapter over engine/readside/follow.py: subscribed first (NOTIFY for persisted batches, the
live feed for this process's pieces), then bootstrapped from the persisted, scrubbed `gateway`
events, read again after a listener reconnect or a failed read. The two sources overlap; text is
deduplicated by (turn, offset), so a viewer sees each character once and in order. Viewers on
another process than the runner's see the persisted batches only (every BATCH_INTERVAL_S).

Frames: `status` {status, phase}; `turn_started` {turn, sessionId}; `delta` {turn, offset, text};
`turn_done` {turn, chars}; `end` {status} once the task has finished (then the stream closes).
"""

from flask import Blueprint

from blueprints.auth.gate import current_identity
from blueprints.request_helpers import runtime
from blueprints.streams.sse import KEEPALIVE, sse, sse_response
from engine.core.status import TERMINAL, Status
from engine.lifecycle import actions
from engine.readside.follow import Follow, Idle, Live, Removed
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

    def unseen_events(self, db, workspace: str, task_id) -> list[dict]:
        """The task's persisted events after the last one shown (a read: nothing is marked)."""
        events, after = [], self.after_seq
        while True:
            rows = read_events(db, workspace, task_id, after_seq=after, limit=EVENT_PAGE)
            events += rows
            if len(rows) < EVENT_PAGE:
                return events
            after = rows[-1]["seq"]

    def catch_up(self, events: list[dict]) -> list[str]:
        """Frames for the gateway events among `events` this viewer has not seen."""
        frames = []
        for row in events:
            if row["seq"] <= self.after_seq:
                continue
            self.after_seq = row["seq"]
            if row["kind"] == "gateway":
                frame = self.frame(row["payload"])
                if frame:
                    frames.append(frame)
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
    engine = runtime()
    identity = current_identity()
    workspace = identity.workspace
    view = GatewayView()

    def read() -> tuple[dict, list[dict]] | None:
        row = read_task(engine.db, workspace, task_id)
        if row is None:
            return None
        return row, view.unseen_events(engine.db, workspace, task_id)

    # Any notification (a persisted batch, a status move) means: read events and status again.
    follow = Follow(
        engine, workspace=workspace, task=task_id, snapshot=read, change=lambda _: read(), live=True
    )
    try:
        actions.get_task(engine, identity, task_id)  # subscribed: now a 404 may still be sent
    except Exception:
        follow.close()
        raise

    def frames():
        for update in follow:
            if isinstance(update, Live):
                frame = view.frame(update.payload)
                if frame:
                    yield frame
            elif isinstance(update, Idle):
                yield KEEPALIVE
            elif isinstance(update, Removed):  # purged
                yield sse("end", {"status": None})
                return
            else:
                row, events = update.value
                yield from view.catch_up(events)
                frame = view.status_frame(row)
                if frame:
                    yield frame
                if Status(row["status"]) in TERMINAL:
                    yield sse("end", {"status": row["status"]})
                    return

    return sse_response(frames(), follow)
