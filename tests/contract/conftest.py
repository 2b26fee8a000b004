"""Fixtures for the Kubernetes adapter's contract tests: kmock servers, kubeconfigs, clusters."""

import base64
import os
import ssl
from collections import Counter

import pytest
import trustme

from engine.integrations import Integrations
from engine.integrations.kube.backend import KubeBackend
from engine.integrations.kube.network import NetworkPolicy
from engine.integrations.kube.retry import RetryPolicy
from tests.contract.kmock_server import KMockServer

TOKEN = "t0ken-for-contract-tests"
#: Fast enough for tests, still exercising the backoff path.
FAST_RETRY = RetryPolicy(max_retries=3, backoff_s=0.01, backoff_max_s=0.05)
#: kmock listens on plain http on 127.0.0.1: an operator would have to opt both in.
LOOPBACK = NetworkPolicy.parse("127.0.0.0/8,::1/128", allow_http=True)
#: The same opt-ins as app settings (KUBE_ALLOWED_NETWORKS, KUBE_ALLOW_HTTP).
LOOPBACK_SETTINGS = dict(kube_allowed_networks="127.0.0.0/8,::1/128", kube_allow_http=True)


def kubeconfig_for(
    server: str,
    *,
    namespace: str | None = None,
    token: str | None = TOKEN,
    ca_pem: bytes | None = None,
    cert_pem: bytes | None = None,
    key_pem: bytes | None = None,
    **cluster_extra,
) -> dict:
    """A kubeconfig dict as a user would send it (the `*-data` fields base64-encoded)."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    cluster = {"server": server, **cluster_extra}
    if ca_pem:
        cluster["certificate-authority-data"] = b64(ca_pem)
    user = {}
    if token:
        user["token"] = token
    if cert_pem:
        user["client-certificate-data"] = b64(cert_pem)
        user["client-key-data"] = b64(key_pem)
    context = {"cluster": "c", "user": "u"}
    if namespace:
        context["namespace"] = namespace
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "ctx",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "ctx", "context": context}],
    }


@pytest.fixture
def mock_server():
    """A plain-HTTP kmock Kubernetes API mock, stopped after the test."""
    server = KMockServer().start()
    yield server
    server.stop()


@pytest.fixture
def mock(mock_server):
    """The kmock DSL root of `mock_server` (script responses, read recorded requests)."""
    return mock_server.mock


@pytest.fixture
def backend():
    return KubeBackend(
        field_manager="contract-tests", request_timeout_s=5.0, retry=FAST_RETRY, network=LOOPBACK
    )


@pytest.fixture
def kube(backend, mock_server):
    """A KubeCluster on `mock_server` (token auth), closed after the test."""
    cluster = backend.cluster(kubeconfig_for(mock_server.url))
    yield cluster
    cluster.close()


@pytest.fixture
def kube_app(make_app):
    """Factory: an app (CLUSTER_BACKEND=kubernetes, and `settings`) whose runs reach kmock
    through the adapter under `retry`."""

    def factory(retry: RetryPolicy, **settings):
        backend = KubeBackend(retry=retry, network=LOOPBACK)
        return make_app(
            cluster_backend="kubernetes",
            **LOOPBACK_SETTINGS,
            **settings,
            overrides={
                "integrations": Integrations(cluster=backend.cluster, cluster_label=backend.label)
            },
        )

    return factory


@pytest.fixture(scope="session")
def tls_ca():
    return trustme.CA()


@pytest.fixture
def tls_mock_server(tls_ca):
    """An HTTPS kmock that requires a client certificate issued by `tls_ca`."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    # Loaded before the test looks at temp dirs: trustme passes the key through a temp file.
    tls_ca.issue_cert("127.0.0.1").configure_cert(context)
    tls_ca.configure_trust(context)
    context.verify_mode = ssl.CERT_REQUIRED
    server = KMockServer(ssl_context=context).start()
    yield server
    server.stop()


@pytest.fixture
def client_cert(tls_ca):
    """(cert PEM, key PEM) of a client certificate the TLS mock accepts."""
    leaf = tls_ca.issue_cert("deployer@contract-tests")
    return leaf.cert_chain_pems[0].bytes(), leaf.private_key_pem.bytes()


def open_fd_targets() -> Counter:
    """What this process's file descriptors point at (files, memfds, sockets), with counts."""
    targets = Counter()
    for fd in os.listdir("/proc/self/fd"):
        try:
            targets[os.readlink(f"/proc/self/fd/{fd}")] += 1
        except OSError:
            pass  # closed while listing (the listing's own fd)
    return targets


def established_client_sockets(port: int) -> int:
    """Open TCP connections of this process to 127.0.0.1:`port` (the client side only)."""
    inodes = {t[len("socket:[") : -1] for t in open_fd_targets() if t.startswith("socket:[")}
    count = 0
    with open("/proc/net/tcp") as table:
        next(table)
        for line in table:
            fields = line.split()
            remote, state, inode = fields[2], fields[3], fields[9]
            if int(remote.split(":")[1], 16) == port and state == "01" and inode in inodes:
                count += 1
    return count
