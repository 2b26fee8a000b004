"""The Kubernetes adapter: server-side apply, readiness reads and deletes against a real cluster,
and the reads of the why-not-ready diagnosis and of the access check.

The kubeconfig arrives with the request as an in-memory dict and is a secret; everything about it
(parsing, TLS from memory) lives in kubeconfig.py and where its server may be reached in
network.py. One call's request path (retries, bounds, abort) is api.py; the readiness rule of
each kind is readiness.py; backend.py builds a run's cluster from its kubeconfig.
"""

from dataclasses import dataclass
from urllib.parse import quote

from engine.abort import AbortSignal
from engine.integrations.base import (
    ENGINE_NAME,
    AppliedResource,
    ApplyError,
    ClusterUnavailable,
    ClusterUnreachable,
    Forbidden,
    IntegrationError,
    NotFound,
    Readiness,
    ResourceRef,
    UnknownKind,
    UpstreamAnswerTooLarge,
    upstream_text,
)
from engine.integrations.kube.api import (
    DEFAULT_ANSWER_LIMIT,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_RETRY_POLICY,
    KubeApi,
)
from engine.integrations.kube.diagnosis import log_tail
from engine.integrations.kube.kubeconfig import KubeTarget
from engine.integrations.kube.readiness import (
    endpoint_slices_readiness,
    object_readiness,
    service_readiness_by_spec,
)
from engine.integrations.kube.response import KubeResponse
from engine.integrations.kube.retry import RetryPolicy
from engine.integrations.shapes import UpstreamAnswerMalformed, entries, field, reading
from engine.integrations.upstream import AnswerLimit

__all__ = ["KubeCluster"]

DEFAULT_FIELD_MANAGER = ENGINE_NAME
APPLY_PATCH = "application/apply-patch+yaml"
#: Pods one diagnosis reads at most (old ReplicaSets' pods match the selector too).
POD_LIST_LIMIT = 20
#: Most bytes of a log one diagnosis reads (tailLines alone does not bound a long line).
LOG_LIMIT_BYTES = 16384
#: The cap on a log's answer (KUBE_LOG_MAX_BYTES: we ask for LOG_LIMIT_BYTES, a server may send
#: more).
DEFAULT_LOG_LIMIT = AnswerLimit(64 * 1024, 60.0, "KUBE_LOG_MAX_BYTES", "KUBE_ANSWER_MAX_S")


@dataclass(frozen=True)
class _Resource:
    """One served kind as discovery describes it."""

    api_version: str
    plural: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        base = "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"
        if self.namespaced:
            base += f"/namespaces/{quote(namespace or '', safe='')}"
        base += f"/{self.plural}"
        return base + (f"/{quote(name, safe='')}" if name is not None else "")


_PODS = _Resource("v1", "pods", True)
_NAMESPACES = _Resource("v1", "namespaces", False)
_EVENTS = _Resource("v1", "events", True)


def _group_version_path(api_version: str) -> str | None:
    parts = api_version.split("/")
    if api_version == "v1":
        return "/api/v1"
    if len(parts) == 2 and all(parts):
        return f"/apis/{api_version}"
    return None


class KubeCluster:
    """One run's view of one cluster: stateless beyond a discovery cache and a connection pool."""

    def __init__(
        self,
        target: KubeTarget,
        addresses: tuple[str, ...],
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        answer_limit: AnswerLimit = DEFAULT_ANSWER_LIMIT,
        log_limit: AnswerLimit = DEFAULT_LOG_LIMIT,
    ):
        """`addresses`: the server's addresses as NetworkPolicy.resolve checked them."""
        self.target = target
        self.field_manager = field_manager
        self.log_limit = log_limit
        self.api = KubeApi(
            target,
            addresses,
            user_agent=field_manager,
            request_timeout_s=request_timeout_s,
            retry=retry,
            answer_limit=answer_limit,
        )
        self._discovery: dict[str, dict[str, _Resource]] = {}

    def close(self) -> None:
        """Close pooled connections (also done when the cluster object is collected)."""
        self.api.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    # -- the Cluster protocol ---------------------------------------------------------------
    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        """Server-side apply one document (PATCH apply-patch+yaml, forced, our field manager)."""
        abort.raise_if_aborted()
        ref = ResourceRef.of(manifest)
        if not ref.api_version or not ref.kind:
            raise UnknownKind("the document has no apiVersion or kind", ref)
        if not ref.name:
            raise ApplyError("the document has no metadata.name", ref)
        try:
            resource = self._resource(ref, abort)
            if not resource.namespaced:
                # The cluster's own word, for every source: a task deploys into a namespace.
                raise ApplyError(
                    f"{ref.kind} is cluster-scoped on this cluster; a task may only "
                    "create namespaced objects",
                    ref,
                )
            namespace = ref.namespace or self.target.namespace
            # No "applying X" prefix: the runner reports "applying X failed: <this message>".
            response = self.api.request(
                "PATCH",
                resource.path(namespace, ref.name),
                abort=abort,
                what=None,
                body=manifest,
                content_type=APPLY_PATCH,
                query=[("fieldManager", self.field_manager), ("force", "true")],
            )
        except ApplyError as exc:
            exc.ref = exc.ref or ref
            raise
        except (
            ClusterUnreachable,
            ClusterUnavailable,
            UpstreamAnswerMalformed,
            UpstreamAnswerTooLarge,
        ):
            raise  # not the document's fault: the runner reports the cluster, not the source
        except IntegrationError as exc:
            raise ApplyError(str(exc), ref) from exc
        applied = ResourceRef(ref.api_version, ref.kind, ref.name, namespace)
        return AppliedResource(applied, "created" if response.status == 201 else "configured")

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        """Whether one object is ready, by its kind's rule; a missing object is not."""
        abort.raise_if_aborted()
        resource = self._resource(ref, abort)
        namespace = self._namespace(ref, resource)
        response = self.api.request(
            "GET",
            resource.path(namespace, ref.name),
            abort=abort,
            what=f"reading {ref.label()}",
            not_found_ok=True,
        )
        if response.status == 404:
            return Readiness(False, "not found")
        if ref.kind == "Service":
            return self._service_readiness(response, namespace, ref.name, abort)
        with reading(f"reading {ref.label()}"):
            return object_readiness(ref.kind, response.json())

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        """Delete one object (dependents in the background); NotFound when it is already gone."""
        abort.raise_if_aborted()
        try:
            resource = self._resource(ref, abort)
        except UnknownKind as exc:
            # A kind the cluster no longer serves (its CRD is gone) has no objects left.
            raise NotFound(str(exc)) from exc
        namespace = self._namespace(ref, resource)
        response = self.api.request(
            "DELETE",
            resource.path(namespace, ref.name),
            abort=abort,
            what=f"deleting {ref.label()}",
            not_found_ok=True,
            query=[("propagationPolicy", "Background")],
        )
        if response.status == 404:
            raise NotFound(f"{ref.label()} does not exist")

    # -- why not ready: reads for diagnosis.py ----------------------------------------------------
    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        """The pods matching `selector` (matchLabels), at most POD_LIST_LIMIT of them."""
        abort.raise_if_aborted()
        labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        response = self.api.request(
            "GET",
            _PODS.path(namespace),
            abort=abort,
            what=f"reading pods in {namespace}",
            query=[("labelSelector", labels), ("limit", str(POD_LIST_LIMIT))],
        )
        with reading(f"reading pods in {namespace}"):
            return entries(response.json(), "items")

    def events(self, namespace: str, involved: str, *, abort: AbortSignal) -> list[dict]:
        """The events about the object named `involved` in `namespace`."""
        abort.raise_if_aborted()
        response = self.api.request(
            "GET",
            _EVENTS.path(namespace),
            abort=abort,
            what=f"reading events of {involved}",
            query=[("fieldSelector", f"involvedObject.name={involved}")],
        )
        with reading(f"reading events of {involved}"):
            return entries(response.json(), "items")

    def log_tail(
        self, namespace: str, pod: str, container: str, *, lines: int, abort: AbortSignal
    ) -> str:
        """The last `lines` lines of the container's crashed run (else its current one)."""
        abort.raise_if_aborted()
        for previous in ("true", "false"):
            response = self.api.request(
                "GET",
                _PODS.path(namespace, pod) + "/log",
                abort=abort,
                what=f"reading the log of {pod}",
                not_found_ok=True,
                bad_request_ok=True,  # "previous terminated container not found"
                limit=self.log_limit,
                query=[
                    ("container", container),
                    ("tailLines", str(lines)),
                    ("limitBytes", str(LOG_LIMIT_BYTES)),
                    ("previous", previous),
                ],
            )
            if response.status < 400:
                return log_tail(response.body.decode("utf-8", "replace"), lines)
        return ""

    # -- the access check (access.py): read-only questions ------------------------------------
    def server_version(self, *, abort: AbortSignal) -> str:
        """The API server's version (GET /version), e.g. "v1.31.2"."""
        response = self.api.request("GET", "/version", abort=abort, what="reading /version")
        with reading("reading /version"):
            return upstream_text(field(response.json(), "gitVersion", str), 64) or "unknown"

    def who_am_i(self, *, abort: AbortSignal) -> str | None:
        """The credential's user name (SelfSubjectReview); None where the cluster does not
        serve it (before Kubernetes 1.28)."""
        response = self.api.request(
            "POST",
            "/apis/authentication.k8s.io/v1/selfsubjectreviews",
            abort=abort,
            what="asking who the credential is",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            not_found_ok=True,
        )
        if response.status == 404:
            return None
        with reading("asking who the credential is"):
            user = field(response.json(), "status.userInfo.username", str)
        return upstream_text(user, 253) or None

    def namespace_exists(self, namespace: str, *, abort: AbortSignal) -> bool | None:
        """Whether the namespace exists; None when the credential may not tell."""
        try:
            response = self.api.request(
                "GET",
                _NAMESPACES.path(None, namespace),
                abort=abort,
                what=f"reading namespace {namespace}",
                not_found_ok=True,
            )
        except Forbidden:
            return None
        return response.status != 404

    def can(
        self,
        verb: str,
        resource: str,
        *,
        namespace: str,
        abort: AbortSignal,
        group: str = "",
        subresource: str = "",
    ) -> bool:
        """Whether the credential may `verb` the resource in the namespace
        (SelfSubjectAccessReview: answered, never stored)."""
        attributes = {"namespace": namespace, "verb": verb, "group": group, "resource": resource}
        if subresource:
            attributes["subresource"] = subresource
        response = self.api.request(
            "POST",
            "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
            abort=abort,
            what=f"asking whether the credential may {verb} {resource}",
            body={
                "apiVersion": "authorization.k8s.io/v1",
                "kind": "SelfSubjectAccessReview",
                "spec": {"resourceAttributes": attributes},
            },
        )
        with reading(f"asking whether the credential may {verb} {resource}"):
            return field(response.json(), "status.allowed", bool) is True

    def _namespace(self, ref: ResourceRef, resource: "_Resource") -> str | None:
        """The object's own namespace, else the kubeconfig context's; None when cluster-scoped."""
        return (ref.namespace or self.target.namespace) if resource.namespaced else None

    # -- discovery ------------------------------------------------------------------------------
    def _resource(self, ref: ResourceRef, abort: AbortSignal) -> _Resource:
        """The plural and scope of a kind, from the API's discovery (cached for this run)."""
        cached = ref.api_version in self._discovery
        for refresh in (False, True):
            if refresh and not cached:
                break
            kinds = self._discover(ref, abort, refresh=refresh)
            if ref.kind in kinds:
                return kinds[ref.kind]
        raise UnknownKind(f"the cluster does not serve kind {ref.kind} in {ref.api_version}", ref)

    def _discover(self, ref: ResourceRef, abort: AbortSignal, *, refresh: bool) -> dict:
        api_version = ref.api_version
        if not refresh and api_version in self._discovery:
            return self._discovery[api_version]
        path = _group_version_path(api_version)
        if path is None:
            raise UnknownKind(f"{api_version!r} is not an apiVersion", ref)
        response = self.api.request(
            "GET", path, abort=abort, what=f"discovering {api_version}", not_found_ok=True
        )
        if response.status == 404:
            raise UnknownKind(f"the cluster does not serve {api_version}", ref)
        kinds = {}
        with reading(f"discovering {api_version}"):
            for entry in entries(response.json(), "resources"):
                name, kind = field(entry, "name", str), field(entry, "kind", str)
                if name and "/" not in name and kind:
                    namespaced = field(entry, "namespaced", bool) is True
                    kinds.setdefault(kind, _Resource(api_version, name, namespaced))
        self._discovery[api_version] = kinds
        return kinds

    # -- readiness helpers ----------------------------------------------------------------------
    def _service_readiness(
        self, service: KubeResponse, namespace: str | None, name: str, abort: AbortSignal
    ) -> Readiness:
        with reading(f"reading Service/{name}"):
            by_spec = service_readiness_by_spec(service.json())
        if by_spec is not None:
            return by_spec
        slices = _Resource("discovery.k8s.io/v1", "endpointslices", True)
        response = self.api.request(
            "GET",
            slices.path(namespace),
            abort=abort,
            what=f"reading endpoints of Service/{name}",
            query=[("labelSelector", f"kubernetes.io/service-name={name}")],
        )
        with reading(f"reading endpoints of Service/{name}"):
            return endpoint_slices_readiness(response.json())
