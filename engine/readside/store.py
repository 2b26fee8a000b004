"""The deployment-tasks store: the single read point of a project's dock and canvas.

A store holds the projections of ONE project, fed by a bootstrap read and then by the projection
stream's events (`snapshot` / `upsert` / `remove`), and answers the selectors the pages render
(chips, placeholders, result resource cards, supersession, attention). It is pure logic, clocked
by the `now` its callers pass, so it is tested against synthetic events without a database.

Visibility rules (seed 000: "finished tasks linger in memory" is a defect this store fixes):
- active tasks always show;
- a failed task that nobody redeployed keeps attention until dismissed or superseded, however
  old (seed 000 story 22): there is no time cap, the board read is bounded by paging instead;
- every other finished task (completed, cancelled, superseded failed) leaves GRACE_WINDOW_S after
  it finished; it is then dropped from memory, not just hidden;
- dismissed finished tasks never show (the user's dismissals, read from the server by the page);
- events of another project are ignored, so a switch of project can never leak tasks.
"""

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from engine.core.status import ACTIVE, Status
from engine.errors import TaskNotFound
from engine.readside import dto

#: How long a finished task that needs no attention stays in the dock (and in the board read).
GRACE_WINDOW_S = 600.0


@dataclass
class Changes:
    """What a mutation changed, for the caller to re-render: ids to (re)render, ids gone."""

    upserted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    #: Everything was replaced (bootstrap, snapshot, project switch): render from scratch.
    reset: bool = False
    #: The result resource cards changed.
    cards: bool = False

    def __bool__(self) -> bool:
        return bool(self.upserted or self.removed or self.reset or self.cards)


@dataclass(frozen=True)
class ResourceCard:
    """One result resource on the canvas, owned by the task that last applied it."""

    kind: str
    name: str
    namespace: str | None
    owner_id: str
    owner_status: str
    #: The deployment (app) that owns it: its owner task's title; cards group by it.
    owner_title: str = ""
    #: Where a Service or Ingress answers, when its manifest said.
    endpoint: str | None = None

    @property
    def key(self) -> str:
        return f"{self.kind}/{self.namespace or ''}/{self.name}"

    @property
    def group(self) -> str:
        """The card's group on the canvas: its deployment, by title (then owner, for twins)."""
        return f"{self.owner_title}\x00{self.owner_id}"


#: Cards of one deployment: its workloads first, then how it is reached, then the rest.
KIND_ORDER = {
    "Deployment": 0,
    "StatefulSet": 0,
    "DaemonSet": 0,
    "Job": 1,
    "Service": 2,
    "Ingress": 3,
}


def attention(item: dict, *, superseded: bool = False, dismissed: bool = False) -> Status | None:
    """The status for which this task asks for the user: failed until dismissed or redeployed,
    blocked always; None otherwise. Cancelled is never attention-needed (seed 000, US23)."""
    status = Status(item["status"])
    if status is Status.BLOCKED:
        return status
    if status is Status.FAILED and not superseded and not dismissed:
        return status
    return None


def _time(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


class TaskStore:
    """Projections of one project; see the module docstring for what shows and for how long."""

    def __init__(self, project_id: str, *, grace_s: float = GRACE_WINDOW_S, dismissed=()):
        self.project_id = project_id
        self.grace = timedelta(seconds=grace_s)
        self._items: dict[str, dict] = {}
        #: predecessor id -> newest successor id seen (lineage outlives the successor's expiry).
        self._successor: dict[str, str] = {}
        self._dismissed: set[str] = set(dismissed)
        self._version = 0
        self._memo: dict[str, tuple[int, object]] = {}
        self._cards: tuple[ResourceCard, ...] = ()

    # -- feeding -----------------------------------------------------------------------------
    def bootstrap(self, items: list[dict], now: datetime) -> Changes:
        """Replace everything with a fresh read of the project's board."""
        self._items.clear()
        for item in items:
            if item.get("projectId") == self.project_id:
                self._learn_lineage(item)
                self._items[item["id"]] = item
        self._drop_invisible(now)
        self._touch()
        self._cards = self.resource_cards()
        return Changes(upserted=[c["id"] for c in self.chips()], reset=True, cards=True)

    def apply(self, event: dict, now: datetime) -> Changes:
        """Apply one stream event: {"type": "snapshot", "items"}, {"type": "upsert", "item"} or
        {"type": "remove", "id"}; then drop whatever expired by `now`."""
        kind = event.get("type")
        if kind == "snapshot":
            return self.bootstrap(event.get("items") or [], now)
        if kind == "upsert":
            changes = self._upsert(event["item"], now)
        elif kind == "remove":
            changes = Changes(removed=[event["id"]] if self._items.pop(event["id"], None) else [])
        else:
            raise ValueError(f"unknown stream event type {kind!r}")
        expired = self.expire(now)
        changes.removed += [i for i in expired.removed if i not in changes.removed]
        changes.upserted = [i for i in changes.upserted if i not in changes.removed]
        if changes.upserted or changes.removed:
            self._touch()
        changes.cards = self._cards_changed()
        return changes

    def expire(self, now: datetime) -> Changes:
        """Drop finished tasks past their window (from memory, not just from view)."""
        removed = self._drop_invisible(now)
        if removed:
            self._touch()
        return Changes(removed=removed, cards=self._cards_changed() if removed else False)

    def next_expiry(self) -> datetime | None:
        """When the next finished task leaves (for the caller's wake-up), or None."""
        deadlines = [d for d in (self._deadline(i) for i in self._items.values()) if d is not None]
        return min(deadlines, default=None)

    def dismiss(self, task_ids, now: datetime) -> Changes:
        """Hide finished tasks the user dismissed (active ones cannot be dismissed)."""
        self._dismissed.update(task_ids)
        return self.expire(now)

    def switch_project(self, project_id: str) -> Changes:
        """Show another project: everything of the previous one goes."""
        self.project_id = project_id
        self._items.clear()
        self._touch()
        self._cards = ()
        return Changes(reset=True, cards=True)

    # -- selectors (memoized per version) ------------------------------------------------------
    def get(self, task_id: str) -> dict | None:
        return self._items.get(task_id)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._items

    def __len__(self) -> int:
        return len(self._items)

    def chips(self) -> list[dict]:
        """The dock's tasks, newest first."""
        return self._memoized(
            "chips",
            lambda: sorted(
                self._items.values(),
                key=lambda i: (i.get("createdAt") or "", i["id"]),
                reverse=True,
            ),
        )

    def placeholders(self) -> list[dict]:
        """The canvas's deployment placeholders: one per active task, oldest first."""
        return self._memoized(
            "placeholders",
            lambda: [i for i in reversed(self.chips()) if Status(i["status"]) in ACTIVE],
        )

    def resource_cards(self) -> tuple[ResourceCard, ...]:
        """Result resources as cards; the newest task that applied a resource owns its card."""

        def build():
            cards: dict[str, ResourceCard] = {}
            for item in reversed(self.chips()):
                for res in item.get("appliedResources") or []:
                    card = ResourceCard(
                        res.get("kind", ""),
                        res.get("name", ""),
                        res.get("namespace"),
                        item["id"],
                        item["status"],
                        owner_title=item.get("title") or "",
                        endpoint=res.get("endpoint"),
                    )
                    cards[card.key] = card
            # Grouped by the deployment that owns them, then workloads before their services.
            return tuple(
                sorted(
                    cards.values(),
                    key=lambda c: (
                        c.owner_title,
                        c.owner_id,
                        KIND_ORDER.get(c.kind, 9),
                        c.kind,
                        c.name,
                        c.key,
                    ),
                )
            )

        return self._memoized("cards", build)

    def successor_of(self, task_id: str) -> str | None:
        """The id of the newest redeploy of this task, if any (lineage-derived supersession)."""
        item = self._items.get(task_id)
        return self._successor.get(task_id) or (item or {}).get("successorId")

    def is_superseded(self, task_id: str) -> bool:
        return self.successor_of(task_id) is not None

    def attention(self, task_id: str) -> Status | None:
        """Why this task asks for the user (see `attention`), or None."""
        item = self._items[task_id]
        return attention(
            item, superseded=self.is_superseded(task_id), dismissed=task_id in self._dismissed
        )

    # -- internals -----------------------------------------------------------------------------
    def _upsert(self, item: dict, now: datetime) -> Changes:
        task_id = item["id"]
        if item.get("projectId") != self.project_id:
            # Not ours (a stray event after a project switch): never shown, never kept.
            return Changes(removed=[task_id] if self._items.pop(task_id, None) else [])
        changes = Changes(upserted=[task_id])
        predecessor = item.get("retriedFromTaskId")
        if predecessor and self._successor.get(predecessor) != task_id:
            if predecessor in self._items:
                changes.upserted.append(predecessor)  # its chip now reads "superseded"
        self._learn_lineage(item)
        self._items[task_id] = item
        if not self._visible(item, now):
            del self._items[task_id]
            changes = Changes(removed=[task_id], upserted=changes.upserted[1:])
        return changes

    def _learn_lineage(self, item: dict) -> None:
        predecessor = item.get("retriedFromTaskId")
        if predecessor:
            known = self._successor.get(predecessor)
            newer = self._items.get(known) if known else None
            if newer is None or (newer.get("createdAt") or "") <= (item.get("createdAt") or ""):
                self._successor[predecessor] = item["id"]
        if item.get("successorId"):
            self._successor.setdefault(item["id"], item["successorId"])

    def _deadline(self, item: dict) -> datetime | None:
        if Status(item["status"]) in ACTIVE:
            return None
        finished = _time(item.get("finishedAt")) or _time(item.get("createdAt"))
        if finished is None:
            return None
        if item["status"] == Status.FAILED and not self.is_superseded(item["id"]):
            return None  # keeps attention until dismissed or superseded
        return finished + self.grace

    def _visible(self, item: dict, now: datetime) -> bool:
        if Status(item["status"]) in ACTIVE:
            return True
        if item["id"] in self._dismissed:
            return False
        deadline = self._deadline(item)
        return deadline is None or now < deadline

    def _drop_invisible(self, now: datetime) -> list[str]:
        gone = [i for i, item in self._items.items() if not self._visible(item, now)]
        for task_id in gone:
            del self._items[task_id]
        return gone

    def _touch(self) -> None:
        self._version += 1

    def _memoized(self, name: str, build):
        cached = self._memo.get(name)
        if cached is not None and cached[0] == self._version:
            return cached[1]
        value = build()
        self._memo[name] = (self._version, value)
        return value

    def _cards_changed(self) -> bool:
        cards = self.resource_cards()
        changed = cards != self._cards
        self._cards = cards
        return changed


# -- the reads that feed a store (named queries; pages never hold SQL) -------------------------
#: The most tasks one page of a board holds.
BOARD_LIMIT = 200


def read_board(
    db, workspace: str, project_id: str, *, before: dict | None = None, limit: int = BOARD_LIMIT
) -> list[dict]:
    """One page of a project's board as projections, newest first: every active task, every
    failed one not yet redeployed (however old), and the others finished within the grace
    window. `before`: the last projection of the previous page (the next page starts after it)."""
    rows = db.all(
        "task_list_project_board",
        workspace=workspace,
        project_id=project_id,
        window_s=GRACE_WINDOW_S,
        limit=limit,
        now=None,
        cursor_created_at=before["createdAt"] if before else None,
        cursor_id=before["id"] if before else None,
    )
    return [dto.projection(r) for r in rows]


def read_task(db, workspace: str, task_id) -> dict | None:
    """The one read of a task: its row with the id of its newest redeploy (`successor_id`), or
    None when the workspace has none of that id (never created, purged, or another's)."""
    return db.one("task_get", task_id=task_id, workspace=workspace)


def task_found(row: dict | None) -> dict:
    """The one not-found rule: a task read that found nothing is TaskNotFound (404)."""
    if row is None:
        raise TaskNotFound()
    return row


def read_page(
    db, query: str, *, cursor: tuple | None, limit: int, **params
) -> tuple[list[dict], str | None]:
    """(up to `limit` rows of a keyset-paged query, newest first after `cursor` ((created_at,
    id), or None), the next page's cursor: None on the last page)."""
    created_at, task_id = cursor or (None, None)
    # One row more than asked says whether another page follows.
    rows = db.all(query, cursor_created_at=created_at, cursor_id=task_id, limit=limit + 1, **params)
    more = len(rows) > limit
    rows = rows[:limit]
    return rows, dto.encode_cursor(rows[-1]) if more else None


def read_task_page(
    db,
    workspace: str,
    *,
    project_id: str | None,
    statuses: list[str] | None,
    cursor: tuple | None,
    limit: int,
) -> tuple[list[dict], str | None]:
    """(up to `limit` task rows newest first after `cursor`, the next page's cursor)."""
    return read_page(
        db,
        "task_list_page",
        cursor=cursor,
        limit=limit,
        workspace=workspace,
        project_id=project_id,
        statuses=statuses,
    )


def read_projects(db, workspace: str) -> list[dict]:
    """The workspace's projects (started ones and those with tasks) with task counts, most
    recently active first."""
    return db.all("project_list", workspace=workspace)
