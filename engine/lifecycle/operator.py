"""What an operator does (the CLI calls these): look across workspaces, cancel through the same
use case every surface uses, give a failed cleanup job a fresh attempt budget, reconcile now.

Nothing here writes a status: a cancel goes through `actions.cancel_task` (and so through the
one guarded transition), like any user's.
"""

from uuid import UUID

from engine.errors import DomainError
from engine.lifecycle import actions
from engine.lifecycle.identity import Identity
from engine.operations.streaks import PERSISTENT_AFTER_S
from engine.process import EngineRuntime
from engine.readside import dto
from engine.readside.explain import explain
from engine.readside.store import task_found

#: Who an operator's writes are attributed to in task events.
OPERATOR = "operator"
EVENTS_SHOWN = 1000


class CleanupJobNotRetryable(DomainError):
    """Only a cleanup job that failed for good can be retried (and not while another job of the
    same operation is open)."""

    code = "cleanup_job_not_retryable"


class CleanupJobNotFound(DomainError):
    """No such cleanup job."""

    code = "cleanup_job_not_found"


def list_tasks(
    runtime: EngineRuntime,
    *,
    workspace: str | None = None,
    project_id: str | None = None,
    statuses: list[str] | None = None,
    limit: int = 50,
) -> list[dict]:
    """The newest tasks across workspaces (snapshots)."""
    rows = runtime.db.all(
        "task_list_for_operator",
        workspace=workspace,
        project_id=project_id,
        statuses=statuses or None,
        limit=limit,
    )
    return [dto.snapshot(r) for r in rows]


def show_task(runtime: EngineRuntime, task_id: UUID) -> dict:
    """A task's snapshot, its events and the explanation chat gives."""
    row = task_found(runtime.db.one("task_get_any_workspace", task_id=task_id))
    events = [
        dto.event(e)
        for e in runtime.db.all(
            "event_list_for_task",
            task_id=task_id,
            workspace=row["workspace"],
            after_seq=0,
            limit=EVENTS_SHOWN,
        )
    ]
    snapshot = dto.snapshot(row)
    return {"snapshot": snapshot, "events": events, "explanation": explain(snapshot, events)}


def cancel_task(runtime: EngineRuntime, task_id: UUID) -> dict:
    """Cancel as the operator, in the task's own workspace; the snapshot after."""
    row = task_found(runtime.db.one("task_get_any_workspace", task_id=task_id))
    identity = Identity(user=OPERATOR, workspace=row["workspace"])
    return dto.snapshot(actions.cancel_task(runtime, identity, task_id))


def list_cleanup_jobs(
    runtime: EngineRuntime, *, states: list[str] | None = None, limit: int = 50
) -> list[dict]:
    """The newest cleanup jobs, optionally of some states."""
    return [
        cleanup_job(r)
        for r in runtime.db.all("cleanup_job_list", states=states or None, limit=limit)
    ]


def retry_cleanup_job(runtime: EngineRuntime, job_id: int) -> dict:
    """A failed job gets a fresh attempt budget, due now; audited as an event of its task."""
    row = runtime.db.one("cleanup_job_retry_if_failed", job_id=job_id, actor=OPERATOR, now=None)
    if row is None:
        if runtime.db.one("cleanup_job_get", job_id=job_id) is None:
            raise CleanupJobNotFound()
        raise CleanupJobNotRetryable()
    return cleanup_job(row)


def cleanup_job(row: dict) -> dict:
    """A cleanup job as operators read it (the snapshot holds handles, never secrets)."""
    return {
        "id": row["id"],
        "trigger": str(row["trigger"]),
        "state": str(row["state"]),
        "operationId": row["operation_id"],
        "taskId": _str(row["task_id"]),
        "workspace": row["workspace"],
        "attempts": row["attempts"],
        "nextAttemptAt": _iso(row["next_attempt_at"]),
        "lastError": row["last_error"],
        "updatedAt": _iso(row["updated_at"]),
    }


def list_streaks(runtime: EngineRuntime) -> list[dict]:
    """The current failure streaks, the longest-running first."""
    items = []
    for row in runtime.streaks.current():
        age_s = row["age"].total_seconds()
        items.append(
            {
                "subject": row["subject"],
                "consecutiveFailures": row["consecutive_failures"],
                "firstFailureAt": row["first_failure_at"].isoformat(),
                "lastFailureAt": row["last_failure_at"].isoformat(),
                "lastError": row["last_error"],
                "lastOwner": row["last_owner"],
                "ageSeconds": round(age_s),
                "persistent": age_s >= PERSISTENT_AFTER_S,
            }
        )
    return items


def reconcile(runtime: EngineRuntime) -> dict:
    """Startup reconciliation of this host's runtime rows, now; its summary."""
    return runtime.cleanup.reconcile()


def _iso(value) -> str | None:
    return value.isoformat() if value is not None else None


def _str(value) -> str | None:
    return str(value) if value is not None else None
