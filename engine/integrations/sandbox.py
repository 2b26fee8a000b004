"""The sandbox: a local stand-in for a cluster, the zero-setup default (labelled "sandbox").

Objects live in this process's memory. Behaviour is configurable (README "Sandbox"):
SANDBOX_APPLY_DELAY_S, SANDBOX_READY_DELAY_S, SANDBOX_NEVER_READY, SANDBOX_APPLY_ERROR (a kind,
or "all"). An image or name containing one of these markers simulates it for one deployment:
`sandbox-never-ready`, `sandbox-apply-error`, `sandbox-slow` (apply takes 10x longer).
"""
import time
from dataclasses import dataclass

from engine.abort import AbortSignal
from engine.integrations.base import ApplyError, AppliedResource, Readiness, ResourceRef

KNOWN_KINDS = {"Deployment", "StatefulSet", "Service", "Secret", "ConfigMap", "Job",
               "PersistentVolumeClaim", "Ingress", "Namespace", "TemplateInstance"}


@dataclass
class _Stored:
    manifest: dict
    ready_at: float | None  # None: never


class SandboxCluster:
    """In-memory objects with simulated apply latency, readiness delay and failures."""

    label = "sandbox"

    def __init__(self, *, apply_delay_s: float, ready_delay_s: float, never_ready: bool,
                 apply_error: str):
        self.apply_delay_s = apply_delay_s
        self.ready_delay_s = ready_delay_s
        self.never_ready = never_ready
        self.apply_error = apply_error
        self.objects: dict[ResourceRef, _Stored] = {}

    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        ref = ResourceRef.of(manifest)
        text = repr(manifest)
        delay = self.apply_delay_s * (10 if "sandbox-slow" in text else 1)
        abort.sleep(delay)
        if ref.kind not in KNOWN_KINDS:
            raise ApplyError(f"the sandbox does not serve kind {ref.kind}", ref)
        if self.apply_error in (ref.kind, "all") or "sandbox-apply-error" in text:
            raise ApplyError(f"sandbox: simulated apply error for {ref.label()}", ref)
        never = self.never_ready or "sandbox-never-ready" in text
        existed = ref in self.objects
        self.objects[ref] = _Stored(manifest, None if never else time.monotonic() + self.ready_delay_s)
        return AppliedResource(ref, "configured" if existed else "created")

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        abort.raise_if_aborted()
        stored = self.objects.get(ref)
        if stored is None:
            return Readiness(False, "not found")
        if stored.ready_at is None or time.monotonic() < stored.ready_at:
            return Readiness(False, "waiting for available replicas")
        return Readiness(True, "ready")


class SandboxBackend:
    """One sandbox cluster per process, shared by every task the process runs."""

    label = "sandbox"

    def __init__(self, settings):
        self.cluster_instance = SandboxCluster(
            apply_delay_s=settings.sandbox_apply_delay_s,
            ready_delay_s=settings.sandbox_ready_delay_s,
            never_ready=settings.sandbox_never_ready,
            apply_error=settings.sandbox_apply_error,
        )

    def cluster(self, kubeconfig: dict | None) -> SandboxCluster:
        return self.cluster_instance
