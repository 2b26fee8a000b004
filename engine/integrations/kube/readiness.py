"""Readiness rules, kind by kind, read off objects as the Kubernetes API returns them.

Pure functions of the object: the adapter (cluster.py) fetches, these decide. A Service is the one
kind that needs a second read (its EndpointSlices); its two halves are here too. Every field is
read by type (engine/integrations/shapes.py): an object of a shape the API never sends raises
UpstreamAnswerMalformed, which the run waits out like any failed read.
"""

from engine.integrations.base import Readiness
from engine.integrations.shapes import entries, field

#: Kinds whose readiness is their own Ready condition (absent means not ready yet).
READY_CONDITION_KINDS = frozenset({"TemplateInstance"})


def object_readiness(kind: str, obj: dict) -> Readiness:
    """Whether an object of `kind` (not a Service) is ready, by its kind's rule."""
    check = _READINESS_BY_KIND.get(kind)
    if check is not None:
        return check(obj)
    return _condition_readiness(obj, required=kind in READY_CONDITION_KINDS)


def service_readiness_by_spec(service: dict) -> Readiness | None:
    """A Service whose spec alone says it is ready (no endpoints of ours to wait for); else None."""
    if field(service, "spec.type", str) == "ExternalName":
        return Readiness(True, "ExternalName service")
    if field(service, "spec.clusterIP", str) == "None":
        return Readiness(True, "headless service")
    if not field(service, "spec.selector", dict):
        return Readiness(True, "no selector: endpoints are managed outside the cluster")
    return None


def endpoint_slices_readiness(slices: dict) -> Readiness:
    """A Service is ready once one of its EndpointSlices (an EndpointSliceList) has a ready
    endpoint with an address."""
    ready = sum(
        1
        for item in entries(slices, "items")
        for endpoint in entries(item, "endpoints")
        if entries(endpoint, "addresses", str)
        and field(endpoint, "conditions.ready", bool) is not False
    )
    if ready:
        return Readiness(True, f"{ready} ready endpoint{'s' if ready != 1 else ''}")
    return Readiness(False, "no ready endpoints")


def _generation_pending(obj: dict) -> str | None:
    generation = field(obj, "metadata.generation", int)
    observed = field(obj, "status.observedGeneration", int, default=0)
    if generation and observed < generation:
        return f"waiting for the controller to observe generation {generation}"
    return None


def _conditions(obj: dict) -> dict:
    return {field(c, "type", str): c for c in entries(obj, "status.conditions")}


def _deployment_readiness(obj: dict) -> Readiness:
    desired = field(obj, "spec.replicas", int, default=1)
    pending = _generation_pending(obj)
    if pending:
        return Readiness(False, pending)
    progressing = _conditions(obj).get("Progressing") or {}
    if field(progressing, "reason", str) == "ProgressDeadlineExceeded":
        return Readiness(False, f"progress deadline exceeded: {field(progressing, 'message', str)}")
    updated = field(obj, "status.updatedReplicas", int, default=0)
    available = field(obj, "status.availableReplicas", int, default=0)
    if updated < desired:
        return Readiness(False, f"{updated}/{desired} replicas updated")
    if available < desired:
        return Readiness(False, f"{available}/{desired} replicas available")
    return Readiness(True, f"{available}/{desired} replicas available")


def _statefulset_readiness(obj: dict) -> Readiness:
    desired = field(obj, "spec.replicas", int, default=1)
    pending = _generation_pending(obj)
    if pending:
        return Readiness(False, pending)
    # Before availableReplicas (Kubernetes 1.22), readyReplicas said it.
    ready = field(obj, "status.readyReplicas", int, default=0)
    available = field(obj, "status.availableReplicas", int, default=ready)
    if available < desired:
        return Readiness(False, f"{available}/{desired} replicas available")
    return Readiness(True, f"{available}/{desired} replicas available")


def _job_readiness(obj: dict) -> Readiness:
    conditions = _conditions(obj)
    if field(conditions.get("Complete"), "status", str) == "True":
        return Readiness(True, "complete")
    failed = conditions.get("Failed") or {}
    if field(failed, "status", str) == "True":
        said = field(failed, "message", str) or field(failed, "reason", str)
        return Readiness(False, f"failed: {said}")
    succeeded = field(obj, "status.succeeded", int, default=0)
    completions = field(obj, "spec.completions", int, default=1)
    return Readiness(False, f"running: {succeeded}/{completions} succeeded")


def _condition_readiness(obj: dict, *, required: bool) -> Readiness:
    """An object's own Ready condition when it has one (required for some kinds), else exists."""
    ready = _conditions(obj).get("Ready")
    if ready is None:
        return (
            Readiness(False, "waiting for the Ready condition")
            if required
            else Readiness(True, "exists")
        )
    detail = field(ready, "message", str) or field(ready, "reason", str)
    status = field(ready, "status", str)
    if status == "True":
        return Readiness(True, detail or "Ready")
    return Readiness(False, f"Ready={status or None}" + (f": {detail}" if detail else ""))


_READINESS_BY_KIND = {
    "Deployment": _deployment_readiness,
    "StatefulSet": _statefulset_readiness,
    "Job": _job_readiness,
}
