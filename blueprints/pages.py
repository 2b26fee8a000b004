"""The server-rendered pages: landing, project page (canvas, dock, timeline pane, deploy panes).

Hypermedia routes, kept apart from the JSON API (contact-app style). Reads go through the task
store and read functions of engine/readside; writes only through engine/actions. Every write
answers with *fragments*: top-level elements with ids that the page's one fragment applier
(static/app.js) replaces in place, inserts into their `data-slot`, or removes. The project
stream and the timeline websocket send the very same fragments, so a click, a teammate's action
and a reconnect all render through one path.
"""
import logging
from dataclasses import dataclass
from datetime import datetime, timezone
from uuid import UUID

from flask import (Blueprint, Response, abort, current_app, redirect, render_template, request,
                   stream_with_context, url_for)
from marshmallow import ValidationError, fields as mfields, validate as mvalidate

from blueprints import csrf, schemas
from blueprints.auth import current_identity
from engine import actions, secrets
from engine.errors import DomainError, RedeployAlreadyActive, TaskNotFound
from engine.readside import dto, presentation
from engine.readside import timeline as timelines
from engine.readside.fanout import CLOSED, REBOOTSTRAP
from engine.readside.store import TaskStore, read_board, read_projects, read_task_row
from engine.status import ACTIVE, Status

log = logging.getLogger(__name__)

bp = Blueprint("pages", __name__)
csrf.protect(bp)


@bp.record_once
def _template_setup(state) -> None:
    # Every template (fragments rendered by the websocket hub too) reads statuses from one
    # module; block tags leave no blank lines behind (fragments travel to every viewer).
    env = state.app.jinja_env
    env.globals.update(presentation=presentation)
    env.trim_blocks = env.lstrip_blocks = True

#: Client-local dismissals (seed 000: "dismissals stay client-local in v1"): task ids, dot-joined.
DISMISS_COOKIE = "dock_dismissed"
MAX_DISMISSED = 40
#: A project stream comment this often keeps proxies from closing an idle stream.
KEEPALIVE_S = 15.0
#: Source kinds that redeploy in one click only (no pane to edit: seed 000, US10 amendment).
ONE_CLICK_KINDS = {"prompt"}
#: Fields an edit & redeploy never prefills (the GitHub repository is re-picked).
NO_PREFILL = {"github": {"repo", "repository"}}
#: Placeholders without a saved placement are laid out on this grid (canvas pixels).
GRID_X, GRID_Y, GRID_COLUMNS = 210, 120, 4
#: Display order of the deploy panes.
KIND_ORDER = ["template", "image", "database", "github", "prompt"]
KIND_TITLES = {"template": "Template", "image": "Container image", "database": "Database",
               "github": "GitHub repository", "prompt": "Prompt"}
FIELD_HELP = {"image": "e.g. nginx:1.27", "name": "lowercase letters, digits and '-'",
              "env": "KEY=value, one per line", "args": "KEY=value, one per line"}


def runtime():
    return current_app.extensions["engine"]


def now() -> datetime:
    return datetime.now(timezone.utc)


def valid_project(project_id: str) -> str:
    """The project id, or 404 when it cannot be one."""
    try:
        schemas.PROJECT_ID(project_id)
    except ValidationError:
        abort(404)
    return project_id


def dismissed_ids() -> set[str]:
    """Task ids this browser dismissed (from its cookie; only well-formed ids)."""
    found = set()
    for raw in (request.cookies.get(DISMISS_COOKIE) or "").split(".")[:MAX_DISMISSED]:
        try:
            found.add(str(UUID(raw)))
        except ValueError:
            continue
    return found


# -- views of a task (what chips, placeholders and the timeline header show) ---------------------
@dataclass
class TaskView:
    """One task as the surfaces show it; `item` is its projection."""

    item: dict
    superseded_by: str | None = None
    attention: str | None = None
    index: int = 0

    @property
    def id(self) -> str:
        return self.item["id"]

    @property
    def shown(self) -> presentation.Presentation:
        return presentation.of(self.item)

    @property
    def active(self) -> bool:
        return Status(self.item["status"]) in ACTIVE

    @property
    def cancelling(self) -> bool:
        return self.active and bool(self.item.get("cancelRequestedAt"))

    @property
    def can_redeploy(self) -> bool:
        return self.item["status"] in actions.REDEPLOYABLE and not self.superseded_by

    @property
    def can_edit(self) -> bool:
        kind = self.item.get("sourceKind")
        return self.can_redeploy and kind in schemas.SOURCE_SCHEMAS and kind not in ONE_CLICK_KINDS

    @property
    def confirm(self) -> str | None:
        """The one-line overwrite warning before a redeploy over applied resources, or None."""
        applied = self.item.get("appliedResources") or []
        if not applied:
            return None
        names = ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in applied[:3])
        more = f" and {len(applied) - 3} more" if len(applied) > 3 else ""
        return (f"This redeploy applies over {len(applied)} resource(s) the earlier run created "
                f"({names}{more}); manual edits to them will be overwritten.")

    @property
    def position(self) -> tuple[float, float]:
        canvas = self.item.get("canvas") or {}
        if isinstance(canvas.get("x"), (int, float)) and isinstance(canvas.get("y"), (int, float)):
            return canvas["x"], canvas["y"]
        return (16 + (self.index % GRID_COLUMNS) * GRID_X, 16 + (self.index // GRID_COLUMNS) * GRID_Y)

    @property
    def version(self) -> int:
        """The row's updated_at in microseconds: fragments never go back to an older state."""
        stamp = self.item.get("updatedAt") or self.item.get("createdAt")
        return int(datetime.fromisoformat(stamp).timestamp() * 1_000_000) if stamp else 0

    @property
    def sort_key(self) -> str:
        return f"{self.item.get('createdAt') or ''}|{self.id}"


def view_from_store(store: TaskStore, task_id: str) -> TaskView:
    item = store.get(task_id)
    placeholders = store.placeholders()
    index = next((i for i, p in enumerate(placeholders) if p["id"] == task_id), 0)
    return TaskView(item, superseded_by=store.successor_of(task_id),
                    attention=store.attention(task_id), index=index)


def view_from_row(row: dict, dismissed: set[str] = frozenset()) -> TaskView:
    item = dto.projection(row)
    successor = item.get("successorId")
    return TaskView(item, superseded_by=successor, attention=presentation.attention(
        item, superseded=bool(successor), dismissed=item["id"] in dismissed))


# -- rendering fragments ---------------------------------------------------------------------------
def render_chip(view: TaskView) -> str:
    return render_template("partials/chip.html", view=view)


def render_placeholder(view: TaskView) -> str:
    if not view.active:
        return removal(f"ph-{view.id}", version=view.version)
    return render_template("partials/placeholder.html", view=view)


def render_cards(store: TaskStore) -> str:
    return render_template("partials/cards.html", cards=store.resource_cards())


def removal(*element_ids: str, version: int | None = None) -> str:
    """Remove elements; a later insert of one of them at or below `version` (none: any) is stale."""
    stamp = f' data-version="{version}"' if version is not None else ""
    return f'<template data-remove="{" ".join(element_ids)}"{stamp}></template>'


def reset(*container_ids: str) -> str:
    return f'<template data-reset="{" ".join(container_ids)}"></template>'


def store_fragments(store: TaskStore, changes) -> list[str]:
    """The fragments that bring a page from before `changes` to the store's state, one task each."""
    parts = []
    if changes.reset:
        parts.append(reset("dock-chips", "placeholders"))
        upserted = [i["id"] for i in reversed(store.chips())]
    else:
        upserted = [i for i in changes.upserted if i in store]
    for task_id in upserted:
        view = view_from_store(store, task_id)
        parts.append(render_chip(view) + render_placeholder(view))
    for task_id in changes.removed:
        parts.append(removal(f"chip-{task_id}", f"ph-{task_id}"))
    if changes.cards or changes.reset:
        parts.append(render_cards(store))
    return parts


def timeline_context(row: dict, events: list[dict] | None = None) -> dict:
    """What the timeline pane renders for one task row (`task_get_projection` shape)."""
    snapshot = dto.snapshot(row)
    view = view_from_row(row)
    built = timelines.build(events if events is not None else
                            timelines.read_events(runtime().db, row["namespace"], row["id"]))
    return {"view": view, "snap": snapshot, "timeline": built,
            "outcome": timelines.outcome(snapshot), "inputs": input_fields(snapshot)}


def render_timeline_sections(row: dict) -> str:
    """The timeline pane's header, input form and outcome of one task (replaced where shown)."""
    ctx = timeline_context(row, events=[])
    return "".join(render_template(f"partials/{name}.html", **ctx)
                   for name in ("timeline_head", "timeline_input", "timeline_outcome"))


def task_fragments(row: dict) -> str:
    """Everything that shows one task: chip, placeholder, timeline sections."""
    view = view_from_row(row, dismissed_ids())
    return render_chip(view) + render_placeholder(view) + render_timeline_sections(row)


def fragments_response(*parts: str) -> Response:
    return Response("".join(parts), mimetype="text/html")


# -- deploy panes ----------------------------------------------------------------------------
@dataclass
class FieldSpec:
    """One field of a deploy pane form."""

    name: str
    label: str
    widget: str  # text | textarea | number | select | checkbox | pairs | lines | password
    required: bool = False
    choices: list | None = None
    help: str = ""
    value: object = None
    error: str | None = None
    #: pairs: sensitive keys the user must re-enter (edit & redeploy); values never prefilled.
    reenter: tuple = ()
    #: blocking form: an input the task already has; sent only when the user changes it.
    kept: bool = False


def available_kinds() -> list[str]:
    """Source kinds with a schema (a pane appears once its kind exists)."""
    kinds = list(schemas.SOURCE_SCHEMAS)
    return sorted(kinds, key=lambda k: (KIND_ORDER.index(k) if k in KIND_ORDER else 99, k))


def template_catalog() -> list[dict]:
    """The template catalog's summaries (name, title, description, inputs), or [] when the catalog
    is absent or cannot be read: the template pane then degrades to its plain form."""
    catalog = getattr(runtime().integrations, "templates", None)
    if catalog is None:
        return []
    try:
        listed = catalog.templates() if hasattr(catalog, "templates") else catalog.list()
        return [t.summary() if hasattr(t, "summary") else dict(t) for t in listed]
    except Exception:
        log.warning("template catalog unavailable for the deploy pane", exc_info=True)
        return []


def _widget(name: str, field) -> tuple[str, list | None]:
    choices = None
    for validator in getattr(field, "validators", []) or []:
        if isinstance(validator, mvalidate.OneOf):
            choices = list(validator.choices)
    if choices:
        return "select", choices
    if isinstance(field, mfields.Boolean):
        return "checkbox", None
    if isinstance(field, (mfields.Integer, mfields.Float)):
        return "number", None
    if isinstance(field, mfields.Dict):
        return "pairs", None
    if isinstance(field, mfields.List):
        return "lines", None
    if name in ("prompt", "description", "instructions"):
        return "textarea", None
    return "text", None


def schema_fields(kind: str) -> list[FieldSpec]:
    """A pane's fields, read off the kind's request schema (so new kinds get a pane for free)."""
    schema = schemas.SOURCE_SCHEMAS[kind]()
    specs = []
    for name, field in schema.fields.items():
        if name == "kind" or field.dump_only:
            continue
        widget, choices = _widget(name, field)
        specs.append(FieldSpec(name=name, label=name.replace("_", " ").capitalize(), widget=widget,
                               required=field.required, choices=choices,
                               help=FIELD_HELP.get(name, "")))
    return specs


def prefill(specs: list[FieldSpec], kind: str, source: dict, sensitive_keys: list[str]) -> None:
    """Prefill from a predecessor's persisted source. Sensitive values are never prefilled: their
    keys are listed to re-enter instead."""
    declared = set(sensitive_keys)
    skip = NO_PREFILL.get(kind, set())
    first_pairs = next((s for s in specs if s.widget == "pairs"), None)
    for spec in specs:
        if spec.name in skip or spec.name not in source:
            continue
        value = source[spec.name]
        if spec.widget == "pairs" and isinstance(value, dict):
            spec.value = "\n".join(f"{k}={v}" for k, v in value.items()
                                   if not secrets.is_sensitive(k, declared=declared))
        elif spec.widget == "lines" and isinstance(value, list):
            spec.value = "\n".join(str(v) for v in value)
        elif not secrets.is_sensitive(spec.name, declared=declared):
            spec.value = value
    if first_pairs is not None:
        first_pairs.reenter = tuple(sorted(declared))


def template_fields(catalog: list[dict], chosen: str | None, source: dict | None,
                    sensitive_keys: list[str]) -> tuple[dict | None, list[FieldSpec]]:
    """The chosen template and one field per declared input: non-sensitive ones prefilled from the
    predecessor's args, else the declared default; sensitive ones always empty."""
    template = next((t for t in catalog if t["name"] == chosen), None)
    if template is None:
        return None, []
    args = (source or {}).get("args") or {}
    declared = set(sensitive_keys)
    specs = []
    for decl in template.get("inputs") or []:
        sensitive = decl.get("sensitive") or secrets.is_sensitive(
            decl["name"], declared=declared, input_type=decl.get("type"))
        widget = ("password" if sensitive else "checkbox" if decl.get("type") == "boolean"
                  else "number" if decl.get("type") == "integer" else "text")
        value = None if sensitive else args.get(decl["name"], decl.get("default"))
        specs.append(FieldSpec(name=decl["name"], label=decl["name"], widget=widget,
                               required=bool(decl.get("required")) or (sensitive and decl["name"] in declared),
                               help=decl.get("description") or "", value=value))
    return template, specs


def pane_context(project_id: str, kind: str, *, predecessor: dict | None = None,
                 chosen_template: str | None = None, form_values: dict | None = None) -> dict:
    """What the deploy pane of `kind` renders (prefilled from `predecessor`'s row when editing)."""
    if kind not in schemas.SOURCE_SCHEMAS:
        abort(404)
    source = dict(predecessor["source"]) if predecessor else {}
    sensitive_keys = list(predecessor["sensitive_keys"]) if predecessor else []
    template, catalog = None, []
    if kind == "template":
        catalog = template_catalog()
        chosen_template = chosen_template or source.get("template") or (
            catalog[0]["name"] if catalog else None)
    if kind == "template" and catalog:
        template, specs = template_fields(catalog, chosen_template, source, sensitive_keys)
    else:
        specs = schema_fields(kind)
        if predecessor:
            prefill(specs, kind, source, sensitive_keys)
    if form_values:
        for spec in specs:
            if spec.widget != "password" and spec.name in form_values:
                spec.value = form_values[spec.name]
    view = view_from_row(predecessor) if predecessor else None
    return {"project_id": project_id, "kind": kind, "kinds": available_kinds(),
            "titles": KIND_TITLES, "specs": specs, "catalog": catalog, "template": template,
            "predecessor": view, "errors": [], "sensitive_keys": sensitive_keys}


def _pairs(text: str) -> dict[str, str]:
    found = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValidationError(f"{line.strip()[:40]!r} is not KEY=value")
        found[key.strip()] = value.strip()
    return found


def source_from_form(kind: str, form, ctx: dict) -> tuple[dict, list[str], dict]:
    """(source, sensitive key names, field errors) from a submitted pane form."""
    source: dict = {"kind": kind}
    sensitive: list[str] = []
    errors: dict[str, str] = {}
    if kind == "template" and ctx["template"] is not None:
        source["template"] = ctx["template"]["name"]
        args = {}
        for spec in ctx["specs"]:
            raw = form.get(f"f:{spec.name}", "")
            if spec.widget == "checkbox":
                raw = "true" if raw else "false"
            if raw != "":
                args[spec.name] = raw
            if spec.widget == "password" and raw != "":
                sensitive.append(spec.name)
        source["args"] = args
        return source, sensitive, errors
    for spec in ctx["specs"]:
        raw = form.get(f"f:{spec.name}", "")
        try:
            if spec.widget == "checkbox":
                source[spec.name] = bool(raw)
            elif spec.widget == "number":
                if raw.strip():
                    source[spec.name] = int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
            elif spec.widget == "pairs":
                values = _pairs(raw)
                secret_values = _pairs(form.get(f"s:{spec.name}", ""))
                for key in spec.reenter:
                    value = form.get(f"s:{spec.name}:{key}", "")
                    if value:
                        secret_values[key] = value
                sensitive += sorted(secret_values)
                values.update(secret_values)
                if values:
                    source[spec.name] = values
            elif spec.widget == "lines":
                items = [line.strip() for line in raw.splitlines() if line.strip()]
                if items:
                    source[spec.name] = items
            elif raw.strip():
                source[spec.name] = raw.strip()
        except (ValueError, ValidationError) as exc:
            errors[spec.name] = str(exc.messages[0] if isinstance(exc, ValidationError) else
                                    "must be a number")
    return source, sensitive, errors


def _flatten(messages, prefix="") -> dict[str, str]:
    flat = {}
    if isinstance(messages, dict):
        for key, value in messages.items():
            flat.update(_flatten(value, f"{prefix}{key}." if key != "source" else ""))
    elif isinstance(messages, list):
        flat[prefix.rstrip(".") or "_form"] = "; ".join(str(m) for m in messages
                                                        if not isinstance(m, (dict, list)))
    return flat


# -- routes: pages -----------------------------------------------------------------------------
@bp.get("/")
def index():
    """The landing page: the workspace's projects."""
    projects = read_projects(runtime().db, current_identity().namespace)
    return render_template("index.html", projects=projects)


@bp.get("/projects")
def open_project():
    """Go to the project named in ?id= (the landing page's form)."""
    project_id = (request.args.get("id") or "").strip().lower()
    try:
        schemas.PROJECT_ID(project_id)
    except ValidationError:
        return redirect(url_for(".index", invalid=project_id[:63]))
    return redirect(url_for(".project", project_id=project_id))


@bp.get("/projects/<project_id>")
def project(project_id):
    """The project page: canvas, dock, timeline pane (?task=), deploy pane (?deploy=)."""
    valid_project(project_id)
    identity = current_identity()
    store = TaskStore(project_id, dismissed=dismissed_ids())
    store.bootstrap(read_board(runtime().db, identity.namespace, project_id), now())
    chips = [view_from_store(store, i["id"]) for i in store.chips()]
    placeholders = [view_from_store(store, i["id"]) for i in store.placeholders()]
    timeline_ctx = None
    if request.args.get("task"):
        row = _row_or_none(request.args["task"])
        if row is not None and row["project_id"] == project_id:
            timeline_ctx = timeline_context(row)
    pane = None
    if request.args.get("deploy") in schemas.SOURCE_SCHEMAS:
        pane = pane_context(project_id, request.args["deploy"])
    return render_template("project.html", project_id=project_id, chips=chips,
                           placeholders=placeholders, cards=store.resource_cards(),
                           timeline_ctx=timeline_ctx, pane=pane, kinds=available_kinds(),
                           titles=KIND_TITLES,
                           cluster_label=runtime().integrations.cluster_label)


@bp.get("/projects/<project_id>/stream")
def project_stream(project_id):
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
        try:
            yield "retry: 2000\n\n"
            for part in bootstrap():
                yield sse(part)
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
                    yield sse(part)
        finally:
            subscription.close()

    return Response(stream_with_context(frames()), mimetype="text/event-stream",
                    headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


def apply_notification(engine, store: TaskStore, namespace: str, payload: dict) -> list[str]:
    """Re-read the notified task (ids only travel) and apply it to the store as upsert/remove."""
    task_id = payload.get("task")
    if not task_id:
        return []
    # A retention purge's notification is itself the removal event: nothing left to read.
    row = None if payload.get("removed") else read_task_row(engine.db, namespace, task_id)
    event = ({"type": "remove", "id": task_id} if row is None
             else {"type": "upsert", "item": dto.projection(row)})
    changes = store.apply(event, now())
    return store_fragments(store, changes) if changes else []


def sse(html: str) -> str:
    return "".join(f"data: {line}\n" for line in html.splitlines() or [""]) + "\n"


# -- routes: partials ----------------------------------------------------------------------------
def _row_or_none(task_id) -> dict | None:
    try:
        return read_task_row(runtime().db, current_identity().namespace, UUID(str(task_id)))
    except ValueError:
        return None


def _row(task_id: UUID) -> dict:
    row = read_task_row(runtime().db, current_identity().namespace, task_id)
    if row is None:
        raise TaskNotFound()
    return row


@bp.get("/tasks/<uuid:task_id>/timeline")
def timeline(task_id):
    """The timeline pane of one task (htmx); a plain visit lands on its project page."""
    row = _row(task_id)
    if not request.headers.get("HX-Request"):
        return redirect(url_for(".project", project_id=row["project_id"], task=str(task_id)))
    return render_template("partials/timeline.html", **timeline_context(row))


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
    if row["source_kind"] in ONE_CLICK_KINDS or row["source_kind"] not in schemas.SOURCE_SCHEMAS:
        abort(404)
    ctx = pane_context(row["project_id"], row["source_kind"], predecessor=row,
                       chosen_template=request.args.get("template"))
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
    ctx = pane_context(predecessor["project_id"] if predecessor else project_id, kind,
                       predecessor=predecessor, chosen_template=request.form.get("template"))
    source, sensitive, field_errors = source_from_form(kind, request.form, ctx)
    body = {"source": source, "sensitiveKeys": sensitive}
    if predecessor:
        body["predecessorTaskId"] = predecessor_id  # the target stays the predecessor's project
    else:
        body["projectId"] = project_id
    if not field_errors:
        try:
            schemas.CreateTask().load(body)
        except ValidationError as exc:
            field_errors = _flatten(exc.messages)
    if field_errors:
        return _pane_with_errors(ctx, field_errors)
    try:
        row = actions.create_task(runtime(), identity, project_id=None if predecessor else project_id,
                                  source=source, sensitive_keys=sensitive,
                                  predecessor_task_id=UUID(predecessor_id) if predecessor_id else None)
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
    ctx["errors"] = [f"{k}: {v}" if k != "_form" else v
                     for k, v in field_errors.items() if k not in known]
    return fragments_response(render_template("partials/pane.html", **ctx))


def _opened(row: dict, predecessor_id: str | None) -> Response:
    """After a create or redeploy: close the pane, open the new task's timeline, show its chip
    (and its predecessor's, now superseded)."""
    fresh = read_task_row(runtime().db, row["namespace"], row["id"]) or row
    parts = [render_template("partials/pane_empty.html"),
             render_template("partials/timeline.html", **timeline_context(fresh)),
             task_fragments(fresh)]
    if predecessor_id:
        before = read_task_row(runtime().db, row["namespace"], UUID(predecessor_id))
        if before is not None:
            parts.append(task_fragments(before))
    return fragments_response(*parts)


def _open_winner(exc: DomainError, predecessor_id: str) -> Response:
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
    except DomainError as exc:
        if exc.snapshot is None:
            raise
    return fragments_response(task_fragments(_row(task_id)))


@bp.post("/tasks/<uuid:task_id>/redeploy")
def redeploy(task_id):
    """One-click redeploy: a clone of the predecessor's source and target."""
    try:
        row = actions.create_task(runtime(), current_identity(), project_id=None, source=None,
                                  predecessor_task_id=task_id)
    except RedeployAlreadyActive as exc:
        return _open_winner(exc, str(task_id))
    except DomainError as exc:
        if exc.snapshot is None:
            raise
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
        ctx = timeline_context(row, events=[])
        for spec in ctx["inputs"]:
            spec.error = "required" if spec.name in missing else None
            if spec.widget != "password":
                spec.value = values.get(spec.name)
        return fragments_response(render_template("partials/timeline_input.html", **ctx))
    try:
        actions.submit_inputs(runtime(), current_identity(), task_id,
                              inputs={k: v for k, v in values.items() if v != ""},
                              sensitive_keys=[s.name for s in declared if s.widget == "password"])
    except DomainError as exc:
        if exc.snapshot is None:
            raise
    return fragments_response(task_fragments(_row(task_id)))


def _shown(value) -> str:
    """A prefilled value as the browser submits it back."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return "" if value is None else str(value)


def input_fields(snapshot: dict) -> list[FieldSpec]:
    """The blocking-input form: every sensitive input re-asked (empty, required), the others
    prefilled from their declared defaults. Inputs the task already has (declared `missing:
    false` by the runner) are `kept`: sent only when changed, so a default never silently
    replaces what the deployment was given."""
    if snapshot["status"] != Status.BLOCKED:
        return []
    declared = set(snapshot.get("sensitiveKeys") or [])
    specs = []
    for decl in snapshot.get("pendingInputs") or []:
        if isinstance(decl, str):
            decl = {"name": decl}
        name = decl.get("name")
        if not name:
            continue
        sensitive = bool(decl.get("sensitive")) or secrets.is_sensitive(
            name, declared=declared, input_type=decl.get("type"))
        widget = ("password" if sensitive else "checkbox" if decl.get("type") == "boolean"
                  else "number" if decl.get("type") == "integer" else "text")
        kept = not sensitive and decl.get("missing") is False
        specs.append(FieldSpec(
            name=name, label=decl.get("label") or name, widget=widget,
            required=(sensitive or bool(decl.get("required"))) and not kept,
            help=decl.get("description") or "",
            value=None if sensitive else decl.get("default"), kept=kept))
    return sorted(specs, key=lambda spec: spec.kept)


@bp.errorhandler(DomainError)
def domain_error(exc: DomainError):
    """Domain errors on pages render as a small HTML message with their status."""
    return render_template("error.html", message=exc.message, code=exc.code), exc.http_status
