"""Contract: the user's kubeconfig is used from memory only (TLS included) and never leaves a
file behind; kubeconfigs that would make the server read files or run commands are refused."""

import base64
import os
import re
import tempfile
from pathlib import Path

import gevent
import pytest

from engine.abort import CANCEL, Aborted, AbortSignal
from engine.integrations.base import ApplyError, ClusterUnreachable
from engine.integrations.kube.kubeconfig import InvalidKubeconfig, parse_kubeconfig
from engine.integrations.kube.network import check_kubeconfig
from tests.contract.conftest import (
    TOKEN,
    established_client_sockets,
    kubeconfig_for,
    open_fd_targets,
)
from tests.contract.helpers import DEPLOYMENT, DEPLOYMENT_PATH, echo, patches, status
from tests.helpers import wait_for

SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "metadata": {"name": "web", "namespace": "demo"},
    "spec": {"ports": [{"port": 80}]},
}


@pytest.fixture
def tls_kubeconfig(tls_mock_server, tls_ca, client_cert):
    cert_pem, key_pem = client_cert
    return kubeconfig_for(
        tls_mock_server.url, ca_pem=tls_ca.cert_pem.bytes(), cert_pem=cert_pem, key_pem=key_pem
    )


def test_tls_with_ca_and_client_certificate_data_works_from_memory(
    backend, tls_mock_server, tls_kubeconfig
):
    tls_mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo

    with backend.cluster(tls_kubeconfig) as kube:
        assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"

    [patch] = patches(tls_mock_server.mock)
    assert patch.url.scheme == "https"
    assert patch.headers["Authorization"] == f"Bearer {TOKEN}"


def test_without_the_client_certificate_the_tls_server_refuses(backend, tls_mock_server, tls_ca):
    kubeconfig = kubeconfig_for(tls_mock_server.url, ca_pem=tls_ca.cert_pem.bytes())

    with backend.cluster(kubeconfig) as kube, pytest.raises(ClusterUnreachable):
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert list(tls_mock_server.mock) == []


def test_a_server_certificate_from_another_ca_is_refused_without_retrying(
    backend, tls_mock_server, client_cert
):
    import trustme

    cert_pem, key_pem = client_cert
    kubeconfig = kubeconfig_for(
        tls_mock_server.url,
        ca_pem=trustme.CA().cert_pem.bytes(),
        cert_pem=cert_pem,
        key_pem=key_pem,
    )

    with (
        backend.cluster(kubeconfig) as kube,
        pytest.raises(
            ClusterUnreachable, match="TLS handshake failed.*CERTIFICATE_VERIFY_FAILED"
        ) as caught,
    ):
        kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert "gave up" not in str(caught.value)
    assert list(tls_mock_server.mock) == []


def test_tls_server_name_is_what_the_certificate_is_checked_against(
    backend, tls_mock_server, tls_ca, client_cert
):
    tls_mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    cert_pem, key_pem = client_cert
    # The certificate names 127.0.0.1, not localhost.
    server = tls_mock_server.url.replace("127.0.0.1", "localhost")
    named = kubeconfig_for(
        server,
        ca_pem=tls_ca.cert_pem.bytes(),
        cert_pem=cert_pem,
        key_pem=key_pem,
        **{"tls-server-name": "127.0.0.1"},
    )
    unnamed = kubeconfig_for(
        server, ca_pem=tls_ca.cert_pem.bytes(), cert_pem=cert_pem, key_pem=key_pem
    )

    with backend.cluster(named) as kube:
        assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"
    with (
        backend.cluster(unnamed) as kube,
        pytest.raises(ClusterUnreachable, match="Hostname mismatch"),
    ):
        kube.apply(DEPLOYMENT, abort=AbortSignal())


@pytest.mark.filterwarnings("ignore::urllib3.exceptions.InsecureRequestWarning")
def test_insecure_skip_tls_verify_skips_verification(backend, tls_mock_server, client_cert):
    tls_mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    cert_pem, key_pem = client_cert
    kubeconfig = kubeconfig_for(
        tls_mock_server.url,
        cert_pem=cert_pem,
        key_pem=key_pem,
        **{"insecure-skip-tls-verify": True},
    )

    with backend.cluster(kubeconfig) as kube:
        assert kube.apply(DEPLOYMENT, abort=AbortSignal()).action == "created"


# -- nothing left behind -------------------------------------------------------------------------


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """An empty $TMPDIR for this test: anything `tempfile` writes lands here."""
    directory = tmp_path / "tmpdir"
    directory.mkdir()
    monkeypatch.setenv("TMPDIR", str(directory))
    monkeypatch.setattr(tempfile, "tempdir", str(directory))
    return directory


def files_holding(secret: bytes, roots) -> list[str]:
    """Regular files under `roots` whose content contains `secret`."""
    found = []
    for root in roots:
        for path in Path(root).rglob("*"):
            try:
                if path.is_file() and not path.is_symlink() and secret in path.read_bytes():
                    found.append(str(path))
            except OSError:
                continue  # another process's file vanished or is unreadable
    return found


def scenario_success(kube, mock_server):
    mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    kube.apply(DEPLOYMENT, abort=AbortSignal())


def scenario_exception_mid_run(kube, mock_server):
    mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock_server.mock["patch /api/v1/namespaces/demo/services/web"] << 422 << status(422, "bad")
    kube.apply(DEPLOYMENT, abort=AbortSignal())
    with pytest.raises(ApplyError):
        kube.apply(SERVICE, abort=AbortSignal())


def scenario_abort_mid_request(kube, mock_server):
    mock_server.mock[f"patch {DEPLOYMENT_PATH}"] << mock_server.hang()
    abort = AbortSignal()
    call = gevent.spawn(kube.apply, DEPLOYMENT, abort=abort)
    wait_for(lambda: patches(mock_server.mock), message="the PATCH to reach the mock")
    abort.abort(CANCEL)
    call.join(timeout=20)  # bounds a failure only
    assert isinstance(call.exception, Aborted)


@pytest.mark.parametrize(
    "scenario", [scenario_success, scenario_exception_mid_run, scenario_abort_mid_request]
)
def test_no_file_is_left_behind(
    backend, tls_mock_server, tls_kubeconfig, client_cert, private_tmp, scenario
):
    _, key_pem = client_cert
    system_tmp = Path("/tmp")
    before_tmp = set(system_tmp.iterdir())
    before_fds = open_fd_targets()

    kube = backend.cluster(tls_kubeconfig)  # the memfd path: a client key is loaded
    scenario(kube, tls_mock_server)
    # The runtime drops its cluster at the end of a run; dropping closes its connections.
    del kube
    # A killed request greenlet closes its connection in the background: wait for that (it
    # bounds a failure only), then look for anything still held.
    wait_for(
        lambda: established_client_sockets(tls_mock_server.port) == 0,
        30,
        message="the dropped cluster's connections to close",
    )

    assert list(private_tmp.iterdir()) == []
    new_in_tmp = set(system_tmp.iterdir()) - before_tmp
    assert files_holding(key_pem, new_in_tmp) == []
    leaked = [t for t in (open_fd_targets() - before_fds) if not t.startswith("socket:[")]
    assert leaked == []  # no memfd, temp file or deleted-but-open file still held
    assert len(patches(tls_mock_server.mock)) >= 1  # the scenario really talked TLS


def test_the_checks_above_catch_the_loader_this_adapter_avoids(
    private_tmp, tls_kubeconfig, client_cert
):
    # kubernetes.config's own loader writes *-data fields to temp files: the detector sees it.
    from kubernetes import config

    _, key_pem = client_cert

    config.new_client_from_config_dict(tls_kubeconfig).close()

    assert files_holding(key_pem, [private_tmp]) != []


# -- refused and malformed kubeconfigs -----------------------------------------------------------


def with_user(**user):
    config = kubeconfig_for("https://k8s.example:6443", token=None)
    config["users"][0]["user"] = user
    return config


def with_cluster(**cluster):
    config = kubeconfig_for("https://k8s.example:6443")
    config["clusters"][0]["cluster"].update(cluster)
    return config


@pytest.mark.parametrize(
    "kubeconfig, message",
    [
        (
            with_user(exec={"command": "aws", "args": ["eks", "get-token"]}),
            # The next step in words: what to put in the kubeconfig instead.
            "user.exec is not supported by this server; it runs a program to get credentials, "
            "which this server never does; use a token",
        ),
        (with_user(**{"auth-provider": {"name": "oidc"}}), "user.auth-provider is not supported"),
        (
            with_user(tokenFile="/var/run/secrets/kubernetes.io/serviceaccount/token"),
            "user.tokenFile is not supported by this server; use token",
        ),
        (
            with_user(**{"client-certificate": "/etc/cert.pem", "client-key": "/etc/key.pem"}),
            "user.client-certificate is not supported by this server; use client-certificate-data",
        ),
        (with_user(username="admin", password="hunter2"), "user.username is not supported"),
        (
            with_cluster(**{"certificate-authority": "/etc/ca.pem"}),
            "cluster.certificate-authority is not supported by this server; "
            "use certificate-authority-data",
        ),
        (with_cluster(**{"proxy-url": "http://proxy:3128"}), "cluster.proxy-url is not supported"),
        (with_cluster(server="k8s.example:6443"), "cluster.server must be an http(s) URL"),
        (
            with_cluster(**{"certificate-authority-data": "not base64!"}),
            "certificate-authority-data is not valid base64",
        ),
        (
            with_user(**{"client-certificate-data": base64.b64encode(b"-----BEGIN X").decode()}),
            "client-certificate-data and client-key-data go together",
        ),
        (
            {**kubeconfig_for("https://k8s.example"), "current-context": "other"},
            "no context named 'other'",
        ),
        ({"clusters": [], "users": [], "contexts": []}, "no current-context"),
        ("just a string", "must be a YAML document with clusters, contexts and users"),
    ],
)
def test_unusable_kubeconfigs_are_refused_by_name(kubeconfig, message):
    with pytest.raises(InvalidKubeconfig, match=re.escape(message)):
        parse_kubeconfig(kubeconfig)


def test_unloadable_tls_material_is_refused_before_any_request(client_cert):
    cert_pem, _ = client_cert
    broken_key = b"-----BEGIN PRIVATE KEY-----\nnope\n-----END PRIVATE KEY-----\n"
    kubeconfig = kubeconfig_for("https://k8s.example:6443", cert_pem=cert_pem, key_pem=broken_key)

    with pytest.raises(InvalidKubeconfig, match="client certificate or key cannot be loaded"):
        check_kubeconfig(kubeconfig)


def test_secrets_stay_out_of_messages_and_reprs(client_cert):
    cert_pem, key_pem = client_cert
    target = parse_kubeconfig(
        kubeconfig_for("https://k8s.example:6443", cert_pem=cert_pem, key_pem=key_pem)
    )
    with pytest.raises(InvalidKubeconfig) as caught:
        parse_kubeconfig(with_user(username="admin", password="hunter2"))

    assert TOKEN not in repr(target) and b"PRIVATE KEY" not in repr(target).encode()
    assert "hunter2" not in str(caught.value)


def test_the_only_context_is_used_when_none_is_current():
    config = kubeconfig_for("https://k8s.example:6443", namespace="team-a")
    del config["current-context"]

    target = parse_kubeconfig(config)

    assert (target.server, target.namespace, target.token) == (
        "https://k8s.example:6443",
        "team-a",
        TOKEN,
    )


def test_os_memfd_is_what_keeps_the_key_off_disk():
    # The no-file guarantee above rests on memfd; say so plainly if a platform lacks it.
    assert hasattr(os, "memfd_create")
