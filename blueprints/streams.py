"""Live streams of a project over SSE, each subscribing first, then bootstrapping: the JSON API's
task projections, and the project page's HTML fragments for the dock and canvas.

(The task timeline's websocket is blueprints/ws.py; a task's gateway turns are
blueprints/gateway_stream.py.)
"""

import json
import logging

import psycopg
from flask import Blueprint, Response, stream_with_context
from marshmallow import ValidationError

from blueprints.auth import current_identity, watch_session
from blueprints.fragments import store_fragments
from blueprints.request_helpers import runtime
from blueprints.schemas import PROJECT_ID
from blueprints.views import dismissed_ids, now, valid_project
from engine.core.errors import InvalidRequest
from engine.readside import dto
from engine.readside.listener import CLOSED, REBOOTSTRAP
from engine.readside.store import TaskStore, read_board, read_task_row

bp = Blueprint("streams", __name__)
log = logging.getLogger(__name__)

#: A stream comment this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
#: After a failed re-read, how soon the JSON board stream tries again (a whole snapshot).
RETRY_S = 1.0


def sse(event: str, data: dict) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


def sse_response(frames) -> Response:
    """A streamed SSE response of `frames` (strings), in the request's context, kept out of
    caches and proxy buffers so each frame reaches the viewer at once."""
    return Response(
        stream_with_context(frames),
        mimetype="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@bp.get("/api/v1/projects/<project_id>/tasks/stream")
def project_tasks_stream(project_id):
    """SSE: `snapshot` (all projections), then `upsert` / `remove` per change."""
    try:
        PROJECT_ID(project_id)
    except ValidationError:
        raise InvalidRequest("not a valid project id")
    engine = runtime()
    namespace = current_identity().namespace
    subscription = engine.fanout.subscribe(namespace=namespace, project=project_id)

    def snapshot() -> str:
        return sse("snapshot", {"items": read_board(engine.db, namespace, project_id)})

    def change(payload: dict) -> str:
        # A retention purge's notification is itself the removal event.
        row = (
            None if payload.get("removed") else read_task_row(engine.db, namespace, payload["task"])
        )
        if row is None:
            return sse("remove", {"id": payload["task"]})
        return sse("upsert", dto.projection(row))

    def frames():
        stop_watching = end_with_session(subscription)
        try:
            yield snapshot()
            # A re-read failed (the database unreachable): the viewer has missed a change, so the
            # stream re-reads everything, every RETRY_S, until it can.
            missed = False
            while True:
                payload = subscription.get(timeout=RETRY_S if missed else KEEPALIVE_S)
                if payload is CLOSED:
                    return
                try:
                    if missed or payload is REBOOTSTRAP:
                        frame = snapshot()
                    elif payload is None:
                        frame = ": keepalive\n\n"
                    else:
                        frame = change(payload)
                except psycopg.OperationalError as exc:  # PoolTimeout is one too
                    log.warning("board stream of %s: re-read failed (%s)", project_id, exc)
                    missed = True
                    yield ": keepalive\n\n"
                    continue
                missed = False
                yield frame
        finally:
            stop_watching()
            subscription.close()

    return sse_response(frames())


@bp.get("/projects/<project_id>/stream")
def project_page_stream(project_id):
    """SSE of fragments for the dock and canvas: subscribe, bootstrap the store, then one frame
    per change; expiry of finished tasks is timed by the store."""
    valid_project(project_id)
    engine = runtime()
    namespace = current_identity().namespace
    store = TaskStore(project_id, dismissed=dismissed_ids())
    subscription = engine.fanout.subscribe(namespace=namespace, project=project_id)

    def bootstrap():
        changes = store.bootstrap(read_board(engine.db, namespace, project_id), now())
        return store_fragments(store, changes)

    def frames():
        stop_watching = end_with_session(subscription)
        try:
            yield "retry: 2000\n\n"
            for part in bootstrap():
                yield sse_html(part)
            while True:
                timeout = KEEPALIVE_S
                deadline = store.next_expiry()
                if deadline is not None:
                    timeout = min(timeout, max(0.05, (deadline - now()).total_seconds()))
                payload = subscription.get(timeout=timeout)
                if payload is CLOSED:
                    return
                if payload is None:
                    changes = store.expire(now())
                    parts = store_fragments(store, changes) if changes else []
                    if not parts:
                        yield ": keepalive\n\n"
                elif payload is REBOOTSTRAP:
                    parts = bootstrap()
                else:
                    parts = apply_notification(engine, store, namespace, payload)
                for part in parts:
                    yield sse_html(part)
        finally:
            stop_watching()
            subscription.close()

    return sse_response(frames())


def apply_notification(engine, store: TaskStore, namespace: str, payload: dict) -> list[str]:
    """Re-read the notified task (ids only travel) and apply it to the store as upsert/remove."""
    task_id = payload.get("task")
    if not task_id:
        return []
    # A retention purge's notification is itself the removal event: nothing left to read.
    row = None if payload.get("removed") else read_task_row(engine.db, namespace, task_id)
    event = (
        {"type": "remove", "id": task_id}
        if row is None
        else {"type": "upsert", "item": dto.projection(row)}
    )
    changes = store.apply(event, now())
    return store_fragments(store, changes) if changes else []


def end_with_session(subscription):
    """Close this stream when its browser session ends (signed out, expired): blueprints/auth.py
    `watch_session`. The stop function it returns goes in the stream's `finally`."""
    return watch_session(lambda: subscription.queue.put(CLOSED))


def sse_html(html: str) -> str:
    return "".join(f"data: {line}\n" for line in html.splitlines() or [""]) + "\n"
