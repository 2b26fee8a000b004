"""Why a workload is not ready, read off its pods and their events as the Kubernetes API returns
them (what `kubectl describe pod` shows a user, reduced to the cause and its own words).

Pure functions of the objects: the adapter (or the sandbox) reads, these decide, the runner says.
Each cause is a stable code the failure carries as its reason. Every field is optional here: one
of another type is read as absent (shapes.optional), so a hostile pod only says less.
"""

from dataclasses import dataclass

from engine.integrations.base import upstream_text
from engine.integrations.shapes import optional

IMAGE_NOT_FOUND = "image_not_found"
INVALID_IMAGE_NAME = "invalid_image_name"
CONTAINER_CONFIG_ERROR = "container_config_error"
IMAGE_PULL_FAILED = "image_pull_failed"
OOM_KILLED = "oom_killed"
CRASH_LOOP = "crash_loop"
UNSCHEDULABLE = "unschedulable"
VOLUME_UNBOUND = "volume_unbound"
READINESS_PROBE_FAILED = "readiness_probe_failed"

#: Every cause, the one most worth naming first (when several pods disagree) first.
CAUSES = (
    IMAGE_NOT_FOUND,
    INVALID_IMAGE_NAME,
    CONTAINER_CONFIG_ERROR,
    IMAGE_PULL_FAILED,
    OOM_KILLED,
    CRASH_LOOP,
    UNSCHEDULABLE,
    VOLUME_UNBOUND,
    READINESS_PROBE_FAILED,
)
#: Causes that waiting cannot heal (the READINESS_FAIL_FAST setting's default).
FAIL_FAST_DEFAULT = (IMAGE_NOT_FOUND, INVALID_IMAGE_NAME, CONTAINER_CONFIG_ERROR)

MESSAGE_MAX_CHARS = 300
#: Registry answers that mean the image (or its tag) does not exist.
_NOT_FOUND_MARKS = ("not found", "manifest unknown", "does not exist", "no such image")
_PULL_WAITING = {"ErrImagePull", "ImagePullBackOff"}
_CONFIG_WAITING = {"CreateContainerConfigError", "CreateContainerError", "RunContainerError"}


@dataclass(frozen=True)
class Finding:
    """One reason a pod is not ready: its cause code and the words a user acts on."""

    cause: str
    pod: str
    message: str
    #: The container whose log explains it (a crash), else None.
    container: str | None = None
    #: Restarts so far: a new crash is a new finding.
    restarts: int = 0

    def line(self) -> str:
        """What the timeline shows: "web-7c9f: back-off pulling image nginx:1.99: not found"."""
        return f"{self.pod}: {self.message}"


def diagnose(pods: list[dict], events: dict[str, list[dict]]) -> list[Finding]:
    """The findings about `pods` (and `events`: pod name -> its events), strongest cause first."""
    found = [f for pod in pods if isinstance(pod, dict) for f in _pod(pod, events)]
    return sorted(found, key=lambda f: CAUSES.index(f.cause))


def not_ready(pods: list[dict]) -> list[dict]:
    """The pods that are not Ready (the ones worth reading events and logs of)."""
    return [
        pod
        for pod in pods
        if isinstance(pod, dict) and _condition(pod, "Ready").get("status") != "True"
    ]


def pod_name(pod: dict) -> str:
    return upstream_text(optional(pod, "metadata.name", str), 253) or "pod"


def _pod(pod: dict, events: dict[str, list[dict]]) -> list[Finding]:
    name = pod_name(pod)
    own_events = [e for e in events.get(name) or [] if isinstance(e, dict)]
    status = optional(pod, "status", dict)
    findings = []
    scheduled = _condition(pod, "PodScheduled")
    if scheduled.get("status") == "False" and scheduled.get("reason") == "Unschedulable":
        said = _text(scheduled.get("message")) or _event_text(own_events, "FailedScheduling")
        cause = VOLUME_UNBOUND if "unbound" in said.lower() else UNSCHEDULABLE
        verb = "waits for a volume claim to bind" if cause == VOLUME_UNBOUND else "cannot be placed"
        findings.append(Finding(cause, name, f"{verb}: {said}" if said else verb))
        return findings
    images = _images(pod)
    for state in _container_statuses(status):
        findings += _container(name, state, images, own_events)
    if not findings and status.get("phase") == "Running":
        probe = _event_text(own_events, "Unhealthy", starts="Readiness probe failed")
        if probe:
            findings.append(Finding(READINESS_PROBE_FAILED, name, _text(probe)))
    return findings


def _container(name: str, state: dict, images: dict, events: list[dict]) -> list[Finding]:
    container = _text(state.get("name")) or "container"
    image = _text(state.get("image")) or images.get(container, "")
    waiting = optional(state, "state.waiting", dict)
    terminated = optional(state, "state.terminated", dict)
    last = optional(state, "lastState.terminated", dict)
    restarts = optional(state, "restartCount", int, default=0)
    reason = _text(waiting.get("reason"))
    said = _text(waiting.get("message"))
    if reason in _PULL_WAITING:
        registry = _event_text(events, "Failed", starts="Failed to pull") or said
        missing = any(mark in registry.lower() for mark in _NOT_FOUND_MARKS)
        verb = "back-off pulling" if reason == "ImagePullBackOff" else "cannot pull"
        detail = "not found" if missing else (registry or reason)
        if missing and registry:
            detail = f"not found ({registry})"
        return [
            Finding(
                IMAGE_NOT_FOUND if missing else IMAGE_PULL_FAILED,
                name,
                _text(f"{verb} image {image}: {detail}"),
            )
        ]
    if reason == "InvalidImageName":
        return [Finding(INVALID_IMAGE_NAME, name, _text(f"invalid image name {image}: {said}"))]
    if reason in _CONFIG_WAITING:
        return [
            Finding(
                CONTAINER_CONFIG_ERROR,
                name,
                _text(f"container {container} cannot be created: {said or reason}"),
            )
        ]
    ended = terminated or last
    if _text(ended.get("reason")) == "OOMKilled":
        return [
            Finding(
                OOM_KILLED,
                name,
                _text(
                    f"container {container} was killed for using more memory than its limit "
                    f"(OOMKilled), restarted {restarts} times"
                ),
                container,
                restarts,
            )
        ]
    if reason == "CrashLoopBackOff" or (terminated and terminated.get("exitCode")):
        code = ended.get("exitCode")
        why = _text(ended.get("reason")) or "exited"
        return [
            Finding(
                CRASH_LOOP,
                name,
                _text(
                    f"container {container} keeps crashing: exit code {code} ({why}), "
                    f"restarted {restarts} times"
                ),
                container,
                restarts,
            )
        ]
    return []


def _container_statuses(status: dict) -> list[dict]:
    states = optional(status, "initContainerStatuses", list) + optional(
        status, "containerStatuses", list
    )
    return [s for s in states if isinstance(s, dict)]


def _images(pod: dict) -> dict:
    containers = optional(pod, "spec.initContainers", list) + optional(pod, "spec.containers", list)
    return {_text(c.get("name")): _text(c.get("image")) for c in containers if isinstance(c, dict)}


def _condition(pod: dict, kind: str) -> dict:
    for condition in optional(pod, "status.conditions", list):
        if isinstance(condition, dict) and condition.get("type") == kind:
            return condition
    return {}


def _event_text(events: list[dict], reason: str, *, starts: str = "") -> str:
    """The message of the latest event with this reason (and message prefix), or ""."""
    matching = [
        e
        for e in events
        if e.get("reason") == reason and _text(e.get("message")).startswith(starts)
    ]
    if not matching:
        return ""
    latest = max(matching, key=lambda e: str(e.get("lastTimestamp") or e.get("eventTime") or ""))
    return _text(latest.get("message"))


def _text(value) -> str:
    """An API value or a finding's message fit to show: one line, bounded ("" if not text)."""
    return upstream_text(value, MESSAGE_MAX_CHARS)


LOG_LINE_MAX_CHARS = 200


def log_tail(text: str, lines: int) -> str:
    """The last `lines` non-empty lines of a container's log, each printable and bounded."""
    kept = [upstream_text(line, LOG_LINE_MAX_CHARS) for line in text.splitlines()]
    return "\n".join([line for line in kept if line][-lines:])
