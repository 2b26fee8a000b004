"""One call to a cluster's API: the request path every KubeCluster call meets on
(engine/integrations/kube/cluster.py says what to ask; this sends it).

Every call is bounded and abort-aware: each HTTP attempt runs in its own greenlet under the
run's AbortSignal (an abort stops the wait at once; killing the greenlet closes its connection),
its answer is read through engine/integrations/upstream.py (at most KUBE_ANSWER_MAX_BYTES after
decompression, KUBE_ANSWER_MAX_S from request to last byte), urllib3's own retries are off, and
the retry policy (retry.py) retries 429, 5xx and connection errors with exponential backoff,
honouring Retry-After. The connections go only to the server's checked addresses (network.py),
with TLS from memory (kubeconfig.py); a refusal's text is the API's own, bounded (response.py).
"""

import weakref

import urllib3
from kubernetes import client as kube_client
from kubernetes.client.exceptions import ApiException

from engine.abort import AbortSignal
from engine.integrations.base import (
    ClusterUnavailable,
    ClusterUnreachable,
    IntegrationError,
    UpstreamAnswerTooLarge,
)
from engine.integrations.kube.kubeconfig import KubeTarget
from engine.integrations.kube.network import pool_manager
from engine.integrations.kube.response import MESSAGE_MAX_CHARS, KubeResponse, refusal
from engine.integrations.kube.retry import (
    RETRYABLE_ERRORS,
    RETRYABLE_STATUSES,
    RetryPolicy,
    retry_after_seconds,
    transport_failure,
)
from engine.integrations.upstream import AnswerLimit, Deadline, UnreadableAnswer, read_answer

DEFAULT_REQUEST_TIMEOUT_S = 30.0
CONNECT_TIMEOUT_MAX_S = 10.0
DEFAULT_RETRY_POLICY = RetryPolicy()
#: The caps on one API answer (KUBE_ANSWER_MAX_BYTES, KUBE_ANSWER_MAX_S).
DEFAULT_ANSWER_LIMIT = AnswerLimit(
    2 * 1024 * 1024, 60.0, "KUBE_ANSWER_MAX_BYTES", "KUBE_ANSWER_MAX_S"
)


class KubeApi:
    """One run's connection to one cluster's API server: a pool on the checked addresses, the
    credential, the retry policy and the answer cap."""

    def __init__(
        self,
        target: KubeTarget,
        addresses: tuple[str, ...],
        *,
        user_agent: str,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        answer_limit: AnswerLimit = DEFAULT_ANSWER_LIMIT,
    ):
        """`addresses`: the server's addresses as NetworkPolicy.resolve checked them."""
        self.target = target
        self.retry = retry
        self.answer_limit = answer_limit
        self._timeout = (min(CONNECT_TIMEOUT_MAX_S, request_timeout_s), request_timeout_s)
        configuration = kube_client.Configuration(host=target.server)
        configuration.retries = False
        if target.token:
            configuration.api_key = {"BearerToken": target.token}
            configuration.api_key_prefix = {"BearerToken": "Bearer"}
        self._api = kube_client.ApiClient(configuration)
        self._api.user_agent = user_agent
        # The generated REST layer can only take TLS material as file paths and looks the host up
        # itself; a pool on the in-memory SSLContext, pinned to the checked addresses, replaces
        # the one it made (which never opened a connection).
        self._api.rest_client.pool_manager.clear()
        self._api.rest_client.pool_manager = pool_manager(target, addresses)
        self._closer = weakref.finalize(self, self._api.rest_client.pool_manager.clear)

    def close(self) -> None:
        """Close pooled connections (also done when the object is collected)."""
        self._closer()

    def request(
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
