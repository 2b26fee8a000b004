"""Every cluster-bound source kind deploys end to end through the Kubernetes adapter to kmock:
database (StatefulSet), template (the catalog's redis), prompt and github (the sandbox devbox and
gateway's plan); the image kind is in test_kube_app.py."""

import re

import pytest

from engine.integrations import Integrations
from engine.integrations.kube import KubeBackend
from engine.integrations.kube_retry import RetryPolicy
from tests.contract.conftest import LOOPBACK, LOOPBACK_SETTINGS, kubeconfig_for
from tests.contract.helpers import echo, header, wait_finished

WORKLOAD = re.compile(r"^/apis/apps/v1/namespaces/demo/(deployments|statefulsets)/[a-z0-9-]+$")


def ready(request):
    """A GET of any workload answers it fully available."""
    name = request.url.path.rsplit("/", 1)[-1]
    return {
        "metadata": {"name": name, "namespace": "demo", "generation": 1},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": 1,
            "availableReplicas": 1,
        },
    }


@pytest.mark.parametrize(
    "source, kinds",
    [
        (
            {"kind": "database", "engine": "postgresql", "name": "orders"},
            ["Secret", "Service", "StatefulSet"],
        ),
        (
            {"kind": "template", "template": "redis", "args": {"password": "r3dis-pass-0001"}},
            ["Secret", "Service", "StatefulSet"],
        ),
        ({"kind": "prompt", "prompt": "a redis cache for the shop"}, None),
        ({"kind": "github", "repo": "octo/shop"}, None),
    ],
    ids=["database", "template", "prompt", "github"],
)
def test_each_source_kind_deploys_through_the_adapter(make_app, mock_server, mock, source, kinds):
    mock["patch"] << 201 << echo
    mock["get", WORKLOAD] << ready
    backend = KubeBackend(
        field_manager="deploy-task-engine",
        retry=RetryPolicy(max_retries=2, backoff_s=0.01),
        network=LOOPBACK,
    )
    app = make_app(
        cluster_backend="kubernetes",
        **LOOPBACK_SETTINGS,
        overrides={
            "integrations": Integrations(cluster=backend.cluster, cluster_label=backend.label)
        },
    )
    client = app.test_client()
    response = client.post(
        "/api/v1/tasks",
        headers=header(kubeconfig_for(mock_server.url)),
        json={"projectId": "demo", "source": source},
    )
    assert response.status_code == 201, response.get_json()
    snapshot = wait_finished(client, response.get_json()["id"])
    assert snapshot["status"] == "completed", snapshot["failure"]
    applied = [r["kind"] for r in snapshot["appliedResources"]]
    if kinds is not None:
        assert applied == kinds
    sent = [r for r in mock["patch"]]
    assert len(sent) == len(applied) > 0
    assert all(
        r.params == {"fieldManager": "deploy-task-engine", "force": "true"}
        and r.headers["Content-Type"] == "application/apply-patch+yaml"
        and "/namespaces/demo/" in r.url.path
        for r in sent
    )
