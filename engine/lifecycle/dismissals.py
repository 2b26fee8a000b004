"""Dismissals: a user's own "seen it" on finished tasks in a project's dock.

A dismissed task leaves that user's dock for good: on every browser, in every later render,
however many they dismiss. It changes nothing about the task (its status, its attention for
other users, its place in the API); retention purges the dismissal with the task.
"""

from uuid import UUID

from engine.core.status import TERMINAL, Status
from engine.lifecycle.actions import get_task
from engine.lifecycle.identity import Identity
from engine.process import EngineRuntime


def dismiss_task(runtime: EngineRuntime, identity: Identity, task_id: UUID) -> dict | None:
    """Dismiss a finished task from the caller's dock: None once dismissed (again: a no-op), or
    the task's row while it is still active (nothing dismissed); TaskNotFound otherwise."""
    dismissed = runtime.db.one(
        "dock_dismissal_insert_if_finished",
        workspace=identity.workspace,
        user=identity.user,
        task_id=task_id,
    )
    if dismissed is not None:
        return None
    row = get_task(runtime, identity, task_id)
    return None if Status(row["status"]) in TERMINAL else row


def dismissed_task_ids(runtime: EngineRuntime, identity: Identity, project_id: str) -> set[str]:
    """The ids of the tasks the caller dismissed in the project's dock."""
    rows = runtime.db.all(
        "dock_dismissal_task_ids",
        workspace=identity.workspace,
        user=identity.user,
        project_id=project_id,
    )
    return {str(row["task_id"]) for row in rows}
