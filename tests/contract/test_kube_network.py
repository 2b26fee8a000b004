"""Contract: a kubeconfig's server cannot make this server a proxy into its own network.

The host is resolved once and every address checked (loopback, link-local, private, CGNAT,
unique-local and unspecified are refused unless KUBE_ALLOWED_NETWORKS opts them in); connections
go to exactly the checked addresses; an upstream's error text reaches a task only as its
structured message, bounded.
"""

import re
import socket

import pytest

from engine.abort import AbortSignal
from engine.integrations.base import ApplyError, ClusterUnreachable
from engine.integrations.kube.backend import KubeBackend
from engine.integrations.kube.kubeconfig import InvalidKubeconfig
from engine.integrations.kube.network import NetworkPolicy, check_kubeconfig
from engine.integrations.kube.retry import RetryPolicy
from tests.contract.conftest import FAST_RETRY, LOOPBACK, kubeconfig_for
from tests.contract.helpers import (
    DEPLOYMENT,
    DEPLOYMENT_PATH,
    CountingListener,
    echo,
    header,
    patches,
)
from tests.helpers import IMAGE_SOURCE, wait_for

STRICT = NetworkPolicy()


@pytest.mark.parametrize(
    "server",
    [
        "https://169.254.169.254",
        "https://10.1.2.3:6443",
        "https://172.16.0.1",
        "https://192.168.1.1",
        "https://127.0.0.1:6443",
        "https://localhost:6443",
        "https://[::1]:6443",
        "https://2130706433",
        "https://0x7f.1",
        "https://0.0.0.0",
        "https://[::]",
        "https://100.64.0.1",
        "https://[fd00::1]",
        "https://[fe80::1]",
        "https://[::ffff:127.0.0.1]",
        "https://[::ffff:169.254.169.254]",
        "https://metadata.google.internal",
    ],
)
def test_internal_addresses_are_refused(server):
    with pytest.raises(InvalidKubeconfig, match="cluster.server"):
        check_kubeconfig(kubeconfig_for(server), STRICT)


@pytest.mark.parametrize(
    "server, message",
    [
        ("https://user:pw@8.8.8.8", "user name or password"),
        ("https://token@8.8.8.8", "user name or password"),
        ("https://8.8.8.8/?", "query or fragment"),
        ("https://8.8.8.8/api?x=1", "query or fragment"),
        ("https://8.8.8.8/#", "query or fragment"),
        ("http://8.8.8.8", "must be https"),
        ("ftp://8.8.8.8", "http(s) URL"),
        ("https://8.8.8.8:99999", "invalid port"),
    ],
)
def test_urls_that_reshape_the_request_are_refused(server, message):
    with pytest.raises(InvalidKubeconfig, match=re.escape(message)):
        check_kubeconfig(kubeconfig_for(server), STRICT)


def test_a_public_address_passes_and_operator_networks_opt_back_in():
    check_kubeconfig(kubeconfig_for("https://8.8.8.8:6443"), STRICT)  # positive control
    lab = NetworkPolicy.parse("10.0.0.0/8", allow_http=True)

    check_kubeconfig(kubeconfig_for("http://10.1.2.3:6443"), lab)
    with pytest.raises(InvalidKubeconfig, match="cluster.server"):
        check_kubeconfig(kubeconfig_for("https://192.168.1.1"), lab)
    with pytest.raises(ValueError, match="not a CIDR"):
        NetworkPolicy.parse("10.0.0.0/8,nonsense")


@pytest.fixture
def listener():
    server = CountingListener()
    yield server
    server.stop()


def test_a_refused_server_receives_zero_connections(make_app, insert_task, listener):
    # Default settings: no KUBE_ALLOWED_NETWORKS. The app builds its kubernetes backend.
    app = make_app(cluster_backend="kubernetes", overrides={"integrations": None})
    client = app.test_client()
    internal = header(kubeconfig_for(f"https://127.0.0.1:{listener.port}"))
    blocked = insert_task(status="blocked")

    created = client.post(
        "/api/v1/tasks", headers=internal, json={"projectId": "demo", "source": dict(IMAGE_SOURCE)}
    )
    answered = client.post(
        f"/api/v1/tasks/{blocked['id']}/input", headers=internal, json={"inputs": {"x": "y"}}
    )
    by_tool = client.post(
        "/api/v1/tools/create_deployment",
        headers=internal,
        json={"projectId": "demo", "source": dict(IMAGE_SOURCE)},
    )
    # A run whose kubeconfig reached the backend anyway (another caller, a changed DNS answer).
    strict_run = KubeBackend(retry=RetryPolicy(max_retries=0)).cluster(
        kubeconfig_for(f"https://127.0.0.1:{listener.port}")
    )
    with pytest.raises(ApplyError, match="cluster.server"):
        strict_run.apply(DEPLOYMENT, abort=AbortSignal())

    for response in (created, answered, by_tool):
        assert response.status_code == 400, response.get_json()
        assert response.get_json()["code"] == "invalid_request"
        assert "X-Kubeconfig: cluster.server" in response.get_json()["message"]
    assert client.get("/api/v1/tasks?projectId=demo").get_json()["items"] == [
        client.get(f"/api/v1/tasks/{blocked['id']}").get_json()
    ]
    # Positive control: the same address, opted in, is reached (and counted).
    opted_in = KubeBackend(
        retry=RetryPolicy(max_retries=0), network=NetworkPolicy.parse("127.0.0.1/32")
    ).cluster(kubeconfig_for(f"https://127.0.0.1:{listener.port}"))
    with pytest.raises(ClusterUnreachable):
        opted_in.apply(DEPLOYMENT, abort=AbortSignal())
    wait_for(lambda: listener.accepted >= 1, message="the opted-in connection")
    assert listener.accepted == 1


def test_the_host_is_resolved_once_and_the_checked_address_is_the_one_connected_to(
    mock_server, monkeypatch
):
    mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    real = socket.getaddrinfo
    lookups = []

    def rebinding_resolver(host, port, *args, **kwargs):
        if host == "kube.rebind.test":
            lookups.append(host)
            # First answer: the (allowed) mock. Any later answer: the cloud metadata service.
            target = "127.0.0.1" if len(lookups) == 1 else "169.254.169.254"
            return real(target, port, *args, **kwargs)
        return real(host, port, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", rebinding_resolver)
    backend = KubeBackend(request_timeout_s=5.0, retry=FAST_RETRY, network=LOOPBACK)
    server = mock_server.url.replace("127.0.0.1", "kube.rebind.test")

    with backend.cluster(kubeconfig_for(server)) as kube:
        assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"

    assert lookups == ["kube.rebind.test"]
    [patch] = patches(mock_server.mock)
    assert patch.headers["Host"].startswith("kube.rebind.test")  # the name, not the address


def test_a_body_that_is_not_a_status_never_reaches_the_message(kube, mock):
    internal = "<html>internal admin console: db password hunter2</html>"
    mock[f"patch {DEPLOYMENT_PATH}"][:1] << 403 << internal.encode()
    structured = "deployments.apps is forbidden: " + "x" * 2000

    with pytest.raises(ApplyError) as raw:
        kube.apply(DEPLOYMENT, abort=AbortSignal())
    (
        mock[f"patch {DEPLOYMENT_PATH}"]
        << 403
        << {"kind": "Status", "code": 403, "message": structured}
    )
    with pytest.raises(ApplyError) as status:
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert "hunter2" not in str(raw.value) and "html" not in str(raw.value)
    assert str(raw.value).endswith(": no Status message (HTTP 403)")
    assert "deployments.apps is forbidden: xxx" in str(status.value)  # positive control
    assert len(str(status.value)) <= 520
