"""Readiness rules, kind by kind, read off objects as the Kubernetes API returns them.

Pure functions of the object: the adapter (kube.py) fetches, these decide. A Service is the one
kind that needs a second read (its EndpointSlices); its two halves are here too.
"""

from engine.integrations.base import Readiness

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
    spec = service.get("spec") or {}
    if spec.get("type") == "ExternalName":
        return Readiness(True, "ExternalName service")
    if spec.get("clusterIP") == "None":
        return Readiness(True, "headless service")
    if not spec.get("selector"):
        return Readiness(True, "no selector: endpoints are managed outside the cluster")
    return None


def endpoint_slices_readiness(slices: dict) -> Readiness:
    """A Service is ready once one of its EndpointSlices (an EndpointSliceList) has a ready
    endpoint with an address."""
    ready = sum(
        1
        for item in slices.get("items") or []
        for endpoint in item.get("endpoints") or []
        if endpoint.get("addresses")
        and (endpoint.get("conditions") or {}).get("ready") is not False
    )
    if ready:
        return Readiness(True, f"{ready} ready endpoint{'s' if ready != 1 else ''}")
    return Readiness(False, "no ready endpoints")


def _generation_pending(obj: dict) -> str | None:
    generation = (obj.get("metadata") or {}).get("generation")
    observed = (obj.get("status") or {}).get("observedGeneration") or 0
    if generation and observed < generation:
        return f"waiting for the controller to observe generation {generation}"
    return None


def _conditions(obj: dict) -> dict:
    return {
        c.get("type"): c
        for c in (obj.get("status") or {}).get("conditions") or []
        if isinstance(c, dict)
    }


def _deployment_readiness(obj: dict) -> Readiness:
    desired = (obj.get("spec") or {}).get("replicas", 1)
    status = obj.get("status") or {}
    pending = _generation_pending(obj)
    if pending:
        return Readiness(False, pending)
    progressing = _conditions(obj).get("Progressing") or {}
    if progressing.get("reason") == "ProgressDeadlineExceeded":
        return Readiness(False, f"progress deadline exceeded: {progressing.get('message', '')}")
    updated = status.get("updatedReplicas") or 0
    available = status.get("availableReplicas") or 0
    if updated < desired:
        return Readiness(False, f"{updated}/{desired} replicas updated")
    if available < desired:
        return Readiness(False, f"{available}/{desired} replicas available")
    return Readiness(True, f"{available}/{desired} replicas available")


def _statefulset_readiness(obj: dict) -> Readiness:
    desired = (obj.get("spec") or {}).get("replicas", 1)
    status = obj.get("status") or {}
    pending = _generation_pending(obj)
    if pending:
        return Readiness(False, pending)
    available = status.get("availableReplicas", status.get("readyReplicas")) or 0
    if available < desired:
        return Readiness(False, f"{available}/{desired} replicas available")
    return Readiness(True, f"{available}/{desired} replicas available")


def _job_readiness(obj: dict) -> Readiness:
    conditions = _conditions(obj)
    if (conditions.get("Complete") or {}).get("status") == "True":
        return Readiness(True, "complete")
    failed = conditions.get("Failed") or {}
    if failed.get("status") == "True":
        return Readiness(False, f"failed: {failed.get('message') or failed.get('reason', '')}")
    succeeded = (obj.get("status") or {}).get("succeeded") or 0
    completions = (obj.get("spec") or {}).get("completions", 1)
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
    detail = ready.get("message") or ready.get("reason") or ""
    if ready.get("status") == "True":
        return Readiness(True, detail or "Ready")
    return Readiness(False, f"Ready={ready.get('status')}" + (f": {detail}" if detail else ""))


_READINESS_BY_KIND = {
    "Deployment": _deployment_readiness,
    "StatefulSet": _statefulset_readiness,
    "Job": _job_readiness,
}
