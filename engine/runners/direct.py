"""The direct runner: render manifests for an image source, apply them one by one, verify."""

import time

from engine.core.status import Status
from engine.integrations.base import (
    ENGINE_NAME,
    ApplyError,
    ClusterUnavailable,
    ClusterUnreachable,
    IntegrationError,
    ResourceRef,
    UpstreamAnswerTooLarge,
)
from engine.integrations.shapes import UpstreamAnswerMalformed, optional
from engine.runners.context import RunContext, TaskHandle, resources
from engine.runners.diagnosis import Diagnosis

FIELD_MANAGER = ENGINE_NAME
#: The steps of a run, in order: the "n" of the timeline's "step k of n" (a run parked for
#: secrets, or one that fails, may show fewer or others).
STEPS = ("render", "apply", "verify")


def run(handle: TaskHandle, ctx: RunContext) -> None:
    """The image source: ask again for recorded secrets this run lacks, then render, apply and
    verify."""
    if not blocked_on_recorded_secrets(handle, ctx):
        apply_and_verify(handle, ctx, render)


def blocked_on_recorded_secrets(handle: TaskHandle, ctx: RunContext) -> bool:
    """Park the task blocked when a secret recorded on it (a redeploy's, or one submitted before)
    has no value in this run's memory: never deploy without it, never invent it. True if parked."""
    missing = [k for k in ctx.sensitive_keys if k not in ctx.inputs]
    if not missing:
        return False
    handle.update_timeline("inputs", "blocked", f"waiting for {', '.join(missing)}")
    handle.request_inputs(
        [
            {
                "name": k,
                "type": "string",
                "default": None,
                "required": True,
                "sensitive": True,
                "missing": True,
            }
            for k in missing
        ],
        message=f"secret values are needed again: {', '.join(missing)}",
    )
    return True


def endpoint(manifest: dict, namespace: str | None) -> str | None:
    """Where a Service or Ingress answers, read off its manifest (what the canvas card shows).

    A model writes these manifests: a field of another type is read as absent."""
    name = optional(manifest, "metadata.name", str)
    if manifest.get("kind") == "Service":
        ports = [optional(p, "port", int) for p in optional(manifest, "spec.ports", list)]
        ns = optional(manifest, "metadata.namespace", str) or namespace
        host = f"{name}.{ns}.svc" if ns else name
        return f"{host}:{ports[0]}" if ports and ports[0] else host
    if manifest.get("kind") == "Ingress":
        for rule in optional(manifest, "spec.rules", list):
            host = optional(rule, "host", str)
            if host:
                scheme = "https" if optional(manifest, "spec.tls", list) else "http"
                paths = optional(rule, "http.paths", list) or [{}]
                return f"{scheme}://{host}{optional(paths[0], 'path', str) or '/'}"
    return None


def with_endpoint(applied: dict, manifest: dict, namespace: str | None) -> dict:
    found = endpoint(manifest, namespace)
    return {**applied, "endpoint": found} if found else applied


def apply_and_verify(handle: TaskHandle, ctx: RunContext, render_manifests) -> None:
    """Render with `render_manifests(ctx)`, apply document by document, then wait for
    readiness. Each fenced write doubles as a checkpoint (a pending cancel raises Aborted from it),
    so the write that begins each apply is what stops a cancelled run before the cluster.

    Rendering is in memory: its steps, the plan, the move to applying and the first apply's
    start are one statement, before anything reaches the cluster."""
    manifests = render_manifests(ctx)
    refs = [ResourceRef.of(m) for m in manifests]
    steps = [handle.step("render", "started"), handle.step("render", "done", resources(len(refs)))]
    if refs:
        steps.append(handle.step("apply", "started", refs[0].label(), resource=refs[0].as_json()))
    handle.set_state(
        status=Status.APPLYING,
        phase="apply",
        steps=steps,
        artifacts={"plannedResources": [r.as_json() for r in refs], "appliedResources": []},
    )
    applied: list[dict] = []
    for i, (manifest, ref) in enumerate(zip(manifests, refs, strict=True)):
        try:
            result = ctx.cluster.apply(manifest, abort=handle.abort)
        except IntegrationError as exc:
            # Typed by the adapter: the reason says whose fault it is (the document, the
            # credential, the cluster, the network), so the user is sent to the right fix.
            handle.update_timeline("apply", "failed", str(exc), resource=ref.as_json())
            handle.fail(exc.reason, f"applying {ref.label()} failed: {exc}")
            return
        applied.append(with_endpoint(result.as_json(), manifest, ctx.target_namespace))
        done = handle.step(
            "apply", "done", f"{ref.label()} {result.action}", resource=result.as_json()
        )
        if i + 1 < len(refs):
            # One write ends this apply and begins the next; a pending cancel raises from it,
            # before the next cluster call.
            following = refs[i + 1]
            begun = handle.step("apply", "started", following.label(), resource=following.as_json())
            handle.record_steps([done, begun], artifacts={"appliedResources": applied})
        else:
            # Nothing reaches the cluster after the last apply: its end is held for the first
            # readiness look, whose outcome records it (verify).
            handle.hold([done], artifacts={"appliedResources": applied})
    verify(handle, ctx, manifests)


def verify(handle: TaskHandle, ctx: RunContext, manifests: list[dict]) -> None:
    """Wait for every required result resource: completed when all are ready; failed, with the
    resources kept (ADR 0028), on the readiness timeout or at once on a cause waiting cannot heal
    (ctx.fail_fast_causes). While it waits it says why the workloads are not ready yet.

    "verify started" is held with whatever the caller held (the end of its last apply) for the
    first look: ready at once, the completion records them all in one statement; otherwise they
    are written before the wait (TaskHandle.hold)."""
    handle.hold([handle.step("verify", "started")], phase="verify")
    required = [ResourceRef.of(m) for m in manifests if m["kind"] in REQUIRED_KINDS]
    diagnosis = Diagnosis(handle, ctx, manifests)
    deadline = time.monotonic() + ctx.readiness_timeout_s
    while True:
        try:
            waiting = [
                ref for ref in required if not ctx.cluster.readiness(ref, abort=handle.abort).ready
            ]
        except (ApplyError, UpstreamAnswerTooLarge) as exc:
            # The cluster answered and refused the read (401, 403), or answered more than it
            # may: waiting will not change it.
            handle.update_timeline("verify", "failed", str(exc))
            handle.fail(exc.reason, f"checking readiness failed: {exc}; resources were kept")
            return
        except IntegrationError as exc:
            waiting, last_error = required, exc
        else:
            last_error = None
        if not waiting:
            break
        handle.flush()  # not ready at the first look: what was held is written before the wait
        findings = diagnosis.look(waiting)
        hopeless = [f for f in findings if f.cause in ctx.fail_fast_causes]
        if hopeless:
            names = ", ".join(ref.label() for ref in waiting)
            detail = f"{names} cannot become ready: {hopeless[0].line()}"
            handle.update_timeline("verify", "failed", detail)
            handle.fail(hopeless[0].cause, detail + "; resources were kept")
            return
        if time.monotonic() >= deadline:
            names = ", ".join(ref.label() for ref in waiting)
            detail = f"not ready after {ctx.readiness_timeout_s:g}s: {names}"
            reason = "readiness_timeout"
            if findings:
                detail += f": {findings[0].line()}"
                reason = findings[0].cause
            elif last_error is not None:
                detail += f" ({last_error})"
                reason = last_error.reason if _names_the_cluster(last_error) else reason
            handle.update_timeline("verify", "failed", detail)
            handle.fail(reason, detail + "; resources were kept")
            return
        handle.abort.sleep(ctx.readiness_poll_s)
        handle.checkpoint()
    handle.complete(steps=[handle.step("verify", "done", "all required resources ready")])


def _names_the_cluster(error: IntegrationError) -> bool:
    """An error that is the cluster's or the network's, whose own reason is the better cause."""
    return isinstance(error, (ClusterUnreachable, ClusterUnavailable, UpstreamAnswerMalformed))


#: The result resources whose readiness decides `completed` (ADR 0028).
REQUIRED_KINDS = {"Deployment", "StatefulSet", "Job"}


def render(ctx: RunContext) -> list[dict]:
    """A Deployment (and a Service when a port is given) for an image source."""
    source = ctx.source
    name = source["name"]
    labels = {"app.kubernetes.io/name": name, "app.kubernetes.io/managed-by": FIELD_MANAGER}
    container = {"name": name, "image": source["image"]}
    env = [{"name": k, "value": str(v)} for k, v in sorted((source.get("env") or {}).items())]
    secret_env = {k: v for k, v in ctx.inputs.items() if k in set(ctx.sensitive_keys)}
    manifests = []
    if secret_env:
        secret_name = f"{name}-env"
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {
                    "name": secret_name,
                    "namespace": ctx.target_namespace,
                    "labels": labels,
                },
                "type": "Opaque",
                "stringData": secret_env,
            }
        )
        env += [
            {"name": k, "valueFrom": {"secretKeyRef": {"name": secret_name, "key": k}}}
            for k in sorted(secret_env)
        ]
    if env:
        container["env"] = env
    if source.get("port"):
        container["ports"] = [{"containerPort": source["port"]}]
    manifests.append(
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": ctx.target_namespace, "labels": labels},
            "spec": {
                "replicas": source.get("replicas", 1),
                "selector": {"matchLabels": {"app.kubernetes.io/name": name}},
                "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
            },
        }
    )
    if source.get("port"):
        manifests.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name, "namespace": ctx.target_namespace, "labels": labels},
                "spec": {
                    "selector": {"app.kubernetes.io/name": name},
                    "ports": [{"port": source["port"], "targetPort": source["port"]}],
                },
            }
        )
    return manifests
