"""Live streams of a project over SSE: the JSON API's task projections, and the project page's
HTML fragments for the dock and canvas. Both are adapters over engine/readside/follow.py (which
subscribes first, then reads, re-reads after a reconnect or a failed read, and times keepalives).

(The task timeline's websocket is blueprints/streams/timeline_websocket.py; a task's gateway
turns are blueprints/streams/gateway_stream.py.)
"""

from flask import Blueprint
from marshmallow import ValidationError

from blueprints.auth.gate import current_identity
from blueprints.pages.fragments import store_fragments
from blueprints.pages.task_views import dismissed_ids, now, valid_project
from blueprints.request_helpers import runtime
from blueprints.schemas import PROJECT_ID
from blueprints.streams.sse import KEEPALIVE, sse, sse_response
from engine.errors import InvalidRequest
from engine.readside import dto
from engine.readside.follow import Change, Follow, Idle, Removed, Snapshot
from engine.readside.store import TaskStore, read_board, read_task

bp = Blueprint("streams", __name__)


def follow_project(project_id: str, **options) -> Follow:
    """Follow the requester's tasks in a project: its board, then each notified task's row."""
    engine = runtime()
    workspace = current_identity().workspace
    return Follow(
        engine,
        workspace=workspace,
        project=project_id,
        snapshot=lambda: read_board(engine.db, workspace, project_id),
        change=lambda payload: read_task(engine.db, workspace, payload["task"]),
        **options,
    )


@bp.get("/api/v1/projects/<project_id>/tasks/stream")
def project_tasks_stream(project_id):
    """SSE: `snapshot` (all projections), then `upsert` / `remove` per change."""
    try:
        PROJECT_ID(project_id)
    except ValidationError:
        raise InvalidRequest("not a valid project id")
    follow = follow_project(project_id)

    def frames():
        for update in follow:
            if isinstance(update, Snapshot):
                yield sse("snapshot", {"items": update.value})
            elif isinstance(update, Change):
                yield sse("upsert", dto.projection(update.value))
            elif isinstance(update, Removed):
                yield sse("remove", {"id": update.task})
            elif isinstance(update, Idle):
                yield KEEPALIVE

    return sse_response(frames(), follow)


@bp.get("/projects/<project_id>/stream")
def project_page_stream(project_id):
    """SSE of fragments for the dock and canvas: subscribe, bootstrap the store, then one frame
    per change; expiry of finished tasks is timed by the store."""
    valid_project(project_id)
    store = TaskStore(project_id, dismissed=dismissed_ids())

    def until_expiry() -> float:
        deadline = store.next_expiry()
        return float("inf") if deadline is None else max(0.05, (deadline - now()).total_seconds())

    follow = follow_project(project_id, idle=lambda: store.expire(now()), wait_s=until_expiry)

    def frames():
        yield "retry: 2000\n\n"
        for update in follow:
            if isinstance(update, Snapshot):
                changes = store.bootstrap(update.value, now())
            elif isinstance(update, Change):
                item = dto.projection(update.value)
                changes = store.apply({"type": "upsert", "item": item}, now())
            elif isinstance(update, Removed):
                changes = store.apply({"type": "remove", "id": update.task}, now())
            else:
                changes = update.value
            parts = store_fragments(store, changes) if changes else []
            if parts:
                # One message for the whole change: the page applies a bootstrap's reset and
                # the chips it re-inserts in one batch, so the dock never shows empty and the
                # keyboard focus is handed from a replaced chip to its copy at once.
                yield sse_html("".join(parts))
            elif isinstance(update, Idle):
                yield KEEPALIVE

    return sse_response(frames(), follow)


def sse_html(html: str) -> str:
    return "".join(f"data: {line}\n" for line in html.splitlines() or [""]) + "\n"
