"""Live streams: project task projections over SSE (subscribe first, then bootstrap)."""
import json

from flask import Blueprint, Response, current_app, stream_with_context
from marshmallow import ValidationError

from blueprints.auth import current_identity
from blueprints.schemas import PROJECT_ID
from engine.errors import InvalidRequest
from engine.readside import dto
from engine.readside.fanout import CLOSED, REBOOTSTRAP
from engine.readside.store import read_board, read_task_row

bp = Blueprint("streams", __name__)

KEEPALIVE_S = 15.0


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


@bp.get("/api/v1/projects/<project_id>/tasks/stream")
def project_tasks_stream(project_id):
    """SSE: `snapshot` (all projections), then `upsert` / `remove` per change."""
    try:
        PROJECT_ID(project_id)
    except ValidationError:
        raise InvalidRequest("not a valid project id")
    runtime = current_app.extensions["engine"]
    namespace = current_identity().namespace
    subscription = runtime.fanout.subscribe(namespace=namespace, project=project_id)

    def frames():
        try:
            yield sse("snapshot", {"items": read_board(runtime.db, namespace, project_id)})
            while True:
                payload = subscription.get(timeout=KEEPALIVE_S)
                if payload is None:
                    yield ": keepalive\n\n"
                elif payload is CLOSED:
                    return
                elif payload is REBOOTSTRAP:
                    yield sse("snapshot", {"items": read_board(runtime.db, namespace, project_id)})
                else:
                    # A retention purge's notification is itself the removal event.
                    row = None if payload.get("removed") else read_task_row(
                        runtime.db, namespace, payload["task"])
                    if row is None:
                        yield sse("remove", {"id": payload["task"]})
                    else:
                        yield sse("upsert", dto.projection(row))
        finally:
            subscription.close()

    return Response(stream_with_context(frames()), mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
