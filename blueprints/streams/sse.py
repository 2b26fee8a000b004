"""Server-sent events: the frame format and the streamed response every SSE route sends."""

import json

from flask import Response, stream_with_context

from blueprints.auth.gate import watch_session
from engine.readside.follow import Follow

#: The SSE comment a stream sends on every `Idle` (proxies keep the stream open).
KEEPALIVE = ": keepalive\n\n"


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def sse_response(frames, follow: Follow) -> Response:
    """A streamed SSE response of `frames` (strings), in the request's context, kept out of
    caches and proxy buffers so each frame reaches the viewer at once; `follow` is closed with
    it (even when the viewer left before the first frame), and ended when the viewer's browser
    session ends (signed out, expired: blueprints/auth/gate.py `watch_session`)."""
    stop_watching = watch_session(follow.end)
    response = Response(
        stream_with_context(frames),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )
    response.call_on_close(follow.close)
    response.call_on_close(stop_watching)
    return response
