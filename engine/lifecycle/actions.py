"""The use cases every surface calls (JSON API, pages, chat tools), so they can never disagree."""

import logging
import uuid
from uuid import UUID

from engine.core import leases
from engine.core.status import TERMINAL, Status
from engine.core.transitions import Move, transition
from engine.errors import (
    PredecessorNotFound,
    PredecessorNotRedeployable,
    RedeployAlreadyActive,
    TaskAlreadyFinished,
    TaskNotBlocked,
)
from engine.lifecycle.identity import Identity
from engine.lifecycle.intake import (
    check_template_args,
    identity_kind,
    refuse_short_secrets,
    strip_source,
)
from engine.operations import metrics
from engine.process import EngineRuntime
from engine.readside import dto
from engine.readside.store import read_task, task_found
from engine.readside.wait import wait_until_settled
from engine.runners import runner_for
from engine.runners.kinds import template_of

log = logging.getLogger(__name__)

REDEPLOYABLE = {Status.FAILED, Status.CANCELLED}


def get_task(runtime: EngineRuntime, identity: Identity, task_id: UUID) -> dict:
    """One task of the caller's workspace; TaskNotFound otherwise."""
    return task_found(read_task(runtime.db, identity.workspace, task_id))


def wait_for_task(
    runtime: EngineRuntime, identity: Identity, task_id: UUID, timeout_s: float
) -> tuple[dict, str]:
    """(row, outcome) once the task settles or `timeout_s` passes (engine/readside/wait.py);
    TaskNotFound when there is no such task, or it is purged meanwhile."""
    get_task(runtime, identity, task_id)
    row, outcome = wait_until_settled(
        runtime.db, runtime.listener, identity.workspace, task_id, timeout_s
    )
    return task_found(row), outcome


def start_project(runtime: EngineRuntime, identity: Identity, project_id: str) -> None:
    """Record a project the caller started, so the landing page lists it before any deployment
    (the id is validated by the caller, with the API's rule)."""
    runtime.db.execute(
        "project_start", workspace=identity.workspace, project_id=project_id, user=identity.user
    )


@metrics.timing(metrics.ACTION_DURATION, action="create")
def create_task(
    runtime: EngineRuntime,
    identity: Identity,
    *,
    project_id: str | None,
    source: dict | None,
    inputs: dict | None = None,
    sensitive_keys: list[str] | None = None,
    kubeconfig: dict | None = None,
    predecessor_task_id: UUID | None = None,
) -> dict:
    """Insert a task and claim it inline, launching its runner here; the stored row.

    With a predecessor this is a redeploy: the clone takes the predecessor's source (unless an
    edited one is given) and project, and its recorded result identities when the project matches.
    Admitted by the runtime: refused while it drains, and waited for by the drain otherwise.
    """
    with runtime.admission():
        return _create_task(
            runtime,
            identity,
            project_id=project_id,
            source=source,
            inputs=inputs,
            sensitive_keys=sensitive_keys,
            kubeconfig=kubeconfig,
            predecessor_task_id=predecessor_task_id,
        )


def _create_task(
    runtime: EngineRuntime,
    identity: Identity,
    *,
    project_id,
    source,
    inputs,
    sensitive_keys,
    kubeconfig,
    predecessor_task_id,
) -> dict:
    inputs = inputs or {}
    sensitive_keys = list(sensitive_keys or [])
    identities: dict = {}
    if predecessor_task_id is not None:
        predecessor = read_task(runtime.db, identity.workspace, predecessor_task_id)
        if predecessor is None:
            raise PredecessorNotFound()
        if predecessor["status"] not in REDEPLOYABLE:
            raise PredecessorNotRedeployable(snapshot=dto.snapshot(predecessor))
        target = project_id or predecessor["project_id"]
        if source is None:
            source = predecessor["source"]
            sensitive_keys = sorted(set(sensitive_keys) | set(predecessor["sensitive_keys"]))
        if target == predecessor["project_id"] and identity_kind(source) == identity_kind(
            predecessor["source"]
        ):
            identities = dict(predecessor["artifact_summary"].get("resultIdentities") or {})
        project_id = target
    template, catalog = template_of(source), runtime.integrations.templates
    if template is not None and catalog is not None:
        check_template_args(catalog, template, source, inputs)
        # A template's declarations name secrets the shared predicate cannot guess from a name.
        given = set(source.get("args") or {}) | set(inputs)
        sensitive_keys += catalog.declared_sensitive_keys(template, given)
    persisted, memory, stripped = strip_source(source, inputs, sensitive_keys)
    refuse_short_secrets(memory, set(stripped), source=source, inputs=inputs)
    runner_name, _ = runner_for(persisted["kind"])
    task_id = insert_task(
        runtime,
        identity,
        project_id=project_id,
        source_kind=persisted["kind"],
        runner=runner_name,
        source=persisted,
        sensitive_keys=stripped,
        artifact_summary={"resultIdentities": identities} if identities else {},
        retried_from_task_id=predecessor_task_id,
        rolled_back_from_task_id=None,
    )
    if task_id is None:  # not ours: another clone of the predecessor is active (the one-clone rule)
        exc = RedeployAlreadyActive()
        winner = runtime.db.one(
            "task_get_successor", task_id=predecessor_task_id, workspace=identity.workspace
        )
        if winner is not None:
            exc.snapshot = dto.snapshot(get_task(runtime, identity, winner["id"]))
        raise exc
    # None: cancelled between insert and claim; report the truth.
    return claim_and_launch(
        runtime,
        identity,
        task_id,
        from_status=Status.QUEUED,
        memory=memory,
        sensitive=stripped,
        kubeconfig=kubeconfig,
    ) or get_task(runtime, identity, task_id)


def insert_task(runtime: EngineRuntime, identity: Identity, **columns) -> UUID | None:
    """Insert a queued task of the caller's workspace (`columns`: task_insert's other values);
    its id, or None when a one-active rule (one active clone of a predecessor, one active
    rollback of an app) kept it out."""
    # The id is chosen here, so an insert sent again after a lost connection finds its own row
    # instead of making a second task. No notice of the insert of its own: the claim's (and the
    # run's first writes') announce the task in the process's next tick; a claim that loses to a
    # cancel was notified by it.
    task_id = uuid.uuid4()
    row = runtime.db.one(
        "task_insert",
        id=task_id,
        workspace=identity.workspace,
        created_by=identity.user,
        **columns,
    )
    if row is None:  # this insert sent again after a lost connection: its first attempt's row?
        row = read_task(runtime.db, identity.workspace, task_id)
    return None if row is None else task_id


def claim_and_launch(
    runtime: EngineRuntime,
    identity: Identity,
    task_id: UUID,
    *,
    from_status: Status,
    memory: dict,
    sensitive: list[str],
    kubeconfig: dict | None,
) -> dict | None:
    """Claim the task from `from_status` and start its runner here with `memory` once the claim
    commits; the claimed row, or None when the task moved first (or has a cancel pending)."""
    leased_at = runtime.db.clock()
    claimed = leases.claim(
        runtime.db,
        task_id,
        owner=runtime.owner,
        lease_ttl_s=runtime.settings.lease_ttl_s,
        workspace=identity.workspace,
        from_status=from_status,
        actor=identity.user,
        notices=runtime.runner_notices,
    )
    if claimed is None:
        return None
    # Sensitive names the row lacks (declared while the task was blocked) are recorded on it
    # before the runner starts: the runner scrubs by them and never shows their values to a
    # model; a clone re-asks them.
    added = sorted(set(sensitive) & set(memory) - set(claimed["sensitive_keys"]))
    if added:
        recorded = runtime.db.one(
            "task_record_sensitive_keys_if_held",
            names=added,
            task_id=task_id,
            epoch=claimed["lease_epoch"],
            owner=runtime.owner,
        )
        claimed = recorded or claimed
    # Inside a keyed request's transaction (engine/lifecycle/idempotency.py) the run starts only
    # once the task, its claim and the key's answer are committed.
    runtime.db.after_commit(
        lambda: runtime.launch(claimed, inputs=memory, kubeconfig=kubeconfig, leased_at=leased_at)
    )
    return claimed


def submit_inputs(
    runtime: EngineRuntime,
    identity: Identity,
    task_id: UUID,
    *,
    inputs: dict,
    sensitive_keys: list[str] | None = None,
    kubeconfig: dict | None = None,
) -> dict:
    """Claim a blocked task (blocked -> running) and resume its runner with the values in memory."""
    with runtime.admission():
        return _submit_inputs(
            runtime,
            identity,
            task_id,
            inputs=inputs,
            sensitive_keys=sensitive_keys,
            kubeconfig=kubeconfig,
        )


def _submit_inputs(
    runtime: EngineRuntime,
    identity: Identity,
    task_id: UUID,
    *,
    inputs: dict,
    sensitive_keys: list[str] | None,
    kubeconfig: dict | None,
) -> dict:
    row = get_task(runtime, identity, task_id)
    if row["status"] != Status.BLOCKED:
        raise TaskNotBlocked(snapshot=dto.snapshot(row))
    declared = [
        d["name"]
        for d in row["artifact_summary"].get("pendingInputs") or []
        if isinstance(d, dict) and d.get("sensitive") and isinstance(d.get("name"), str)
    ]
    _, memory, stripped = strip_source(
        {}, inputs, list(sensitive_keys or []) + list(row["sensitive_keys"]) + declared
    )
    refuse_short_secrets(memory, set(stripped), source=None, inputs=inputs)
    claimed = claim_and_launch(
        runtime,
        identity,
        task_id,
        from_status=Status.BLOCKED,
        memory=memory,
        sensitive=stripped,
        kubeconfig=kubeconfig,
    )
    if claimed is None:
        raise TaskNotBlocked(snapshot=dto.snapshot(get_task(runtime, identity, task_id)))
    return claimed


@metrics.timing(metrics.ACTION_DURATION, action="cancel")
def cancel_task(runtime: EngineRuntime, identity: Identity, task_id: UUID) -> dict:
    """Cancel: queued/blocked at once; running/applying recorded and acknowledged by the runner.

    A cancel whose intent is already satisfied (pending, or the task already cancelled) returns
    the current row; a completed or failed task raises TaskAlreadyFinished.
    """
    row = get_task(runtime, identity, task_id)
    log.info(
        "cancel of task %s requested by %s",
        task_id,
        identity.user,
        extra={"task_id": str(task_id), "workspace": identity.workspace},
    )
    for _ in range(
        3
    ):  # the task may move between our read and our write; re-decide on the new state
        status = Status(row["status"])
        if status is Status.CANCELLED:
            return row
        if status in TERMINAL:
            raise TaskAlreadyFinished(snapshot=dto.snapshot(row))
        if status in (Status.QUEUED, Status.BLOCKED):
            move = Move(
                task_id,
                Status.CANCELLED,
                from_statuses=(status,),
                workspace=identity.workspace,
                actor=identity.user,
                reason="cancel_requested",
                message="cancelled before it ran",
            )
            moved = transition(runtime.db, move, whole_rows=True)
            if moved:
                return moved[0]
        elif row["cancel_requested_at"] is not None:
            return row
        else:
            marked = runtime.db.one(
                "task_request_cancel_if_leased",
                task_id=task_id,
                workspace=identity.workspace,
                requested_by=identity.user,
                now=None,
            )
            if marked is not None:
                # On the owning process the abort fires now; elsewhere the NOTIFY delivers it.
                runtime.abort_local(task_id, "cancel")
                return marked
        row = get_task(runtime, identity, task_id)
    return row


def set_canvas(runtime: EngineRuntime, identity: Identity, task_id: UUID, canvas: dict) -> dict:
    """Save the placeholder's canvas placement (never touches status)."""
    return task_found(
        runtime.db.one(
            "task_set_canvas", task_id=task_id, workspace=identity.workspace, canvas=canvas
        )
    )
