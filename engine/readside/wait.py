"""Long-poll a task until it settles: terminal, or blocked on a person.

Fed by the process's NOTIFY listener (subscribe first, then read, so no change falls in between):
each notification about the task triggers one re-read; nothing polls on a timer.
"""

import time

from engine.core.status import TERMINAL, Status
from engine.db import Database
from engine.maintenance.listener import CLOSED, Listener
from engine.readside.store import read_task

#: The longest wait a caller may ask for (the chat tool and the API share it).
MAX_WAIT_S = 300


def wait_until_settled(
    db: Database, listener: Listener, workspace: str, task_id, timeout_s: float
) -> tuple[dict | None, str]:
    """(row, outcome): outcome is "terminal", "blocked" or "timeout"; row None if it is gone."""
    subscription = listener.subscribe(workspace=workspace, task=str(task_id))
    try:
        deadline = time.monotonic() + min(timeout_s, MAX_WAIT_S)
        while True:
            row = read_task(db, workspace, task_id)
            if row is None:
                return None, "timeout"
            if Status(row["status"]) in TERMINAL:
                return row, "terminal"
            if row["status"] == Status.BLOCKED:
                return row, "blocked"
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return row, "timeout"
            # Any payload (a change, a re-bootstrap after a reconnect) means: read again.
            if subscription.get(timeout=remaining) is CLOSED:
                return row, "timeout"
    finally:
        subscription.close()
