"""The Kubernetes adapter: server-side apply, readiness reads and deletes against a real cluster.

The kubeconfig arrives with the request as an in-memory dict and is a secret; everything about it
(parsing, the server address check, TLS from memory) lives in engine/integrations/kubeconfig.py.
Which failures are retried and how long to wait is kube_retry.py; how a response's error text is
built (the API's own `Status.message`, bounded) is kube_response.py; the readiness rule of each
kind is kube_readiness.py. This module holds the request path they meet on; kube_backend.py
builds a run's cluster from its kubeconfig.

Every call is bounded and abort-aware: each HTTP attempt runs in its own greenlet under the
run's AbortSignal (an abort stops the wait at once; killing the greenlet closes its connection),
its answer is read through engine/integrations/upstream.py (at most KUBE_ANSWER_MAX_BYTES after
decompression, KUBE_ANSWER_MAX_S from request to last byte), urllib3's own retries are off, and
the retry policy retries 429, 5xx and connection errors with exponential backoff, honouring
Retry-After.
"""

import weakref
from dataclasses import dataclass
from urllib.parse import quote

import urllib3
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

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
from engine.integrations.kube_diagnosis import log_tail
from engine.integrations.kube_network import pool_manager
from engine.integrations.kube_readiness import (
    endpoint_slices_readiness,
    object_readiness,
    service_readiness_by_spec,
)
from engine.integrations.kube_response import MESSAGE_MAX_CHARS, KubeResponse, refusal
from engine.integrations.kube_retry import (
    RETRYABLE_ERRORS,
    RETRYABLE_STATUSES,
    RetryPolicy,
    retry_after_seconds,
    transport_failure,
)
from engine.integrations.kubeconfig import (
    KubeTarget,
)
from engine.integrations.shapes import UpstreamAnswerMalformed, entries, field, reading
from engine.integrations.upstream import (
    AnswerLimit,
    Deadline,
    UnreadableAnswer,
    read_answer,
)

__all__ = ["KubeCluster"]

DEFAULT_FIELD_MANAGER = ENGINE_NAME
DEFAULT_REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_MAX_S = 10.0
APPLY_PATCH = "application/apply-patch+yaml"
DEFAULT_RETRY_POLICY = RetryPolicy()
#: Pods one diagnosis reads at most (old ReplicaSets' pods match the selector too).
POD_LIST_LIMIT = 20
#: Most bytes of a log one diagnosis reads (tailLines alone does not bound a long line).
LOG_LIMIT_BYTES = 16384
#: The caps on one API answer (KUBE_ANSWER_MAX_BYTES, KUBE_ANSWER_MAX_S) and on a log's
#: (KUBE_LOG_MAX_BYTES: we ask for LOG_LIMIT_BYTES, a server may send more).
DEFAULT_ANSWER_LIMIT = AnswerLimit(
    2 * 1024 * 1024, 60.0, "KUBE_ANSWER_MAX_BYTES", "KUBE_ANSWER_MAX_S"
)
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
        self.retry = retry
        self.answer_limit, self.log_limit = answer_limit, log_limit
        self._timeout = (min(CONNECT_TIMEOUT_MAX_S, request_timeout_s), request_timeout_s)
        configuration = kube_client.Configuration(host=target.server)
        configuration.retries = False
        if target.token:
            configuration.api_key = {"BearerToken": target.token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        self._api = kube_client.ApiClient(configuration)
        self._api.user_agent = field_manager
        # The generated REST layer can only take TLS material as file paths and looks the host up
        # itself; a pool on the in-memory SSLContext, pinned to the checked addresses, replaces
        # the one it made (which never opened a connection).
        self._api.rest_client.pool_manager.clear()
        self._api.rest_client.pool_manager = pool_manager(target, addresses)
        self._discovery: dict[str, dict[str, _Resource]] = {}
        self._closer = weakref.finalize(self, self._api.rest_client.pool_manager.clear)

    def close(self) -> None:
        """Close pooled connections (also done when the cluster object is collected)."""
        self._closer()

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
            response = self._request(
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
        response = self._request(
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
        response = self._request(
            "DELETE",
            resource.path(namespace, ref.name),
            abort=abort,
            what=f"deleting {ref.label()}",
            not_found_ok=True,
            query=[("propagationPolicy", "Background")],
        )
        if response.status == 404:
            raise NotFound(f"{ref.label()} does not exist")

    # -- why not ready: reads for kube_diagnosis --------------------------------------------------
    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        """The pods matching `selector` (matchLabels), at most POD_LIST_LIMIT of them."""
        abort.raise_if_aborted()
        labels = ",".join(f"{k}={v}" for k, v in sorted(selector.items()))
        response = self._request(
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
        response = self._request(
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
            response = self._request(
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

    # -- the access check (kube_access.py): read-only questions ----------------------------------
    def server_version(self, *, abort: AbortSignal) -> str:
        """The API server's version (GET /version), e.g. "v1.31.2"."""
        response = self._request("GET", "/version", abort=abort, what="reading /version")
        with reading("reading /version"):
            return upstream_text(field(response.json(), "gitVersion", str), 64) or "unknown"

    def who_am_i(self, *, abort: AbortSignal) -> str | None:
        """The credential's user name (SelfSubjectReview); None where the cluster does not
        serve it (before Kubernetes 1.28)."""
        response = self._request(
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
            response = self._request(
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
        response = self._request(
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
        response = self._request(
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
        response = self._request(
            "GET",
            slices.path(namespace),
            abort=abort,
            what=f"reading endpoints of Service/{name}",
            query=[("labelSelector", f"kubernetes.io/service-name={name}")],
        )
        with reading(f"reading endpoints of Service/{name}"):
            return endpoint_slices_readiness(response.json())

    # -- one logical call, with retries ---------------------------------------------------------
    def _request(
        self,
        method: str,
        path: str,
        *,
        abort: AbortSignal,
        what: str | None,
        query: list | None = None,
        body: dict | None = None,
        content_type: str = "application/json",
        not_found_ok: bool = False,
        bad_request_ok: bool = False,
        limit: AnswerLimit | None = None,
    ) -> KubeResponse:
        """One API call under the retry policy; the response, or a typed IntegrationError.

        `what` ("reading Service/web") prefixes error messages; `limit` caps the answer (the
        cluster's answer limit by default).
        """
        prefix = f"{what}: " if what else ""
        headers = {"Accept": "application/json"}
        if body is not None:
            headers["Content-Type"] = content_type
        request = self._api.param_serialize(
            method,
            path,
            query_params=query,
            header_params=headers,
            body=body,
            auth_settings=["BearerToken"],
        )
        attempts = self.retry.max_retries + 1
        unreachable = None
        for attempt in range(attempts):
            retry_after = None
            try:
                response = abort.run(self._send, limit or self.answer_limit, *request)
                if isinstance(response, Exception):
                    raise response
            except (UpstreamAnswerTooLarge, UnreadableAnswer) as exc:
                # Not retried: the same server would send the same again.
                raise type(exc)(
                    f"{prefix}the cluster at {self._address}: {exc}"[:MESSAGE_MAX_CHARS]
                ) from None
            except RETRYABLE_ERRORS as exc:
                unreachable = transport_failure(exc)
                failure = f"the API server did not answer: {unreachable}"
            except ApiException as exc:  # the REST layer's wrapping of TLS failures
                reason = " ".join(str(exc.reason or exc).split())
                raise ClusterUnreachable(
                    self._unreachable(f"TLS handshake failed: {reason}")[:MESSAGE_MAX_CHARS]
                ) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise IntegrationError(f"{prefix}{type(exc).__name__}: {exc}"[:MESSAGE_MAX_CHARS])
            else:
                if (
                    response.status < 400
                    or (response.status == 404 and not_found_ok)
                    or (response.status == 400 and bad_request_ok)
                ):
                    return response
                if response.status not in RETRYABLE_STATUSES:
                    raise refusal(response, method=method, path=path, prefix=prefix)
                unreachable, failure = None, response.message()
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            if attempt + 1 < attempts:
                abort.sleep(self.retry.delay_s(attempt, retry_after))
        tries = f"{attempts} attempt{'s' if attempts != 1 else ''}"
        if unreachable is not None:
            # No "discovering apps/v1: " lead-in: the whole cluster is out of reach.
            raise ClusterUnreachable(
                f"{self._unreachable(unreachable)} ({tries})"[:MESSAGE_MAX_CHARS]
            )
        raise ClusterUnavailable(
            f"{prefix}the cluster at {self._address} kept failing; gave up after {tries}; "
            f"last: {failure}"[:MESSAGE_MAX_CHARS]
        )

    @property
    def _address(self) -> str:
        return f"{self.target.hostname}:{self.target.port}"

    def _unreachable(self, why: str) -> str:
        return f"cannot reach the cluster at {self._address}: {why}"

    def _send(
        self, limit: AnswerLimit, method: str, url: str, headers: dict, body, post_params
    ) -> KubeResponse | Exception:
        """One HTTP attempt, in its own greenlet: killing it (abort) closes its connection. The
        answer is read within `limit` (the REST layer would read and inflate it whole).

        A failure is returned, not raised: gevent's hub prints the traceback of every greenlet
        that dies raising, and a retried connection error is not worth a traceback in the log.
        """
        deadline = Deadline(limit)
        try:
            with deadline.bounding():
                response = self._api.call_api(
                    method,
                    url,
                    header_params=headers,
                    body=body,
                    post_params=post_params,
                    _request_timeout=self._timeout,
                )
            data = read_answer(response.response, limit, deadline)
        except Exception as exc:
            return exc
        return KubeResponse(response.status, response.headers, data)
