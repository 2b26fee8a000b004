"""Roll back: a new deployment of an app with the recorded plan of one of its completed
deployments (issue 28). Not a redeploy: a redeploy clone recovers a failed or cancelled task, a
rollback returns an app to a version that worked; a completed task still cannot be cloned.

The new task takes the completed task's persisted source (secrets were stripped before it was
stored), its recorded sensitive key names and its result identities, so it converges on the same
resources (the same template instance, the same object names). It starts with no secret values in
memory: a plan that needs them parks `blocked` and asks again (the runners' recorded-secrets
rule), never reads them from anywhere. One deployment of an app at a time: a rollback while one is
active is refused with the active task's snapshot.
"""

import logging
from uuid import UUID

from engine.core.status import Status
from engine.errors import AppDeployAlreadyActive, NotRollbackable
from engine.lifecycle.actions import claim_and_launch, get_task, insert_task
from engine.lifecycle.identity import Identity
from engine.operations import metrics
from engine.process import EngineRuntime
from engine.readside import dto

log = logging.getLogger(__name__)


@metrics.timing(metrics.ACTION_DURATION, action="rollback")
def rollback_task(
    runtime: EngineRuntime, identity: Identity, task_id: UUID, *, kubeconfig: dict | None = None
) -> dict:
    """Start a rollback of `task_id`'s app to that task's plan; the new task's stored row."""
    with runtime.admission():
        return _rollback_task(runtime, identity, task_id, kubeconfig=kubeconfig)


def _rollback_task(
    runtime: EngineRuntime, identity: Identity, task_id: UUID, *, kubeconfig: dict | None
) -> dict:
    target = get_task(runtime, identity, task_id)
    if target["status"] != Status.COMPLETED or target["app_key"] is None:
        raise NotRollbackable(snapshot=dto.snapshot(target))
    _refuse_while_active(runtime, identity, target)
    identities = dict(target["artifact_summary"].get("resultIdentities") or {})
    new_id = insert_task(
        runtime,
        identity,
        project_id=target["project_id"],
        source_kind=target["source_kind"],
        runner=target["runner"],
        source=target["source"],
        sensitive_keys=list(target["sensitive_keys"]),
        artifact_summary={"resultIdentities": identities} if identities else {},
        retried_from_task_id=None,
        rolled_back_from_task_id=task_id,
    )
    if new_id is None:  # lost the race to another rollback of the app (its one-active index)
        _refuse_while_active(runtime, identity, target)
        raise AppDeployAlreadyActive()
    log.info(
        "rollback of app %s to task %s requested by %s",
        target["app_key"],
        task_id,
        identity.user,
        extra={"task_id": str(new_id), "workspace": identity.workspace},
    )
    # No secret values: the runner parks blocked for every recorded sensitive input. None:
    # cancelled between insert and claim; report the truth.
    return claim_and_launch(
        runtime,
        identity,
        new_id,
        from_status=Status.QUEUED,
        memory={},
        sensitive=[],
        kubeconfig=kubeconfig,
    ) or get_task(runtime, identity, new_id)


def _refuse_while_active(runtime: EngineRuntime, identity: Identity, target: dict) -> None:
    """AppDeployAlreadyActive with the active task's snapshot when the app has one."""
    active = runtime.db.one(
        "task_get_active_of_app",
        workspace=identity.workspace,
        project_id=target["project_id"],
        app_key=target["app_key"],
    )
    if active is not None:
        raise AppDeployAlreadyActive(snapshot=dto.snapshot(active))
