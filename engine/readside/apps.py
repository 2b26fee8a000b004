"""Apps: the deployments of a project that converge on the same resources, read as one thing.

An app's key is derived once, by the database (deploy_tasks.app_key in schema.sql): a template's
instance name, an image's or a database's object name. An app's current resources are what its
deployments left in the cluster, each as the newest deployment that applied it recorded it; its
endpoints are read off them; its history is every task with its key, newest first, until
retention purges it.
Reads only: nothing here writes.
"""

from engine.core.status import ACTIVE, Status
from engine.errors import AppNotFound
from engine.readside import dto
from engine.readside.store import read_page

#: At most this many apps on a project's list (the newest first).
APPS_LIMIT = 200
#: History entries per page unless asked otherwise.
HISTORY_PAGE = 20


def read_apps(db, workspace: str, project_id: str) -> list[dict]:
    """The project's apps, newest activity first (each: app_summary)."""
    rows = db.all(
        "task_list_apps_of_project",
        workspace=workspace,
        project_id=project_id,
        app_key=None,
        limit=APPS_LIMIT,
    )
    return [app_summary(r) for r in rows]


def read_app(db, workspace: str, project_id: str, app_key: str) -> dict:
    """One app with its current resources and endpoints; AppNotFound when no task of the project
    has that key."""
    row = db.one(
        "task_list_apps_of_project",
        workspace=workspace,
        project_id=project_id,
        app_key=app_key,
        limit=1,
    )
    if row is None:
        raise AppNotFound()
    applied = db.all(
        "task_list_app_resources", workspace=workspace, project_id=project_id, app_key=app_key
    )
    resources = [
        {
            "kind": a["resource"].get("kind"),
            "name": a["resource"].get("name"),
            "namespace": a["resource"].get("namespace"),
            "endpoint": a["resource"].get("endpoint"),
            # The deployment that last applied it, and how that one ended.
            "taskId": str(a["task_id"]),
            "status": a["status"],
        }
        for a in applied
    ]
    endpoints = [endpoint_view(r["endpoint"]) for r in resources if r["endpoint"]]
    return {
        **app_summary(row),
        "resources": resources,
        # Openable links first: the address a user wants is the one they can click.
        "endpoints": sorted(endpoints, key=lambda e: e["inCluster"]),
    }


def read_app_page(
    db, workspace: str, project_id: str, app_key: str, *, cursor: str | None, limit: int
) -> dict:
    """One app (read_app) with a page of its history newest first after the opaque list
    `cursor`: `history` holds its entries (`items`) and the next page's `nextCursor`."""
    app = read_app(db, workspace, project_id, app_key)
    rows, next_cursor = read_app_history(
        db,
        workspace,
        project_id,
        app_key,
        cursor=dto.decode_cursor(cursor) if cursor is not None else None,
        limit=limit,
    )
    return {
        **app,
        "history": {"items": [history_entry(r) for r in rows], "nextCursor": next_cursor},
    }


def read_app_history(
    db, workspace: str, project_id: str, app_key: str, *, cursor: tuple | None, limit: int
) -> tuple[list[dict], str | None]:
    """(up to `limit` task rows of the app newest first after `cursor`, the next page's cursor)."""
    return read_page(
        db,
        "task_list_app_page",
        cursor=cursor,
        limit=limit,
        workspace=workspace,
        project_id=project_id,
        app_key=app_key,
    )


def rollbackable(row: dict) -> bool:
    """Whether "Roll back to this" is offered: a completed deployment of an app."""
    return row["status"] == Status.COMPLETED and row.get("app_key") is not None


def app_kind_and_name(app_key: str) -> tuple[str, str]:
    """('template' | 'image' | 'database', the instance or object name) of an app key."""
    kind, _, name = app_key.partition(":")
    return kind, name


def endpoint_view(address: str) -> dict:
    """An endpoint a user can open (an Ingress or route host: `url`) or an in-cluster address
    (reachable only from inside the cluster: no `url`)."""
    opens = address.startswith(("http://", "https://"))
    return {"address": address, "url": address if opens else None, "inCluster": not opens}


def app_summary(row: dict) -> dict:
    """The public view of one app, from its newest task row."""
    kind, name = app_kind_and_name(row["app_key"])
    return {
        "key": row["app_key"],
        "projectId": row["project_id"],
        "kind": kind,
        "name": name,
        "status": row["status"],
        "active": Status(row["status"]) in ACTIVE,
        "latestTaskId": str(row["id"]),
        "updatedAt": row["updated_at"].isoformat() if row.get("updated_at") else None,
    }


def history_entry(row: dict) -> dict:
    """One deployment of an app's history: its snapshot, and whether it can be rolled back to."""
    return {**dto.snapshot(row), "rollbackable": rollbackable(row)}
