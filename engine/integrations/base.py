"""Types shared by every integration and runner (no storage, no Flask). The template catalog's
protocol lives beside its Template type, in engine/integrations/templates.py."""

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from engine.abort import AbortSignal
from engine.errors import EngineError

#: The name this engine signs its work with: the server-side apply field manager, the
#: `app.kubernetes.io/managed-by` label and its own label prefix, the devbox token issuer.
ENGINE_NAME = "deploy-task-engine"


@dataclass(frozen=True)
class ResourceRef:
    """One Kubernetes object, by identity."""

    api_version: str
    kind: str
    name: str
    namespace: str | None

    @classmethod
    def of(cls, manifest: dict, default_namespace: str | None = None) -> "ResourceRef":
        meta = manifest.get("metadata", {})
        return cls(
            manifest.get("apiVersion", ""),
            manifest.get("kind", ""),
            meta.get("name", ""),
            meta.get("namespace", default_namespace),
        )

    def as_json(self) -> dict:
        return {
            "apiVersion": self.api_version,
            "kind": self.kind,
            "name": self.name,
            "namespace": self.namespace,
        }

    def label(self) -> str:
        return f"{self.kind}/{self.name}"


@dataclass(frozen=True)
class AppliedResource:
    ref: ResourceRef
    #: "created", "configured" or "unchanged", as the cluster reported it.
    action: str

    def as_json(self) -> dict:
        return {**self.ref.as_json(), "action": self.action}


@dataclass(frozen=True)
class Readiness:
    ready: bool
    detail: str = ""


@dataclass(frozen=True)
class ExecResult:
    """What one command run in a devbox gave back."""

    exit_code: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_code == 0


class IntegrationError(EngineError):
    """An integration call failed in a way the runner reports to the user."""

    #: The stable name a failed task records (its `failure.reason`); each kind has its own.
    reason = "integration_error"


class ApplyError(IntegrationError):
    """The cluster refused a document."""

    reason = "apply_failed"

    def __init__(self, message: str, ref: ResourceRef | None = None):
        super().__init__(message)
        self.ref = ref


class ClusterUnreachable(IntegrationError):
    """The cluster's API server could not be reached (DNS, refused, reset, timeout, TLS)."""

    reason = "cluster_unreachable"


class ClusterUnavailable(IntegrationError):
    """The API server kept answering 429 or 5xx until the retries ran out."""

    reason = "cluster_unavailable"


class UpstreamAnswerTooLarge(IntegrationError):
    """A server's answer went over its cap (engine/integrations/upstream.py): more bytes than
    allowed after decompression (or on the wire), or still not complete when its time was up."""

    reason = "upstream_answer_too_large"


class CredentialsRefused(ApplyError):
    """The API server does not accept the kubeconfig's credentials (401)."""

    reason = "cluster_unauthorized"


class Forbidden(ApplyError):
    """The credential may not do this (403): `verb`, `resource` and `namespace` name what."""

    reason = "cluster_forbidden"

    def __init__(self, message: str, *, verb: str, resource: str, namespace: str | None):
        super().__init__(message)
        self.verb, self.resource, self.namespace = verb, resource, namespace


class NamespaceMissing(ApplyError):
    """The target namespace does not exist on the cluster."""

    reason = "namespace_not_found"


class OwnershipConflict(ApplyError):
    """The object exists and is held by another owner or manager (409)."""

    reason = "resource_conflict"


class InvalidManifest(ApplyError):
    """The API server rejects the document as invalid (422); `fields` names the fields."""

    reason = "invalid_manifest"

    def __init__(self, message: str, fields: tuple[str, ...] = ()):
        super().__init__(message)
        self.fields = fields


class AdmissionDenied(ApplyError):
    """An admission webhook or policy denied the document (its message quoted)."""

    reason = "admission_denied"


def upstream_text(value, limit: int) -> str:
    """An upstream service's structured message (a Kubernetes `Status.message`, an OpenAI-style
    `error.message`) fit to show: a string or nothing, one line, at most `limit` characters.

    Error text from another service is built from this only, never from a raw response body,
    which may be whatever an internal endpoint answered.
    """
    if not isinstance(value, str):
        return ""
    # Only the head can show: a megabyte-long message is not walked a character at a time.
    value = value[: 4 * limit]
    text = " ".join("".join(c if c.isprintable() else " " for c in value).split())
    return text if len(text) <= limit else text[: limit - 3].rstrip() + "..."


class UnknownKind(ApplyError):
    """The cluster does not serve this apiVersion/kind."""

    reason = "unknown_kind"


class NotFound(IntegrationError):
    """The remote resource does not exist (typed absence: cleanup counts it as done)."""

    reason = "not_found"


class Cluster(Protocol):
    """A Kubernetes cluster as the runners see it."""

    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        """Server-side apply one document."""

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        """Whether one applied object is ready."""

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        """Delete one object; NotFound when it is already gone (callers count that as done)."""

    # The reads that say why a workload is not ready (kube/diagnosis.py decides from them).
    # Forbidden when the credential may not read them: the runner degrades, never fails.
    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        """The pods matching a label selector, as the API returns them."""

    def events(self, namespace: str, involved: str, *, abort: AbortSignal) -> list[dict]:
        """The events about one object of the namespace (by name), as the API returns them."""

    def log_tail(
        self, namespace: str, pod: str, container: str, *, lines: int, abort: AbortSignal
    ) -> str:
        """The last lines of a container's previous run (its crash), else of its current one."""


class Devbox(Protocol):
    """The devbox HTTP API, authenticated by a server-minted, workspace-scoped JWT.

    pause/delete need no user credential (the reaper and cleanup jobs call them). Each raises
    NotFound when the devbox is already gone, IntegrationError for anything retryable.
    """

    def create(self, *, workspace: str, task_id: str, abort: AbortSignal) -> str:
        """A new devbox for a task; its id."""

    def attach(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Re-attach to an existing devbox (resuming it if paused)."""

    def exec(
        self,
        devbox_id: str,
        command: list[str],
        *,
        workspace: str,
        abort: AbortSignal,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run one command (argv, no shell) inside the devbox; its exit code and output."""

    def pause(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Pause (idempotent)."""

    def delete(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Delete (idempotent)."""


class Gateway(Protocol):
    """An OpenAI-compatible chat-completions gateway (engine/integrations/gateway.py)."""

    def stream_chat(
        self, messages: list[dict], *, session_id: str, abort: AbortSignal
    ) -> Iterator[str]:
        """The answer's content, piece by piece, as the model streams it."""
