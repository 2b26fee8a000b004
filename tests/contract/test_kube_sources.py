"""Every cluster-bound source kind deploys end to end through the Kubernetes adapter to kmock:
database (StatefulSet), template (the catalog's redis), prompt and github (the sandbox devbox and
gateway's plan); the image kind is in test_kube_app.py."""

import re

import pytest

from engine.integrations.kube.retry import RetryPolicy
from tests.contract.helpers import deploy, echo, wait_finished, workload_status

WORKLOAD = re.compile(r"^/apis/apps/v1/namespaces/demo/(deployments|statefulsets)/[a-z0-9-]+$")


def ready(request):
    """A GET of any workload answers it fully available."""
    return workload_status(available=1, name=request.url.path.rsplit("/", 1)[-1])


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
def test_each_source_kind_deploys_through_the_adapter(kube_app, mock_server, mock, source, kinds):
    mock["patch"] << 201 << echo
    mock["get", WORKLOAD] << ready
    client = kube_app(RetryPolicy(max_retries=2, backoff_s=0.01)).test_client()
    response = deploy(client, mock_server.url, source)
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
