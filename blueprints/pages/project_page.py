"""The server-rendered pages: landing, project page (canvas, dock, timeline pane, deploy panes).

Hypermedia routes, kept apart from the JSON API (contact-app style). Reads go through the task
store and read functions of engine/readside; writes only through engine/actions. Every write
answers with fragments (blueprints/pages/fragments.py); views of a task are in
blueprints/pages/task_views.py, the deploy panes and input forms in blueprints/pages/forms.py, and
the project page's live stream beside the other streams in blueprints/streams/project_stream.py.
"""

from uuid import UUID

from flask import Blueprint, Response, abort, redirect, render_template, request, url_for
from marshmallow import ValidationError

from blueprints import schemas
from blueprints.auth import csrf
from blueprints.auth.gate import current_identity
from blueprints.pages import presentation
from blueprints.pages.forms import (
    flatten_errors,
    input_fields,
    pane_context,
    source_from_form,
)
from blueprints.pages.fragments import (
    fragments_response,
    removal,
    render_chip,
    task_fragments,
    timeline_context,
)
from blueprints.pages.task_views import (
    dismissed_ids,
    editable,
    now,
    page_error,
    valid_project,
    view_from_store,
)
from blueprints.request_helpers import kubeconfig_from_header, runtime
from engine.errors import DomainError, InvalidRequest, RedeployAlreadyActive, TaskConflict
from engine.lifecycle import actions, dismissals, kubeconfigs
from engine.readside import dto
from engine.readside.apps import read_apps
from engine.readside.store import BOARD_LIMIT, TaskStore, read_board, read_projects, read_task
from engine.runners.kinds import KINDS

bp = Blueprint("pages", __name__)
csrf.protect(bp)


@bp.record_once
def _template_setup(state) -> None:
    # Every template (fragments rendered by the websocket hub too) reads statuses from one
    # module; block tags leave no blank lines behind (fragments travel to every viewer).
    env = state.app.jinja_env
    env.globals.update(presentation=presentation)
    env.trim_blocks = env.lstrip_blocks = True


# -- routes: pages -----------------------------------------------------------------------------
@bp.get("/")
def index():
    """The landing page: the workspace's projects."""
    projects = read_projects(runtime().db, current_identity().workspace)
    return render_template("index.html", projects=projects)


@bp.post("/projects")
def start_project():
    """The landing page's new-project form: record the project in the workspace, then open it.
    The id is checked by the API's rule; a bad one re-renders the landing page with a message."""
    project_id = request.form.get("id", "")
    try:
        schemas.PROJECT_ID(project_id)
    except ValidationError:
        projects = read_projects(runtime().db, current_identity().workspace)
        return render_template("index.html", projects=projects, invalid=project_id[:63]), 400
    actions.start_project(runtime(), current_identity(), project_id)
    return redirect(url_for(".project", project_id=project_id), code=303)


@bp.get("/projects/<project_id>")
def project(project_id):
    """The project page: canvas, dock, timeline pane (?task=), deploy pane (?deploy=)."""
    valid_project(project_id)
    store, older = _board_page(project_id)
    chips = [view_from_store(store, i["id"]) for i in store.chips()]
    placeholders = [view_from_store(store, i["id"]) for i in store.placeholders()]
    timeline_ctx = None
    if request.args.get("task"):
        row = _row_or_none(request.args["task"])
        if row is not None and row["project_id"] == project_id:
            timeline_ctx = timeline_context(row)
    pane = None
    if request.args.get("deploy") in KINDS:
        pane = pane_context(project_id, request.args["deploy"])
    return render_template(
        "project.html",
        project_id=project_id,
        chips=chips,
        placeholders=placeholders,
        cards=store.resource_cards(),
        timeline_ctx=timeline_ctx,
        pane=pane,
        kinds=KINDS,
        older=older,
        cluster_label=runtime().integrations.cluster_label,
        kubeconfig_required=kubeconfigs.required(runtime()),
        apps=read_apps(runtime().db, current_identity().workspace, project_id),
    )


def _board_page(project_id: str, before: dict | None = None) -> tuple[TaskStore, str | None]:
    """A page of the project's board in a store, and the cursor of the next (older) page, or None
    when this page is the last."""
    page = read_board(runtime().db, current_identity().workspace, project_id, before=before)
    store = TaskStore(project_id, dismissed=dismissed_ids(project_id))
    store.bootstrap(page, now())
    return store, dto.projection_cursor(page[-1]) if len(page) == BOARD_LIMIT else None


# -- routes: partials ----------------------------------------------------------------------------
def _row_or_none(task_id) -> dict | None:
    try:
        return read_task(runtime().db, current_identity().workspace, UUID(str(task_id)))
    except ValueError:
        return None


def _row(task_id: UUID) -> dict:
    return actions.get_task(runtime(), current_identity(), task_id)


@bp.get("/tasks/<uuid:task_id>/timeline")
def timeline(task_id):
    """The timeline pane of one task (htmx); a plain visit lands on its project page."""
    row = _row(task_id)
    if not request.headers.get("HX-Request"):
        return redirect(url_for(".project", project_id=row["project_id"], task=str(task_id)))
    return render_template("partials/timeline.html", **timeline_context(row))


@bp.get("/projects/<project_id>/dock/older")
def older_chips(project_id):
    """The dock's next page (the "Show older" control, htmx): the chips older than ?before=, and
    the control again for the page after, or the note that there is none."""
    valid_project(project_id)
    if not request.headers.get("HX-Request"):
        return redirect(url_for(".project", project_id=project_id))
    created_at, task_id = dto.decode_cursor(request.args.get("before", ""))
    store, older = _board_page(project_id, before={"createdAt": created_at, "id": task_id})
    chips = [render_chip(view_from_store(store, i["id"])) for i in store.chips()]
    return fragments_response(
        *chips,
        render_template("partials/dock_older.html", project_id=project_id, older=older, paged=True),
    )


@bp.get("/projects/<project_id>/deploy/<kind>")
def deploy_pane(project_id, kind):
    """A deploy pane (?template= picks a catalog template)."""
    valid_project(project_id)
    ctx = pane_context(project_id, kind, chosen_template=request.args.get("template"))
    return render_template("partials/pane.html", **ctx)


@bp.get("/tasks/<uuid:task_id>/edit")
def edit_pane(task_id):
    """Edit & redeploy: the kind-matched pane prefilled from the predecessor, target locked."""
    row = _row(task_id)
    if not editable(row["source_kind"]):
        abort(404)
    ctx = pane_context(
        row["project_id"],
        row["source_kind"],
        predecessor=row,
        chosen_template=request.args.get("template"),
    )
    return render_template("partials/pane.html", **ctx)


@bp.get("/panes/close")
def close_pane():
    """An empty pane slot (closing a pane is a swap, not a state change)."""
    return render_template("partials/pane_empty.html")


# -- routes: actions (POST, CSRF-checked, answered with fragments) ------------------------------
@bp.post("/projects/<project_id>/tasks")
def create(project_id):
    """Submit a deploy pane: create (or, with predecessorTaskId, redeploy edited) a task."""
    valid_project(project_id)
    identity = current_identity()
    predecessor_id = request.form.get("predecessorTaskId") or None
    try:
        predecessor = _row(UUID(predecessor_id)) if predecessor_id else None
    except ValueError:
        abort(400)
    kind = request.form.get("kind", "")
    ctx = pane_context(
        predecessor["project_id"] if predecessor else project_id,
        kind,
        predecessor=predecessor,
        chosen_template=request.form.get("template"),
    )
    source, sensitive, field_errors = source_from_form(kind, request.form, ctx)
    body = {"source": source, "sensitiveKeys": sensitive}
    if predecessor:
        body["predecessorTaskId"] = predecessor_id  # the target stays the predecessor's project
    else:
        body["projectId"] = project_id
    if not field_errors:
        try:
            schemas.CreateTask.shared().load(body)
        except ValidationError as exc:
            field_errors = flatten_errors(exc.messages)
    if field_errors:
        return _pane_with_errors(ctx, field_errors)
    try:
        row = actions.create_task(
            runtime(),
            identity,
            project_id=None if predecessor else project_id,
            source=source,
            sensitive_keys=sensitive,
            kubeconfig=kubeconfig_from_header(),
            predecessor_task_id=UUID(predecessor_id) if predecessor_id else None,
        )
    except RedeployAlreadyActive as exc:
        return _open_winner(exc, predecessor_id)
    except DomainError as exc:
        return _pane_with_errors(ctx, {"_form": exc.message})
    return _opened(row, predecessor_id)


def _pane_with_errors(ctx: dict, field_errors: dict) -> Response:
    form_values = {s.name: request.form.get(f"f:{s.name}", "") for s in ctx["specs"]}
    for spec in ctx["specs"]:
        spec.error = field_errors.get(spec.name)
        if spec.widget != "password" and spec.name in form_values:
            spec.value = form_values[spec.name]
    known = {s.name for s in ctx["specs"]}
    ctx["errors"] = [
        f"{k}: {v}" if k != "_form" else v for k, v in field_errors.items() if k not in known
    ]
    return fragments_response(render_template("partials/pane.html", **ctx))


def _opened(row: dict, predecessor_id: str | None) -> Response:
    """After a create or redeploy: close the pane, open the new task's timeline, show its chip
    (and its predecessor's, now superseded)."""
    fresh = read_task(runtime().db, row["workspace"], row["id"]) or row
    parts = [
        render_template("partials/pane_empty.html"),
        render_template("partials/timeline.html", **timeline_context(fresh)),
        task_fragments(fresh),
    ]
    if predecessor_id:
        before = read_task(runtime().db, row["workspace"], UUID(predecessor_id))
        if before is not None:
            parts.append(task_fragments(before))
    return fragments_response(*parts)


def _open_winner(exc: RedeployAlreadyActive, predecessor_id: str) -> Response:
    """A concurrent redeploy won (or a double click): show the winner, silently."""
    winner = (exc.snapshot or {}).get("id")
    row = _row_or_none(winner) if winner else None
    if row is None:
        row = _row(UUID(predecessor_id))
        return fragments_response(task_fragments(row))
    return _opened(row, predecessor_id)


@bp.post("/tasks/<uuid:task_id>/cancel")
def cancel(task_id):
    """Cancel; a repeat or a finished task is not an error here: the surfaces reconcile from the
    current state (no toasts)."""
    try:
        actions.cancel_task(runtime(), current_identity(), task_id)
    except TaskConflict:
        pass  # a finished task: the fragments show it as it is
    return fragments_response(task_fragments(_row(task_id)))


@bp.post("/tasks/<uuid:task_id>/dismiss")
def dismiss(task_id):
    """Dismiss a finished task from this user's dock, for good and on every browser; a task
    still active is not dismissed and comes back as it is now."""
    row = dismissals.dismiss_task(runtime(), current_identity(), task_id)
    if row is not None:
        return fragments_response(task_fragments(row))
    # No version: no later frame of this page brings the chip back (a stream's bootstrap, which
    # resets the dock, reads the dismissals afresh).
    return fragments_response(removal(f"chip-{task_id}"))


@bp.post("/tasks/<uuid:task_id>/redeploy")
def redeploy(task_id):
    """One-click redeploy: a clone of the predecessor's source and target."""
    try:
        row = actions.create_task(
            runtime(),
            current_identity(),
            project_id=None,
            source=None,
            kubeconfig=kubeconfig_from_header(),
            predecessor_task_id=task_id,
        )
    except RedeployAlreadyActive as exc:
        return _open_winner(exc, str(task_id))
    except TaskConflict:  # not redeployable (any more): show the predecessor as it is
        return fragments_response(task_fragments(_row(task_id)))
    return _opened(row, str(task_id))


@bp.post("/tasks/<uuid:task_id>/input")
def submit_input(task_id):
    """Answer a blocked task's form; it resumes at once. Sensitivity comes from the declarations."""
    row = _row(task_id)
    declared = input_fields(dto.snapshot(row))
    values = {spec.name: request.form.get(f"f:{spec.name}", "") for spec in declared}
    for spec in declared:
        if spec.widget == "checkbox":
            values[spec.name] = "true" if values[spec.name] else "false"
        if spec.kept and values[spec.name] == _shown(spec.value):
            del values[spec.name]  # untouched: the task keeps the value it was given
    missing = [s.name for s in declared if s.required and not s.kept and not values.get(s.name)]
    if missing:
        return _input_form_with_errors(row, values, {name: "required" for name in missing})
    try:
        actions.submit_inputs(
            runtime(),
            current_identity(),
            task_id,
            kubeconfig=kubeconfig_from_header(),
            inputs={k: v for k, v in values.items() if v != ""},
            sensitive_keys=[s.name for s in declared if s.widget == "password"],
        )
    except InvalidRequest as exc:
        errors = {
            name: "; ".join(reasons)
            for name, reasons in ((exc.fields or {}).get("inputs") or {}).items()
        }
        return _input_form_with_errors(row, values, errors or {"_form": exc.message})
    except TaskConflict:
        pass  # no longer blocked (answered elsewhere, cancelled): the fragments show it
    return fragments_response(task_fragments(_row(task_id)))


def _input_form_with_errors(row: dict, values: dict, errors: dict) -> Response:
    """The blocking-input form again, each field's error beside it (a secret is never refilled)."""
    ctx = timeline_context(row, events=[])
    for spec in ctx["inputs"]:
        spec.error = errors.get(spec.name)
        if spec.widget != "password":
            spec.value = values.get(spec.name)
    return fragments_response(render_template("partials/timeline_input.html", **ctx))


def _shown(value) -> str:
    """A prefilled value as the browser submits it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


bp.register_error_handler(DomainError, page_error)
