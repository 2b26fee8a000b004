"""The JSON API under /api/v1. Errors are {"code", "message"} with the right 4xx
(blueprints/errors.py)."""

from flask import Blueprint, Response, jsonify, request, url_for
from marshmallow import ValidationError

from blueprints import schemas
from blueprints.api.calls import answer_once, create_from, json_answer, rollback_from
from blueprints.auth.gate import current_identity
from blueprints.request_helpers import (
    json_body,
    kubeconfig_from_header,
    load,
    requested_app_page,
    runtime,
)
from engine.errors import InvalidRequest
from engine.lifecycle import actions
from engine.readside import apps, dto
from engine.readside.store import read_task_page
from engine.readside.timeline import read_events
from engine.trust.untrusted import load_json

bp = Blueprint("api", __name__, url_prefix="/api/v1")


def idempotent(call) -> Response:
    """Answer `call` ((body, status)) honouring an Idempotency-Key header (calls.py); a 201
    (a new task: a create, a redeploy, a rollback) names the task's URL in Location."""
    body, status, replayed = answer_once(
        request.headers.get("Idempotency-Key"), request.method, request.path, _body_or_none, call
    )
    response = json_answer(body, status, replayed)
    if status == 201:
        response.headers["Location"] = url_for("api.get_task", task_id=body["id"])
    return response


def _body_or_none():
    """The JSON body for a request's fingerprint, by the depth-limited loader; None when it is
    not JSON (the call itself then answers why)."""
    try:
        return load_json(request.get_data(cache=True))
    except ValueError:
        return None


@bp.post("/tasks")
def create_task():
    """Create a task (or a redeploy clone) and claim it inline; 201 with the stored snapshot and
    its URL in Location."""
    return idempotent(_create_task)


def _create_task():
    body = load(schemas.CreateTask, json_body())
    return create_from(body, predecessor_task_id=body.get("predecessorTaskId"))


@bp.get("/tasks")
def list_tasks():
    """A page of tasks, newest first; filters projectId and status (repeatable)."""
    args = load(
        schemas.ListTasks,
        {
            **{k: v for k, v in request.args.items() if k != "status"},
            **({"status": request.args.getlist("status")} if "status" in request.args else {}),
        },
    )
    rows, next_cursor = read_task_page(
        runtime().db,
        current_identity().workspace,
        project_id=args.get("projectId"),
        statuses=args.get("status"),
        cursor=dto.decode_cursor(args["cursor"]) if "cursor" in args else None,
        limit=args["limit"],
    )
    return jsonify({"items": [dto.snapshot(r) for r in rows], "nextCursor": next_cursor})


@bp.get("/tasks/<uuid:task_id>")
def get_task(task_id):
    """One task's snapshot. Reads never write status.

    With waitFor=terminal, a long-poll: answers once the task is terminal or blocked, or after
    `timeout` seconds, with `waitOutcome` saying which.
    """
    args = load(schemas.WaitForTask, request.args.to_dict())
    identity = current_identity()
    if "waitFor" not in args:
        return jsonify(dto.snapshot(actions.get_task(runtime(), identity, task_id)))
    row, outcome = actions.wait_for_task(runtime(), identity, task_id, args["timeout"])
    return jsonify({**dto.snapshot(row), "waitOutcome": outcome})


@bp.get("/tasks/<uuid:task_id>/events")
def list_events(task_id):
    """A task's events after `after` (a seq), oldest first."""
    args = load(schemas.ListEvents, request.args.to_dict())
    identity = current_identity()
    actions.get_task(runtime(), identity, task_id)
    events = read_events(
        runtime().db, identity.workspace, task_id, after_seq=args["after"], limit=args["limit"]
    )
    return jsonify(
        {
            "items": events,
            "nextCursor": str(events[-1]["seq"]) if len(events) == args["limit"] else None,
        }
    )


@bp.post("/tasks/<uuid:task_id>/input")
def submit_inputs(task_id):
    """Answer a blocked task's inputs; it is claimed and resumes at once."""

    def submit():
        body = load(schemas.SubmitInputs, json_body())
        row = actions.submit_inputs(
            runtime(),
            current_identity(),
            task_id,
            inputs=body["inputs"],
            sensitive_keys=body.get("sensitiveKeys"),
            kubeconfig=kubeconfig_from_header(),
        )
        return dto.snapshot(row), 200

    return idempotent(submit)


@bp.post("/tasks/<uuid:task_id>/cancel")
def cancel_task(task_id):
    """Cancel; a repeat is 200 with the snapshot, a finished task 409 with it."""
    row = actions.cancel_task(runtime(), current_identity(), task_id)
    return jsonify(dto.snapshot(row))


@bp.get("/templates")
def list_templates():
    """The template catalog: each template with its declared inputs (declarations, never values)."""
    current_identity()
    catalog = runtime().integrations.templates
    return jsonify({"items": [t.summary() for t in catalog.templates()]})


@bp.patch("/tasks/<uuid:task_id>/canvas")
def patch_canvas(task_id):
    """Save the placeholder's canvas placement (never touches status)."""
    body = load(schemas.CanvasPatch, json_body())
    return jsonify(dto.snapshot(actions.set_canvas(runtime(), current_identity(), task_id, body)))


@bp.post("/tasks/<uuid:task_id>/rollback")
def rollback_task(task_id):
    """Roll the task's app back to this completed task's plan: a new task; 201 with it and its
    URL in Location."""
    return idempotent(lambda: rollback_from(task_id))


@bp.get("/projects/<project_id>/apps")
def list_apps(project_id):
    """The project's apps (deployments converging on the same resources), newest first."""
    load_project_id(project_id)
    items = apps.read_apps(runtime().db, current_identity().workspace, project_id)
    return jsonify({"items": items})


@bp.get("/projects/<project_id>/apps/<app_key>")
def get_app(project_id, app_key):
    """One app: its current resources, endpoints and a page of its history, newest first."""
    load_project_id(project_id)
    return jsonify(requested_app_page(current_identity().workspace, project_id, app_key))


def load_project_id(project_id: str) -> None:
    """InvalidRequest unless `project_id` is a project id (the create's rule)."""
    try:
        schemas.PROJECT_ID(project_id)
    except ValidationError:
        raise InvalidRequest(
            "projectId is not valid", fields={"projectId": ["not a project id"]}
        ) from None
