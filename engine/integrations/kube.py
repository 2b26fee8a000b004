"""The Kubernetes adapter: server-side apply and readiness reads against a real cluster.

The kubeconfig arrives with the request as an in-memory dict and is a secret; everything about it
(parsing, the server address check, TLS from memory) lives in engine/integrations/kubeconfig.py.

Every call is bounded and abort-aware: each HTTP attempt runs in its own greenlet under the
run's AbortSignal (an abort stops the wait at once; killing the greenlet closes its connection),
urllib3's own retries are off, and this module's policy retries 429, 5xx and connection errors
with exponential backoff, honouring Retry-After. Error text is built from the API's structured
`Status.message`, bounded; a body that is not a Status is never quoted.

It stays one module (just over 500 lines) because apply, readiness and the retry policy share one
request path; splitting the policy out is the next step if it grows.
"""

import email.utils
import random
import time
import weakref
from collections.abc import Mapping
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
    IntegrationError,
    NotFound,
    Readiness,
    ResourceRef,
    UnknownKind,
    upstream_text,
)
from engine.integrations.kubeconfig import (
    InvalidKubeconfig,
    KubeTarget,
    NetworkPolicy,
    check_kubeconfig,
    parse_kubeconfig,
    pool_manager,
)
from engine.untrusted import load_json

__all__ = [
    "InvalidKubeconfig",
    "KubeBackend",
    "KubeCluster",
    "KubeTarget",
    "NetworkPolicy",
    "RetryPolicy",
    "check_kubeconfig",
    "parse_kubeconfig",
    "retry_after_seconds",
]

DEFAULT_FIELD_MANAGER = ENGINE_NAME
DEFAULT_REQUEST_TIMEOUT_S = 30.0
DEFAULT_MAX_RETRIES = 4
#: First backoff step; each retry doubles it (with jitter) up to RETRY_BACKOFF_MAX_S.
DEFAULT_RETRY_BACKOFF_S = 0.5
RETRY_BACKOFF_MAX_S = 8.0
#: A longer Retry-After is shortened to this: a run must not sleep for minutes on one call.
RETRY_AFTER_MAX_S = 60.0
CONNECT_TIMEOUT_MAX_S = 10.0
#: 501 is absent on purpose: "not implemented" does not get better by asking again.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Transport failures worth another attempt (a TLS failure is not: it is a configuration error).
RETRYABLE_ERRORS = (
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    urllib3.exceptions.ReadTimeoutError,
    urllib3.exceptions.ProtocolError,
    ConnectionError,
)
APPLY_PATCH = "application/apply-patch+yaml"
#: Kinds whose readiness is their own Ready condition (absent means not ready yet).
READY_CONDITION_KINDS = frozenset({"TemplateInstance"})
MESSAGE_MAX_CHARS = 500


# -- HTTP -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed call is tried again."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    backoff_max_s: float = RETRY_BACKOFF_MAX_S
    retry_after_max_s: float = RETRY_AFTER_MAX_S

    def delay_s(self, retry: int, retry_after_s: float | None) -> float:
        """Seconds before retry number `retry` (0-based): Retry-After when given, else backoff."""
        if retry_after_s is not None:
            return min(retry_after_s, self.retry_after_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_s * 2**retry)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header (delta-seconds or HTTP-date) in seconds; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


@dataclass(frozen=True)
class _Response:
    status: int
    #: urllib3's case-insensitive HTTPHeaderDict.
    headers: Mapping
    body: bytes

    def json(self) -> dict:
        try:
            value = load_json(self.body or b"{}")
        except ValueError:
            raise IntegrationError(f"the API answered {self.status} with a body that is not JSON")
        if not isinstance(value, dict):
            raise IntegrationError(f"the API answered {self.status} with an unexpected body")
        return value

    def message(self) -> str:
        """The API's own words (a Status object's message), bounded; never the raw body, which
        may be whatever some other service behind that address answered."""
        try:
            value = load_json(self.body)
        except ValueError:
            value = None
        text = upstream_text(
            value.get("message") if isinstance(value, dict) else None, MESSAGE_MAX_CHARS
        )
        return f"{text or 'no Status message'} (HTTP {self.status})"


class ApiError(IntegrationError):
    """The API refused a call with a non-retryable status."""

    reason = "api_error"

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


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
        retry: RetryPolicy = RetryPolicy(),
    ):
        """`addresses`: the server's addresses as NetworkPolicy.resolve checked them."""
        self.target = target
        self.field_manager = field_manager
        self.retry = retry
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
        except ApplyError:
            raise
        except IntegrationError as exc:
            raise ApplyError(str(exc), ref) from exc
        applied = ResourceRef(ref.api_version, ref.kind, ref.name, namespace)
        return AppliedResource(applied, "created" if response.status == 201 else "configured")

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        """Whether one object is ready, by its kind's rule; a missing object is not."""
        abort.raise_if_aborted()
        resource = self._resource(ref, abort)
        namespace = (ref.namespace or self.target.namespace) if resource.namespaced else None
        response = self._request(
            "GET",
            resource.path(namespace, ref.name),
            abort=abort,
            what=f"reading {ref.label()}",
            not_found_ok=True,
        )
        if response.status == 404:
            return Readiness(False, "not found")
        obj = response.json()
        if ref.kind == "Service":
            return self._service_readiness(obj, namespace, ref.name, abort)
        check = _READINESS_BY_KIND.get(ref.kind)
        if check is not None:
            return check(obj)
        return _condition_readiness(obj, required=ref.kind in READY_CONDITION_KINDS)

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        """Delete one object (dependents in the background); NotFound when it is already gone."""
        abort.raise_if_aborted()
        try:
            resource = self._resource(ref, abort)
        except UnknownKind as exc:
            # A kind the cluster no longer serves (its CRD is gone) has no objects left.
            raise NotFound(str(exc)) from exc
        namespace = (ref.namespace or self.target.namespace) if resource.namespaced else None
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
        for entry in response.json().get("resources") or []:
            name = entry.get("name") or ""
            if "/" not in name and entry.get("kind"):
                kinds.setdefault(
                    entry["kind"], _Resource(api_version, name, bool(entry.get("namespaced")))
                )
        self._discovery[api_version] = kinds
        return kinds

    # -- readiness helpers ----------------------------------------------------------------------
    def _service_readiness(
        self, service: dict, namespace: str | None, name: str, abort: AbortSignal
    ) -> Readiness:
        spec = service.get("spec") or {}
        if spec.get("type") == "ExternalName":
            return Readiness(True, "ExternalName service")
        if spec.get("clusterIP") == "None":
            return Readiness(True, "headless service")
        if not spec.get("selector"):
            return Readiness(True, "no selector: endpoints are managed outside the cluster")
        slices = _Resource("discovery.k8s.io/v1", "endpointslices", True)
        response = self._request(
            "GET",
            slices.path(namespace),
            abort=abort,
            what=f"reading endpoints of Service/{name}",
            query=[("labelSelector", f"kubernetes.io/service-name={name}")],
        )
        ready = sum(
            1
            for item in response.json().get("items") or []
            for endpoint in item.get("endpoints") or []
            if endpoint.get("addresses")
            and (endpoint.get("conditions") or {}).get("ready") is not False
        )
        if ready:
            return Readiness(True, f"{ready} ready endpoint{'s' if ready != 1 else ''}")
        return Readiness(False, "no ready endpoints")

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
    ) -> _Response:
        """One API call under the retry policy; the response, or IntegrationError/ApiError.

        `what` ("reading Service/web") prefixes error messages.
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
        for attempt in range(attempts):
            retry_after = None
            try:
                response = abort.run(self._send, *request)
                if isinstance(response, Exception):
                    raise response
            except RETRYABLE_ERRORS as exc:
                failure = f"the API server did not answer: {type(exc).__name__}: {exc}"
            except ApiException as exc:  # the REST layer's wrapping of TLS failures
                reason = " ".join(str(exc.reason or exc).split())
                raise IntegrationError(f"{prefix}{reason}"[:MESSAGE_MAX_CHARS]) from exc
            except urllib3.exceptions.HTTPError as exc:
                raise IntegrationError(f"{prefix}{type(exc).__name__}: {exc}"[:MESSAGE_MAX_CHARS])
            else:
                if response.status < 400 or (response.status == 404 and not_found_ok):
                    return response
                if response.status not in RETRYABLE_STATUSES:
                    raise ApiError(f"{prefix}{response.message()}", response.status)
                failure = response.message()
                retry_after = retry_after_seconds(response.headers.get("Retry-After"))
            if attempt + 1 < attempts:
                abort.sleep(self.retry.delay_s(attempt, retry_after))
        raise IntegrationError(
            f"{prefix}gave up after {attempts} attempts; last: {failure}"[:MESSAGE_MAX_CHARS]
        )

    def _send(
        self, method: str, url: str, headers: dict, body, post_params
    ) -> _Response | Exception:
        """One HTTP attempt, in its own greenlet: killing it (abort) closes its connection.

        A failure is returned, not raised: gevent's hub prints the traceback of every greenlet
        that dies raising, and a retried connection error is not worth a traceback in the log.
        """
        try:
            response = self._api.call_api(
                method,
                url,
                header_params=headers,
                body=body,
                post_params=post_params,
                _request_timeout=self._timeout,
            )
            data = response.read()
        except Exception as exc:
            return exc
        return _Response(response.status, response.headers, data)


# -- readiness rules ------------------------------------------------------------------------------


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


# -- the backend --------------------------------------------------------------------------------


class KubeBackend:
    """Builds a KubeCluster per run from the request's kubeconfig (CLUSTER_BACKEND=kubernetes)."""

    label = "kubernetes"

    def __init__(
        self,
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry: RetryPolicy = RetryPolicy(),
        network: NetworkPolicy | None = None,
    ):
        self.field_manager = field_manager
        self.request_timeout_s = request_timeout_s
        self.retry = retry
        self.network = network or NetworkPolicy()

    @classmethod
    def from_settings(cls, settings) -> "KubeBackend":
        return cls(
            field_manager=settings.kube_field_manager,
            request_timeout_s=settings.kube_request_timeout_s,
            retry=RetryPolicy(
                max_retries=settings.kube_max_retries, backoff_s=settings.kube_retry_backoff_s
            ),
            network=NetworkPolicy.from_settings(settings),
        )

    def check(self, kubeconfig) -> KubeTarget:
        """Validate a kubeconfig without connecting anywhere; InvalidKubeconfig when unusable."""
        return check_kubeconfig(kubeconfig, self.network)

    def cluster(self, kubeconfig: dict | None) -> "KubeCluster | NoKubeconfig":
        """The cluster of a run's kubeconfig, connected only to its checked addresses; without a
        usable one, a cluster whose every call refuses with the reason."""
        if kubeconfig is None:
            return NoKubeconfig()
        try:
            target = parse_kubeconfig(kubeconfig)
            addresses = self.network.resolve(target)
        except InvalidKubeconfig as exc:
            return NoKubeconfig(str(exc))
        return KubeCluster(
            target,
            addresses,
            field_manager=self.field_manager,
            request_timeout_s=self.request_timeout_s,
            retry=self.retry,
        )


class NoKubeconfig:
    """A run without a usable kubeconfig (the API refuses those; other callers may not, and a
    server name may resolve elsewhere by the time the run starts).

    Runs that never touch the cluster go on; the first cluster call fails with a typed error the
    runner reports ("applying Deployment/web failed: ..."), not as a crash at run start.
    """

    MESSAGE = "this run has no kubeconfig (send it in the X-Kubeconfig header)"

    def __init__(self, message: str = MESSAGE):
        self.message = message

    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        abort.raise_if_aborted()
        raise ApplyError(self.message, ResourceRef.of(manifest))

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        abort.raise_if_aborted()
        raise InvalidKubeconfig(self.message)

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        abort.raise_if_aborted()
        raise InvalidKubeconfig(self.message)

    def close(self) -> None:
        pass
