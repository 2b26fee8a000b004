"""Which cluster a run gets (CLUSTER_BACKEND=kubernetes): a KubeCluster for its kubeconfig,
connected only to the server's checked addresses, or a cluster that refuses every call with the
reason the kubeconfig cannot be used."""

import dataclasses
from typing import NoReturn

from engine.abort import AbortSignal
from engine.integrations.base import (
    AppliedResource,
    ApplyError,
    ClusterUnreachable,
    IntegrationError,
    Readiness,
    ResourceRef,
)
from engine.integrations.kube.api import (
    DEFAULT_ANSWER_LIMIT,
    DEFAULT_REQUEST_TIMEOUT_S,
    DEFAULT_RETRY_POLICY,
)
from engine.integrations.kube.cluster import DEFAULT_FIELD_MANAGER, DEFAULT_LOG_LIMIT, KubeCluster
from engine.integrations.kube.kubeconfig import (
    InvalidKubeconfig,
    KubeTarget,
    UnresolvableServer,
    parse_kubeconfig,
)
from engine.integrations.kube.network import NetworkPolicy, check_kubeconfig
from engine.integrations.kube.retry import RetryPolicy
from engine.integrations.upstream import AnswerLimit


class KubeBackend:
    """Builds a KubeCluster per run from the request's kubeconfig (CLUSTER_BACKEND=kubernetes)."""

    label = "kubernetes"

    def __init__(
        self,
        *,
        field_manager: str = DEFAULT_FIELD_MANAGER,
        request_timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        retry: RetryPolicy = DEFAULT_RETRY_POLICY,
        network: NetworkPolicy | None = None,
        answer_limit: AnswerLimit = DEFAULT_ANSWER_LIMIT,
        log_limit: AnswerLimit = DEFAULT_LOG_LIMIT,
    ):
        self.field_manager = field_manager
        self.request_timeout_s = request_timeout_s
        self.retry = retry
        self.network = network or NetworkPolicy()
        self.answer_limit, self.log_limit = answer_limit, log_limit

    @classmethod
    def from_settings(cls, settings) -> "KubeBackend":
        return cls(
            field_manager=settings.kube_field_manager,
            request_timeout_s=settings.kube_request_timeout_s,
            retry=RetryPolicy(
                max_retries=settings.kube_max_retries, backoff_s=settings.kube_retry_backoff_s
            ),
            network=NetworkPolicy.from_settings(settings),
            answer_limit=dataclasses.replace(
                DEFAULT_ANSWER_LIMIT,
                max_bytes=settings.kube_answer_max_bytes,
                max_s=settings.kube_answer_max_s,
            ),
            log_limit=dataclasses.replace(
                DEFAULT_LOG_LIMIT,
                max_bytes=settings.kube_log_max_bytes,
                max_s=settings.kube_answer_max_s,
            ),
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
        except UnresolvableServer:
            # Checked when the task was created; a name that stopped resolving is a cluster
            # that cannot be reached, not a kubeconfig to fix.
            return NoKubeconfig(
                f"cannot reach the cluster at {target.hostname}:{target.port}: "
                "the host name does not resolve",
                error=ClusterUnreachable,
            )
        except InvalidKubeconfig as exc:
            return NoKubeconfig(str(exc))
        return KubeCluster(
            target,
            addresses,
            field_manager=self.field_manager,
            request_timeout_s=self.request_timeout_s,
            retry=self.retry,
            answer_limit=self.answer_limit,
            log_limit=self.log_limit,
        )


class NoKubeconfig:
    """A run without a usable kubeconfig (the API refuses those; other callers may not, and a
    server name may resolve elsewhere by the time the run starts).

    Runs that never touch the cluster go on; the first cluster call fails with a typed error the
    runner reports ("applying Deployment/web failed: ..."), not as a crash at run start.
    """

    MESSAGE = "this run has no kubeconfig (send it in the X-Kubeconfig header)"

    def __init__(self, message: str = MESSAGE, *, error: type[IntegrationError] | None = None):
        self.message = message
        #: What every call raises; None: ApplyError from apply, InvalidKubeconfig otherwise.
        self.error = error

    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        abort.raise_if_aborted()
        if self.error is not None:
            raise self.error(self.message)
        raise ApplyError(self.message, ResourceRef.of(manifest))

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        self._refuse(abort)

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        self._refuse(abort)

    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        self._refuse(abort)

    def server_version(self, *, abort: AbortSignal) -> str:
        self._refuse(abort)

    def events(self, namespace: str, involved: str, *, abort: AbortSignal) -> list[dict]:
        self._refuse(abort)

    def log_tail(
        self, namespace: str, pod: str, container: str, *, lines: int, abort: AbortSignal
    ) -> str:
        self._refuse(abort)

    def _refuse(self, abort: AbortSignal) -> NoReturn:
        abort.raise_if_aborted()
        raise (self.error or InvalidKubeconfig)(self.message)

    def close(self) -> None:
        pass
