"""The template runner: inputs, the instance identity, one atomic provider call, readiness.

1. Fetch the template's input declarations and authoritatively re-scrub the persisted source.
2. Park `blocked` (declarations only) while a required input, or a recorded sensitive key, has no
   value in this run's memory. Parking happens before any identity is allocated.
3. Reuse the recorded instance name (a redeploy's, copied from its predecessor), or allocate one
   and record it BEFORE any provider call, so an identity is never allocated and then lost.
4. Instantiate every document in one provider call (fenced writes, each a checkpoint, before and
   after it, never between).
5. Wait for the required result resources like the direct runner.

Failure cleanup deletes the partial resources only for a typed apply-stage failure of an instance
name this run allocated: never for a reused identity (its resources may predate this task), never
on cancel (a pending cancel is acknowledged before cleanup is considered).
"""

from engine.core.status import Status
from engine.integrations.base import IntegrationError, NotFound, ResourceRef
from engine.integrations.templates import (
    InstantiationError,
    InvalidInputs,
    Template,
    TemplateApplyError,
    TemplateError,
)
from engine.runners import direct
from engine.runners.context import RunContext, TaskHandle, resources
from engine.trust import secrets

#: The result identity a template instance is known by (seed 000: v1 resultIdentities).
INSTANCE_NAME = "templateInstanceName"
#: The source field holding the template's argument values.
ARGS = "args"
#: The steps of a run, in order (failure cleanup is an extra one).
STEPS = ("inputs", "identity", "render", "apply", "verify")


def run(handle: TaskHandle, ctx: RunContext) -> None:
    """Deploy one instance of a catalog template."""
    catalog = ctx.integrations.templates
    template_name = ctx.source["template"]
    handle.update_timeline("inputs", "started", template_name)
    try:
        template = catalog.get(template_name)
    except TemplateError as exc:
        handle.update_timeline("inputs", "failed", str(exc))
        handle.fail(exc.reason, str(exc))
        return
    values = _inputs(handle, ctx, template)
    if values is None:
        return

    instance = ctx.result_identities.get(INSTANCE_NAME)
    # The runner never parks after this point, so "allocated in this run" is "allocated by this
    # task": the only identity whose partial resources failure cleanup may delete.
    fresh = instance is None
    if fresh:
        instance = template.allocate_instance_name()
    manifests = template.render(instance=instance, namespace=ctx.target_namespace, values=values)
    artifacts = {
        "plannedResources": [ResourceRef.of(m).as_json() for m in manifests],
        "appliedResources": [],
    }
    if fresh:
        artifacts["resultIdentities"] = {**ctx.result_identities, INSTANCE_NAME: instance}
    # The identity, the plan, the move to applying and the apply's start: one statement (and a
    # checkpoint: a pending cancel raises from it), before anything reaches the cluster.
    handle.set_state(
        status=Status.APPLYING,
        phase="apply",
        steps=[
            handle.step("identity", "done", instance, reused=not fresh),
            handle.step("render", "done", resources(len(manifests))),
            handle.step("apply", "started", f"{template.name} as {instance}"),
        ],
        artifacts=artifacts,
    )
    try:
        applied = catalog.instantiate(manifests, cluster=ctx.cluster, abort=handle.abort)
    except InstantiationError as exc:
        handle.set_artifacts(appliedResources=[r.as_json() for r in exc.applied])
        handle.checkpoint()  # a pending cancel wins: cancelled, and cleanup is never reached
        handle.update_timeline("apply", "failed", str(exc), resource=exc.ref.as_json())
        if fresh and isinstance(exc, TemplateApplyError):
            _delete_partial(handle, ctx, exc)
        handle.fail(exc.reason, f"instantiating {template.name} failed at {exc.ref.label()}: {exc}")
        return
    by_ref = {(m.get("kind"), (m.get("metadata") or {}).get("name")): m for m in manifests}
    # Nothing reaches the cluster after this: the apply's end is held for verify's first look.
    handle.hold(
        [handle.step("apply", "done", f"{resources(len(applied))} applied")],
        artifacts={
            "appliedResources": [
                direct.with_endpoint(
                    r.as_json(), by_ref.get((r.ref.kind, r.ref.name), {}), ctx.target_namespace
                )
                for r in applied
            ]
        },
    )

    direct.verify(handle, ctx, manifests)


def _inputs(handle: TaskHandle, ctx: RunContext, template: Template) -> dict | None:
    """The typed input values, or None when the task was parked blocked or failed."""
    persisted = dict(ctx.source.get(ARGS) or {})
    recorded = set(ctx.sensitive_keys)
    # Authoritative re-scrub: the declarations (and the shared predicate) decide what is secret,
    # whatever create knew when it stripped the source.
    leaked = {
        k: v
        for k, v in persisted.items()
        if k in template.sensitive_names or secrets.is_sensitive(k, declared=recorded)
    }
    memory = {**leaked, **ctx.inputs}
    sensitive_given = {
        k: v for k, v in memory.items() if k in template.sensitive_names or k in leaked
    }
    handle.add_secret_values([str(v) for v in sensitive_given.values()])
    unrecorded = set(sensitive_given) - recorded
    if leaked or unrecorded:
        # Names only: clones must re-ask them; their values stay in this run's memory.
        handle.strip_source_keys(ARGS, sorted(set(leaked) | unrecorded))
        handle.emit_event(
            "secrets_rescrubbed",
            {"stripped": sorted(leaked), "recorded": sorted(unrecorded - set(leaked))},
        )
        recorded |= set(sensitive_given)
    plain = {k: v for k, v in persisted.items() if k not in leaked}
    ignored = sorted((set(plain) | set(memory)) - template.input_names)
    try:
        values, missing = template.resolve({**plain, **memory})
    except InvalidInputs as exc:
        handle.update_timeline("inputs", "failed", str(exc))
        handle.fail(exc.reason, f"invalid inputs for {template.name}: {exc}")
        return None
    unanswered = {d.name for d in missing} | {
        name for name in recorded & template.sensitive_names if name not in memory
    }
    if unanswered:
        handle.update_timeline("inputs", "blocked", ", ".join(sorted(unanswered)))
        # Every declaration (the form re-asks every sensitive input and prefills the others from
        # their declared defaults), marking the ones this run could not answer.
        handle.request_inputs(
            [{**d.as_json(), "missing": d.name in unanswered} for d in template.inputs],
            message=f"{template.name} needs: {', '.join(sorted(unanswered))}",
        )
        return None
    detail = f"ignored undeclared inputs: {', '.join(ignored)}" if ignored else None
    handle.update_timeline("inputs", "done", detail)
    return values


def _delete_partial(handle: TaskHandle, ctx: RunContext, exc: TemplateApplyError) -> None:
    """Delete what the failed instantiation applied, newest first (already gone counts as done)."""
    handle.update_timeline("cleanup", "started", f"{resources(len(exc.applied))} to delete")
    deleted, kept = [], []
    for resource in reversed(exc.applied):
        try:
            ctx.cluster.delete(resource.ref, abort=handle.abort)
        except NotFound:
            pass
        except IntegrationError as error:
            kept.append(resource.as_json())
            handle.update_timeline(
                "cleanup",
                "failed",
                f"{resource.ref.label()}: {error}",
                resource=resource.ref.as_json(),
            )
            continue
        deleted.append(resource.ref.as_json())
    handle.set_artifacts(appliedResources=kept, cleanup={"deleted": deleted})
    handle.update_timeline("cleanup", "done", f"{len(deleted)} deleted")
