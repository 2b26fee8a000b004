"""A Kubernetes API response as the adapter reads it, and the error text built from it.

Error text comes from the API's structured `Status.message`, bounded; a body that is not a Status
is never quoted: it may be whatever some other service behind that address answered.
"""

from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import unquote

from engine.integrations.base import (
    AdmissionDenied,
    CredentialsRefused,
    Forbidden,
    IntegrationError,
    InvalidManifest,
    NamespaceMissing,
    OwnershipConflict,
    upstream_text,
)
from engine.integrations.shapes import UpstreamAnswerMalformed, optional
from engine.trust.untrusted import load_json

MESSAGE_MAX_CHARS = 500


@dataclass(frozen=True)
class KubeResponse:
    """One HTTP answer of the API server, read whole."""

    status: int
    #: urllib3's case-insensitive HTTPHeaderDict.
    headers: Mapping
    body: bytes

    def json(self) -> dict:
        """The body as a JSON object; UpstreamAnswerMalformed when it is not one."""
        try:
            value = load_json(self.body or b"{}")
        except ValueError:
            raise UpstreamAnswerMalformed(
                f"the API answered {self.status} with a body that is not JSON"
            ) from None
        if not isinstance(value, dict):
            raise UpstreamAnswerMalformed(f"the API answered {self.status} with an unexpected body")
        return value

    def message(self, limit: int = MESSAGE_MAX_CHARS) -> str:
        """The API's own words (a Status object's message), bounded; never the raw body."""
        try:
            value = load_json(self.body)
        except ValueError:
            value = None
        text = upstream_text(value.get("message") if isinstance(value, dict) else None, limit)
        return f"{text or 'no Status message'} (HTTP {self.status})"


class ApiError(IntegrationError):
    """The API refused a call with a non-retryable status."""

    reason = "api_error"

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


#: How much of the API's own words a typed refusal quotes.
REFUSAL_QUOTE_MAX_CHARS = 300
#: HTTP methods as the verbs RBAC names them.
VERBS = {"GET": "get", "PATCH": "patch", "DELETE": "delete", "POST": "create", "PUT": "update"}
#: Words in a Status message that mark an admission webhook's or policy's refusal.
ADMISSION_MARKS = ("admission webhook", "denied the request", "denied request")


def refusal(response: KubeResponse, *, method: str, path: str, prefix: str = "") -> Exception:
    """The typed error for a non-retryable refusal: who refused what, in the API's own words.

    `path` is the request's API path (it names the resource and namespace a 403 is about);
    `prefix` ("reading Service/web: ") leads the message.
    """
    status = _status(response)
    # Room for the lead-ins below (and `prefix`): the whole stays within MESSAGE_MAX_CHARS.
    prefix = prefix[:100]
    said = response.message(REFUSAL_QUOTE_MAX_CHARS)
    lowered = said.lower()
    code = response.status
    if code == 401:
        return CredentialsRefused(
            f"{prefix}the cluster does not accept the kubeconfig's credentials "
            f"(token or client certificate): {said}"
        )
    if code in (400, 403, 422) and any(mark in lowered for mark in ADMISSION_MARKS):
        return AdmissionDenied(f"{prefix}denied by the cluster's admission control: {said}")
    if code == 403:
        verb, resource, namespace = _verb_resource_namespace(method, path)
        where = f" in namespace {namespace}" if namespace else ""
        return Forbidden(
            f"{prefix}the credential may not {verb} {resource}{where}: {said}",
            verb=verb,
            resource=resource,
            namespace=namespace,
        )
    # Only words to quote: a Status of another shape says less, never fails the refusal.
    if code == 404 and optional(status, "details.kind", str) == "namespaces":
        namespace = upstream_text(optional(status, "details.name", str), 63)
        namespace = namespace or "the target namespace"
        return NamespaceMissing(f"{prefix}namespace {namespace} does not exist: {said}")
    if code == 409:
        return OwnershipConflict(
            f"{prefix}the object exists and is held by another owner or manager: {said}"
        )
    if code == 422:
        causes = optional(status, "details.causes", list)
        said_fields = (upstream_text(optional(c, "field", str), 200) for c in causes)
        fields = tuple(dict.fromkeys(f for f in said_fields if f))
        named = f" (field {', '.join(fields)})" if fields else ""
        return InvalidManifest(f"{prefix}the cluster rejects it as invalid{named}: {said}", fields)
    return ApiError(f"{prefix}{said}", code)


def _status(response: KubeResponse) -> dict:
    try:
        value = load_json(response.body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _verb_resource_namespace(method: str, path: str) -> tuple[str, str, str | None]:
    """RBAC's words for a request: ("patch", "deployments.apps", "demo")."""
    parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
    group = "" if parts[:1] == ["api"] else parts[1] if len(parts) > 1 else ""
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    namespace = None
    if rest[:1] == ["namespaces"] and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    plural = rest[0] if rest else "resources"
    if len(rest) > 2:  # a subresource: pods/log
        plural = f"{plural}/{rest[2]}"
    verb = VERBS.get(method, method.lower())
    if method == "GET" and len(rest) == 1:
        verb = "list"
    return verb, f"{plural}.{group}" if group else plural, namespace
