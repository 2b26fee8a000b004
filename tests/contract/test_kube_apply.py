"""Contract: what the Kubernetes adapter sends for server-side apply and delete, and how it
retries, gives up and stops, checked request by request against kmock."""

import time

import gevent
import kmock
import pytest
import yaml

from engine.abort import CANCEL, Aborted, AbortSignal
from engine.integrations.base import (
    AdmissionDenied,
    AppliedResource,
    ApplyError,
    ClusterUnavailable,
    ClusterUnreachable,
    CredentialsRefused,
    Forbidden,
    IntegrationError,
    InvalidManifest,
    NamespaceMissing,
    NotFound,
    OwnershipConflict,
    ResourceRef,
    UnknownKind,
)
from engine.integrations.kube.backend import KubeBackend
from engine.integrations.kube.retry import RetryPolicy, retry_after_seconds
from tests.contract.conftest import (
    FAST_RETRY,
    LOOPBACK,
    TOKEN,
    established_client_sockets,
    kubeconfig_for,
)
from tests.contract.helpers import DEPLOYMENT, DEPLOYMENT_PATH, echo, patches, status
from tests.helpers import free_port, wait_for


def test_apply_sends_one_server_side_apply_patch_per_document(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo

    result = kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert result == AppliedResource(ResourceRef("apps/v1", "Deployment", "web", "demo"), "created")
    [discovery, patch] = list(mock)
    assert (discovery.method, discovery.url.path) == ("GET", "/apis/apps/v1")
    assert patch.method == "PATCH"
    assert patch.url.path == DEPLOYMENT_PATH
    assert patch.params == {"fieldManager": "contract-tests", "force": "true"}
    assert patch.headers["Content-Type"] == "application/apply-patch+yaml"
    assert patch.headers["Authorization"] == f"Bearer {TOKEN}"
    assert yaml.safe_load(patch.body) == DEPLOYMENT


def test_apply_of_an_existing_object_is_configured(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 200 << echo

    assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "configured"


def test_a_kind_discovery_reports_cluster_scoped_is_refused_for_every_source(kube, mock):
    mock["patch /api/v1/namespaces/team-a"] << 201 << echo
    mock["patch /apis/rbac.authorization.k8s.io/v1/clusterroles/reader"] << 200 << echo
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": "reader", "namespace": "demo"},
        "rules": [],
    }

    assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"  # positive control
    for doc in (namespace, role):
        with pytest.raises(ApplyError, match="cluster-scoped"):
            kube.apply(doc, abort=AbortSignal())

    assert [r.url.path for r in mock["patch"]] == [DEPLOYMENT_PATH]


def test_a_namespaced_document_without_namespace_goes_to_the_context_namespace(
    backend, mock_server, mock
):
    mock["patch /api/v1/namespaces/ctx-ns/configmaps/settings"] << 201 << echo
    kube = backend.cluster(kubeconfig_for(mock_server.url, namespace="ctx-ns"))
    config_map = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings"},
        "data": {"a": "1"},
    }

    result = kube.apply(config_map, abort=AbortSignal())

    assert result.ref.namespace == "ctx-ns"
    assert len(mock["patch"]) == 1


def test_discovery_is_read_once_per_group_version_in_a_run(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock["patch /apis/apps/v1/namespaces/demo/statefulsets/db"] << 201 << echo
    statefulset = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "demo"},
        "spec": {},
    }

    kube.apply(DEPLOYMENT, abort=AbortSignal())
    kube.apply(statefulset, abort=AbortSignal())

    assert [r.url.path for r in mock["get"]] == ["/apis/apps/v1"]


def test_an_unknown_kind_in_a_served_group_version_is_unknown_kind(kube, mock):
    document = {
        "apiVersion": "apps/v1",
        "kind": "Frobnicator",
        "metadata": {"name": "x", "namespace": "demo"},
    }

    with pytest.raises(UnknownKind, match="does not serve kind Frobnicator in apps/v1") as caught:
        kube.apply(document, abort=AbortSignal())

    assert caught.value.ref == ResourceRef.of(document)
    assert caught.value.reason == "unknown_kind"
    assert [r.url.path for r in mock] == ["/apis/apps/v1"]  # read once, nothing applied


def test_an_unserved_group_version_is_unknown_kind(kube, mock):
    document = {
        "apiVersion": "example.com/v9",
        "kind": "Widget",
        "metadata": {"name": "x", "namespace": "demo"},
    }

    with pytest.raises(UnknownKind, match="does not serve example.com/v9"):
        kube.apply(document, abort=AbortSignal())

    assert [(r.method, r.url.path) for r in mock] == [("GET", "/apis/example.com/v9")]


def test_a_kind_installed_after_discovery_is_found_by_one_refresh(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock["patch /apis/apps/v1/namespaces/demo/widgets/w"] << 201 << echo
    kube.apply(DEPLOYMENT, abort=AbortSignal())  # caches apps/v1 without Widget
    mock.resources["apps/v1/widgets"] = kmock.ResourceInfo(kind="Widget", namespaced=True)

    kube.apply(
        {"apiVersion": "apps/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": "demo"}},
        abort=AbortSignal(),
    )

    assert [r.url.path for r in mock["get"]] == ["/apis/apps/v1", "/apis/apps/v1"]


@pytest.mark.parametrize(
    "code, body, error, words",
    [
        (
            422,
            {
                **status(422, 'Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1'),
                "reason": "Invalid",
                "details": {
                    "name": "web",
                    "kind": "deployments",
                    "causes": [{"reason": "FieldValueInvalid", "field": "spec.replicas"}],
                },
            },
            InvalidManifest,
            "the cluster rejects it as invalid (field spec.replicas): "
            'Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1 (HTTP 422)',
        ),
        (
            403,
            status(403, 'deployments.apps "web" is forbidden: User "dev" cannot patch resource'),
            Forbidden,
            "the credential may not patch deployments.apps in namespace demo: "
            'deployments.apps "web" is forbidden: User "dev" cannot patch resource (HTTP 403)',
        ),
        (
            404,
            {
                **status(404, 'namespaces "demo" not found'),
                "details": {"name": "demo", "kind": "namespaces"},
            },
            NamespaceMissing,
            'namespace demo does not exist: namespaces "demo" not found (HTTP 404)',
        ),
        (
            401,
            status(401, "Unauthorized"),
            CredentialsRefused,
            "the cluster does not accept the kubeconfig's credentials (token or client "
            "certificate): Unauthorized (HTTP 401)",
        ),
        (
            409,
            status(409, 'Apply failed with 1 conflict: conflict with "helm": .spec.replicas'),
            OwnershipConflict,
            "the object exists and is held by another owner or manager: Apply failed with 1 "
            'conflict: conflict with "helm": .spec.replicas (HTTP 409)',
        ),
        (
            400,
            status(
                400,
                'admission webhook "validate.kyverno.svc" denied the request: images must '
                "come from registry.example.com",
            ),
            AdmissionDenied,
            "denied by the cluster's admission control: admission webhook "
            '"validate.kyverno.svc" denied the request: images must come from '
            "registry.example.com (HTTP 400)",
        ),
    ],
)
def test_a_refused_document_names_who_refused_what_in_the_apis_words(
    kube, mock, code, body, error, words
):
    mock[f"patch {DEPLOYMENT_PATH}"] << code << body

    with pytest.raises(ApplyError) as caught:
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert type(caught.value) is error
    assert str(caught.value) == words
    assert caught.value.ref == ResourceRef.of(DEPLOYMENT)
    assert len(patches(mock)) == 1  # never retried


def test_a_forbidden_read_names_the_verb_resource_and_namespace(kube, mock):
    mock["get /api/v1/namespaces/demo/pods"] << 403 << status(403, "pods is forbidden")

    with pytest.raises(Forbidden) as caught:
        kube.pods("demo", {"app": "web"}, abort=AbortSignal())

    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == (
        "list",
        "pods",
        "demo",
    )


def test_429_and_503_are_retried_then_the_apply_succeeds(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"][:1] << 429 << {"Retry-After": "0"} << status(429, "slow")
    mock[f"patch {DEPLOYMENT_PATH}"][1:2] << 503 << status(503, "etcd leader changed")
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo

    result = kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert result.action == "created"
    sent = patches(mock)
    assert len(sent) == 3
    assert all(yaml.safe_load(r.body) == DEPLOYMENT for r in sent)  # the same document each time


def test_the_apply_gives_up_after_the_retry_bound(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 503 << status(503, "apiserver overloaded")

    with pytest.raises(ClusterUnavailable, match="gave up after 4 attempts.*apiserver overloaded"):
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert len(patches(mock)) == FAST_RETRY.max_retries + 1


def test_retry_after_is_honoured(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"][:1] << 429 << {"Retry-After": "1"} << status(429, "slow")
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo

    started = time.monotonic()
    kube.apply(DEPLOYMENT, abort=AbortSignal())
    elapsed = time.monotonic() - started

    # The policy's own backoff is 10-50 ms (FAST_RETRY): only Retry-After explains a second.
    # (The upper bound only has to stay far from a hang; a loaded machine is slow.)
    assert 1.0 <= elapsed < 10.0
    assert len(patches(mock)) == 2


def test_a_read_timeout_is_retried(mock_server, mock):
    mock[f"patch {DEPLOYMENT_PATH}"][:1] << mock_server.hang()
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    backend = KubeBackend(
        # The first PATCH hangs for ever; the retry must answer inside the timeout even on a
        # loaded machine (a 0.3 s timeout timed the retry out too, and counted a third PATCH).
        field_manager="contract-tests",
        request_timeout_s=3.0,
        retry=FAST_RETRY,
        network=LOOPBACK,
    )
    kube = backend.cluster(kubeconfig_for(mock_server.url))

    assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"
    assert len(patches(mock)) == 2


def test_an_unreachable_server_is_retried_then_reported(backend):
    port = free_port()
    kube = backend.cluster(kubeconfig_for(f"http://127.0.0.1:{port}"))

    started = time.monotonic()
    with pytest.raises(ClusterUnreachable) as caught:
        kube.apply(DEPLOYMENT, abort=AbortSignal())
    assert str(caught.value) == (
        f"cannot reach the cluster at 127.0.0.1:{port}: the connection was refused (4 attempts)"
    )
    assert caught.value.reason == "cluster_unreachable"
    assert time.monotonic() - started < 10.0  # short backoffs, no connect hang


def test_urllib3_does_not_retry_behind_the_policy(mock_server, mock):
    # urllib3's default policy would silently repeat a timed-out GET three more times.
    mock["get /apis/apps/v1"] << mock_server.hang()
    backend = KubeBackend(request_timeout_s=0.2, retry=RetryPolicy(max_retries=0), network=LOOPBACK)
    kube = backend.cluster(kubeconfig_for(mock_server.url))

    with pytest.raises(ClusterUnreachable, match="did not answer in time.*1 attempt"):
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert len(mock["get"]) == 1


def test_an_abort_mid_request_returns_within_a_second_and_closes_the_connection(
    kube, mock_server, mock
):
    mock[f"patch {DEPLOYMENT_PATH}"][:1] << mock_server.hang()
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    abort = AbortSignal()
    call = gevent.spawn(kube.apply, DEPLOYMENT, abort=abort)
    wait_for(lambda: patches(mock), message="the PATCH to reach the mock")
    assert established_client_sockets(mock_server.port) == 1

    started = time.monotonic()
    abort.abort(CANCEL)
    call.join(timeout=20)
    elapsed = time.monotonic() - started

    # The mechanism: the abort, not the (never coming) answer, ended the call and its socket
    # (the bound is generous for a loaded machine).
    assert elapsed < 20.0
    assert isinstance(call.exception, Aborted) and call.exception.reason == CANCEL
    wait_for(
        lambda: established_client_sockets(mock_server.port) == 0,
        timeout=30.0,
        message="the abandoned connection to close",
    )
    # The cluster object stays usable for the next call.
    assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"


class SleepRecordingSignal(AbortSignal):
    """An abort signal that records the waits it is asked for (and waits them as usual)."""

    def __init__(self):
        super().__init__()
        self.sleeps: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        super().sleep(seconds)


def test_an_abort_during_a_retry_wait_returns_at_once(kube, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 429 << {"Retry-After": "30"} << status(429, "slow")
    abort = SleepRecordingSignal()
    call = gevent.spawn(kube.apply, DEPLOYMENT, abort=abort)
    assert wait_for(lambda: abort.sleeps, 30, message="the Retry-After wait") == [30.0]

    started = time.monotonic()
    abort.abort(CANCEL)
    call.join(timeout=20)

    assert time.monotonic() - started < 20.0  # inside the 30 s Retry-After: the abort ended it
    assert isinstance(call.exception, Aborted)
    assert len(patches(mock)) == 1


def test_an_aborted_signal_sends_nothing(kube, mock):
    abort = AbortSignal()
    abort.abort(CANCEL)

    with pytest.raises(Aborted):
        kube.apply(DEPLOYMENT, abort=abort)

    assert list(mock) == []


def test_delete_asks_for_background_propagation_and_reports_absence(kube, mock):
    mock[f"delete {DEPLOYMENT_PATH}"][:1] << 200 << {"kind": "Status", "status": "Success"}
    ref = ResourceRef.of(DEPLOYMENT)

    kube.delete(ref, abort=AbortSignal())
    with pytest.raises(NotFound):
        kube.delete(ref, abort=AbortSignal())  # the scaffold's fallback: 404 Status

    deletes = list(mock["delete"])
    assert [(r.url.path, r.params) for r in deletes] == [
        (DEPLOYMENT_PATH, {"propagationPolicy": "Background"})
    ] * 2


@pytest.mark.parametrize(
    "header, seconds",
    [
        ("3", 3.0),
        (" 0 ", 0.0),
        ("Wed, 21 Oct 2015 07:28:10 GMT", 10.0),
        ("Wed, 21 Oct 2015 07:27:50 GMT", 0.0),
        ("soon", None),
        ("-1", None),
        (None, None),
    ],
)
def test_retry_after_takes_seconds_or_an_http_date(header, seconds):
    now = 1445412480.0  # Wed, 21 Oct 2015 07:28:00 GMT

    assert retry_after_seconds(header, now=now) == seconds


def test_backoff_doubles_with_jitter_up_to_its_ceiling_and_retry_after_is_capped():
    policy = RetryPolicy(backoff_s=0.5, backoff_max_s=8.0, retry_after_max_s=60.0)

    for retry, ceiling in [(0, 0.5), (1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (9, 8.0)]:
        delays = [policy.delay_s(retry, None) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
    assert policy.delay_s(0, 7.0) == 7.0
    assert policy.delay_s(0, 600.0) == 60.0


def test_a_run_without_kubeconfig_fails_at_its_first_cluster_call(backend):
    kube = backend.cluster(None)

    with pytest.raises(ApplyError, match="no kubeconfig") as caught:
        kube.apply(DEPLOYMENT, abort=AbortSignal())
    with pytest.raises(IntegrationError, match="no kubeconfig"):
        kube.readiness(ResourceRef.of(DEPLOYMENT), abort=AbortSignal())

    assert caught.value.ref == ResourceRef.of(DEPLOYMENT)


def test_a_server_name_that_stopped_resolving_is_an_unreachable_cluster(backend, monkeypatch):
    import socket

    def no_such_host(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_such_host)
    kube = backend.cluster(kubeconfig_for("https://kube.gone.example:6443"))

    with pytest.raises(ClusterUnreachable) as caught:
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert str(caught.value) == (
        "cannot reach the cluster at kube.gone.example:6443: the host name does not resolve"
    )
