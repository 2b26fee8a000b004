"""The sandbox: a local stand-in for a cluster, the zero-setup default (labelled "sandbox").

Objects live in this process's memory. Behaviour is configurable (docs/configuration.md "Sandbox"):
SANDBOX_APPLY_DELAY_S, SANDBOX_READY_DELAY_S, SANDBOX_NEVER_READY, SANDBOX_APPLY_ERROR (a kind,
or "all"). An image or name containing one of these markers simulates it for one deployment:
`sandbox-never-ready`, `sandbox-apply-error`, `sandbox-slow` (apply takes 10x longer), each
refusal of APPLY_TROUBLE (the cluster unreachable, credentials refused, ...) and each reason a
workload is not ready of POD_TROUBLE (its pods, events and log lines shaped as the Kubernetes API
returns them, so the same diagnosis reads them as on a real cluster).
"""

import time
from dataclasses import dataclass

from engine.abort import AbortSignal
from engine.integrations.base import (
    AdmissionDenied,
    AppliedResource,
    ApplyError,
    ClusterUnreachable,
    CredentialsRefused,
    Forbidden,
    InvalidManifest,
    NamespaceMissing,
    NotFound,
    OwnershipConflict,
    Readiness,
    ResourceRef,
)
from engine.integrations.kube import diagnosis as why

KNOWN_KINDS = {
    "Deployment",
    "StatefulSet",
    "Service",
    "Secret",
    "ConfigMap",
    "Job",
    "PersistentVolumeClaim",
    "Ingress",
    "Namespace",
    "TemplateInstance",
}


#: Marker -> the refusal an apply of a document containing it raises (ref: the document).
APPLY_TROUBLE = {
    "sandbox-unreachable": lambda ref: ClusterUnreachable(
        "cannot reach the cluster at sandbox:6443: the connection was refused (5 attempts)"
    ),
    "sandbox-unauthorized": lambda ref: CredentialsRefused(
        "the cluster does not accept the kubeconfig's credentials (token or client "
        "certificate): Unauthorized (HTTP 401)",
        ref,
    ),
    "sandbox-forbidden": lambda ref: Forbidden(
        f"the credential may not patch {ref.kind.lower()}s in namespace {ref.namespace}: "
        f'User "sandbox" cannot patch resource "{ref.kind.lower()}s" in the namespace '
        f'"{ref.namespace}" (HTTP 403)',
        verb="patch",
        resource=f"{ref.kind.lower()}s",
        namespace=ref.namespace,
    ),
    "sandbox-namespace-missing": lambda ref: NamespaceMissing(
        f'namespace {ref.namespace} does not exist: namespaces "{ref.namespace}" not found '
        "(HTTP 404)",
        ref,
    ),
    "sandbox-conflict": lambda ref: OwnershipConflict(
        "the object exists and is held by another owner or manager: Apply failed with 1 "
        'conflict: conflict with "helm" using apps/v1: .spec.replicas (HTTP 409)',
        ref,
    ),
    "sandbox-invalid-manifest": lambda ref: InvalidManifest(
        "the cluster rejects it as invalid (field spec.template.spec.containers[0].ports[0]"
        f'.containerPort): {ref.kind}.apps "{ref.name}" is invalid: spec.template.spec.'
        "containers[0].ports[0].containerPort: Invalid value: 0: must be between 1 and 65535 "
        "(HTTP 422)",
        ("spec.template.spec.containers[0].ports[0].containerPort",),
    ),
    "sandbox-admission-denied": lambda ref: AdmissionDenied(
        'denied by the cluster\'s admission control: admission webhook "validate.kyverno.svc" '
        f"denied the request: resource {ref.kind}/{ref.namespace}/{ref.name} was blocked: "
        "images must come from registry.example.com (HTTP 400)"
    ),
}
#: Markers of a workload that never becomes ready, and why (kube/diagnosis.py's cause codes).
POD_TROUBLE = {
    "sandbox-image-not-found": why.IMAGE_NOT_FOUND,
    "sandbox-invalid-image": why.INVALID_IMAGE_NAME,
    "sandbox-config-error": why.CONTAINER_CONFIG_ERROR,
    "sandbox-crash-loop": why.CRASH_LOOP,
    "sandbox-oom": why.OOM_KILLED,
    "sandbox-unschedulable": why.UNSCHEDULABLE,
    "sandbox-unbound-volume": why.VOLUME_UNBOUND,
    "sandbox-probe-failing": why.READINESS_PROBE_FAILED,
}
#: A workload marked with this one has pods the credential may not read.
NO_POD_ACCESS = "sandbox-no-pod-access"
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}


@dataclass
class _Stored:
    manifest: dict
    ready_at: float | None  # None: never
    #: A cause of POD_TROUBLE its pods show, if any.
    trouble: str | None = None


class SandboxCluster:
    """In-memory objects with simulated apply latency, readiness delay and failures."""

    label = "sandbox"

    def __init__(
        self, *, apply_delay_s: float, ready_delay_s: float, never_ready: bool, apply_error: str
    ):
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
        for marker, refusal in APPLY_TROUBLE.items():
            if marker in text:
                raise refusal(ref)
        trouble = next((cause for marker, cause in POD_TROUBLE.items() if marker in text), None)
        never = self.never_ready or "sandbox-never-ready" in text or trouble is not None
        existed = ref in self.objects
        self.objects[ref] = _Stored(
            manifest, None if never else time.monotonic() + self.ready_delay_s, trouble
        )
        return AppliedResource(ref, "configured" if existed else "created")

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        abort.raise_if_aborted()
        if self.objects.pop(ref, None) is None:
            raise NotFound(f"sandbox: {ref.label()} does not exist")

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        abort.raise_if_aborted()
        stored = self.objects.get(ref)
        if stored is None:
            return Readiness(False, "not found")
        if stored.ready_at is None or time.monotonic() < stored.ready_at:
            return Readiness(False, "waiting for available replicas")
        return Readiness(True, "ready")

    # -- why not ready: pods, events and logs as the API would answer ---------------------------
    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        abort.raise_if_aborted()
        pods = []
        for ref, stored in list(self.objects.items()):
            if ref.kind not in WORKLOAD_KINDS or ref.namespace != namespace:
                continue
            labels = _pod_labels(stored.manifest)
            if not selector or any(labels.get(k) != v for k, v in selector.items()):
                continue
            if NO_POD_ACCESS in repr(stored.manifest):
                raise Forbidden(
                    f'pods is forbidden: User "sandbox" cannot list resource "pods" in the '
                    f'namespace "{namespace}" (HTTP 403)',
                    verb="list",
                    resource="pods",
                    namespace=namespace,
                )
            ready = stored.ready_at is not None and time.monotonic() >= stored.ready_at
            pods.append(_pod(ref, stored, ready))
        return pods

    def events(self, namespace: str, involved: str, *, abort: AbortSignal) -> list[dict]:
        abort.raise_if_aborted()
        for ref, stored in self.objects.items():
            if ref.namespace == namespace and _pod_name(ref) == involved:
                return _events(involved, stored)
        return []

    def log_tail(
        self, namespace: str, pod: str, container: str, *, lines: int, abort: AbortSignal
    ) -> str:
        abort.raise_if_aborted()
        for ref, stored in self.objects.items():
            if ref.namespace == namespace and _pod_name(ref) == pod:
                return why.log_tail(self._crash_log(stored), lines)
        return ""

    def _crash_log(self, stored: _Stored) -> str:
        """What a crashing app prints: its configuration (secrets included, as careless apps
        do: the runner must scrub them), then the error it dies of."""
        container = _container(stored.manifest)
        lines = ["starting up"]
        for env in container.get("env") or []:
            value = env.get("value")
            secret = (env.get("valueFrom") or {}).get("secretKeyRef")
            if secret:
                value = self._secret_value(stored.manifest, secret)
            lines.append(f"config {env.get('name')}={value}")
        if stored.trouble == why.OOM_KILLED:
            lines.append("allocating cache: 512Mi")
        else:
            lines.append("Error: cannot connect to database at db:5432: connection refused")
        return "\n".join(lines)

    def _secret_value(self, manifest: dict, ref: dict):
        namespace = (manifest.get("metadata") or {}).get("namespace")
        stored = self.objects.get(ResourceRef("v1", "Secret", ref.get("name"), namespace))
        data = (stored.manifest.get("stringData") or {}) if stored else {}
        return data.get(ref.get("key"))


def _container(manifest: dict) -> dict:
    spec = ((manifest.get("spec") or {}).get("template") or {}).get("spec") or {}
    containers = spec.get("containers") or [{}]
    return containers[0] if isinstance(containers[0], dict) else {}


def _pod_labels(manifest: dict) -> dict:
    template = (manifest.get("spec") or {}).get("template") or {}
    labels = dict((template.get("metadata") or {}).get("labels") or {})
    if manifest.get("kind") == "Job":
        labels["job-name"] = (manifest.get("metadata") or {}).get("name")
    return labels


def _pod_name(ref: ResourceRef) -> str:
    return f"{ref.name}-7c9f5"


def _pod(ref: ResourceRef, stored: _Stored, ready: bool) -> dict:
    """One pod of a workload, its status shaped by the workload's trouble."""
    container = _container(stored.manifest)
    name, image = container.get("name") or ref.name, container.get("image") or ""
    state: dict = {"running": {"startedAt": "2026-12-01T00:00:00Z"}}
    last: dict = {}
    restarts = 0
    scheduled = {"type": "PodScheduled", "status": "True"}
    phase = "Running"
    trouble = stored.trouble
    if trouble in (why.IMAGE_NOT_FOUND,):
        state = {
            "waiting": {
                "reason": "ImagePullBackOff",
                "message": f'Back-off pulling image "{image}"',
            }
        }
        phase = "Pending"
    elif trouble == why.INVALID_IMAGE_NAME:
        state = {
            "waiting": {
                "reason": "InvalidImageName",
                "message": f'Failed to apply default image tag "{image}": couldn\'t parse image '
                "name: invalid reference format",
            }
        }
        phase = "Pending"
    elif trouble == why.CONTAINER_CONFIG_ERROR:
        state = {
            "waiting": {
                "reason": "CreateContainerConfigError",
                "message": f'secret "{ref.name}-config" not found',
            }
        }
        phase = "Pending"
    elif trouble in (why.CRASH_LOOP, why.OOM_KILLED):
        restarts = 4
        state = {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 1m20s"}}
        oom = trouble == why.OOM_KILLED
        last = {
            "terminated": {"exitCode": 137 if oom else 1, "reason": "OOMKilled" if oom else "Error"}
        }
    elif trouble in (why.UNSCHEDULABLE, why.VOLUME_UNBOUND):
        state = {"waiting": {"reason": "ContainerCreating"}}
        phase = "Pending"
        message = (
            "0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."
            if trouble == why.VOLUME_UNBOUND
            else "0/3 nodes are available: 3 Insufficient cpu."
        )
        scheduled = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": message,
        }
    conditions = [scheduled, {"type": "Ready", "status": "True" if ready else "False"}]
    return {
        "metadata": {
            "name": _pod_name(ref),
            "namespace": ref.namespace,
            "labels": _pod_labels(stored.manifest),
        },
        "spec": {"containers": [{"name": name, "image": image}]},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": name,
                    "image": image,
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": last,
                }
            ],
        },
    }


def _events(pod: str, stored: _Stored) -> list[dict]:
    image = _container(stored.manifest).get("image") or ""
    said = {
        why.IMAGE_NOT_FOUND: (
            "Failed",
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = failed to pull '
            f'and unpack image "docker.io/library/{image}": not found',
        ),
        why.READINESS_PROBE_FAILED: (
            "Unhealthy",
            "Readiness probe failed: HTTP probe failed with statuscode: 503",
        ),
    }.get(stored.trouble)
    if said is None:
        return []
    reason, message = said
    return [
        {
            "involvedObject": {"kind": "Pod", "name": pod},
            "reason": reason,
            "message": message,
            "type": "Warning",
            "lastTimestamp": "2026-12-01T00:00:05Z",
        }
    ]


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
