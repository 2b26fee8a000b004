"""Fixtures shared by the unit tests."""

import pytest

from tests.helpers import iso


@pytest.fixture
def projection():
    """Factory: a projection dict as the stream carries it (dto.projection's shape)."""
    counter = iter(range(1, 10_000))

    def factory(
        status="running",
        *,
        project="demo",
        created=0.0,
        finished=None,
        task_id=None,
        predecessor=None,
        successor=None,
        applied=(),
        cancel_requested=None,
        canvas=None,
    ):
        n = next(counter)
        if finished is None and status in ("completed", "failed", "cancelled"):
            finished = created + 1
        return {
            "id": task_id or f"00000000-0000-0000-0000-{n:012d}",
            "projectId": project,
            "status": status,
            "phase": None,
            "sourceKind": "image",
            "title": f"task {n}",
            "active": status in ("queued", "running", "blocked", "applying"),
            "cancelRequestedAt": iso(cancel_requested),
            "retriedFromTaskId": predecessor,
            "successorId": successor,
            "failure": None,
            "hasAppliedResources": bool(applied),
            "appliedResources": [
                {"kind": k, "name": n_, "namespace": project, "action": "created"}
                for k, n_ in applied
            ],
            "canvas": canvas,
            "createdAt": iso(created),
            "finishedAt": iso(finished),
        }

    return factory
