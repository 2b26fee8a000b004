"""What the project page shows of a task (chips, placeholders, the timeline header), and the
page-request state those views depend on: the clock, the project id, the user's dismissals."""

from dataclasses import dataclass
from datetime import UTC, datetime

from flask import abort, render_template, request
from marshmallow import ValidationError

from blueprints import schemas
from blueprints.auth.gate import current_identity
from blueprints.errors import http_status
from blueprints.pages import presentation
from blueprints.request_helpers import runtime
from engine.core.status import ACTIVE, Status
from engine.errors import DomainError
from engine.lifecycle import actions, dismissals
from engine.readside import dto
from engine.readside.store import TaskStore, attention
from engine.runners.kinds import KINDS

#: Placeholders without a saved placement are laid out on this grid (canvas pixels).
GRID_X, GRID_Y, GRID_COLUMNS = 210, 120, 4


def now() -> datetime:
    return datetime.now(UTC)


def valid_project(project_id: str) -> str:
    """The project id, or 404 when it cannot be one."""
    try:
        schemas.PROJECT_ID(project_id)
    except ValidationError:
        abort(404)
    return project_id


def editable(source_kind: str) -> bool:
    """Whether a task of this kind has a pane to edit it before a redeploy (a one-click kind
    redeploys as it was)."""
    kind = KINDS.get(source_kind)
    return kind is not None and not kind.one_click


def dismissed_ids(project_id: str | None = None) -> set[str]:
    """Task ids the signed-in user dismissed in the project (default: the route's own
    `project_id`), on any browser: the dock leaves them out when it renders."""
    project = project_id if project_id is not None else request.view_args["project_id"]
    return dismissals.dismissed_task_ids(runtime(), current_identity(), project)


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
        return self.can_redeploy and editable(self.item.get("sourceKind"))

    @property
    def confirm(self) -> str | None:
        """The one-line overwrite warning before a redeploy over applied resources, or None."""
        applied = self.item.get("appliedResources") or []
        if not applied:
            return None
        names = ", ".join(f"{r.get('kind')}/{r.get('name')}" for r in applied[:3])
        more = f" and {len(applied) - 3} more" if len(applied) > 3 else ""
        return (
            f"This redeploy applies over {len(applied)} resource(s) the earlier run created "
            f"({names}{more}); manual edits to them will be overwritten."
        )

    @property
    def placed(self) -> bool:
        """Whether the user dragged it somewhere; the others are laid out by the page's width."""
        canvas = self.item.get("canvas") or {}
        return all(isinstance(canvas.get(axis), (int, float)) for axis in ("x", "y"))

    @property
    def position(self) -> tuple[float, float]:
        canvas = self.item.get("canvas") or {}
        if isinstance(canvas.get("x"), (int, float)) and isinstance(canvas.get("y"), (int, float)):
            return canvas["x"], canvas["y"]
        return (
            16 + (self.index % GRID_COLUMNS) * GRID_X,
            16 + (self.index // GRID_COLUMNS) * GRID_Y,
        )

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
    return TaskView(
        item,
        superseded_by=store.successor_of(task_id),
        attention=presentation.attention_label(store.attention(task_id)),
        index=index,
    )


def view_from_row(row: dict, dismissed: set[str] = frozenset()) -> TaskView:
    item = dto.projection(row)
    successor = item.get("successorId")
    return TaskView(
        item,
        superseded_by=successor,
        attention=presentation.attention_label(
            attention(item, superseded=bool(successor), dismissed=item["id"] in dismissed)
        ),
    )


def page_error(exc: DomainError):
    """A domain error on a page: a small HTML message with its status (every page blueprint
    registers it)."""
    return render_template("error.html", message=exc.message, code=exc.code), http_status(exc)
