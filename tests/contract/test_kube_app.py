"""End to end through the real app: CLUSTER_BACKEND=kubernetes deploys an image source through the
Kubernetes adapter to kmock, and refuses requests that bring no usable kubeconfig."""

import pytest
import yaml

from engine.integrations.kube_retry import RetryPolicy
from tests.contract.conftest import kubeconfig_for
from tests.contract.helpers import (
    DEPLOYMENT_PATH,
    SERVICE_PATH,
    deploy,
    echo,
    header,
    wait_finished,
    workload_status,
)
from tests.helpers import IMAGE_SOURCE


def test_an_image_source_deploys_to_completed_through_the_adapter(kube_app, mock_server, mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock[f"patch {SERVICE_PATH}"] << 201 << echo
    mock[f"get {DEPLOYMENT_PATH}"][:2] << workload_status(available=0)
    mock[f"get {DEPLOYMENT_PATH}"] << workload_status(available=1)
    client = kube_app(RetryPolicy(max_retries=2, backoff_s=0.01)).test_client()

    response = deploy(client, mock_server.url, dict(IMAGE_SOURCE))
    assert response.status_code == 201, response.get_json()
    snapshot = wait_finished(client, response.get_json()["id"])

    assert snapshot["status"] == "completed", snapshot["failure"]
    assert [
        (r["kind"], r["name"], r["namespace"], r["action"]) for r in snapshot["appliedResources"]
    ] == [("Deployment", "web", "demo", "created"), ("Service", "web", "demo", "created")]
    sent = [r for r in mock["patch"]]
    assert [r.url.path for r in sent] == [DEPLOYMENT_PATH, SERVICE_PATH]
    assert all(
        r.params == {"fieldManager": "deploy-task-engine", "force": "true"}
        and r.headers["Content-Type"] == "application/apply-patch+yaml"
        for r in sent
    )
    assert (
        yaml.safe_load(sent[0].body)["spec"]["template"]["spec"]["containers"][0]["image"]
        == IMAGE_SOURCE["image"]
    )
    assert len(mock[f"get {DEPLOYMENT_PATH}"]) == 3  # two "not yet", then available


def refuse_deployment(mock):
    (
        mock[f"patch {DEPLOYMENT_PATH}"]
        << 422
        << {"kind": "Status", "code": 422, "message": 'Deployment.apps "web" is invalid: bad image'}
    )


def unserve_deployments(mock):
    del mock.resources["apps/v1/deployments"]


@pytest.mark.parametrize(
    "arrange, reason, message",
    [
        (
            refuse_deployment,
            "apply_failed",
            'applying Deployment/web failed: Deployment.apps "web" is invalid: '
            "bad image (HTTP 422)",
        ),
        (
            unserve_deployments,
            "unknown_kind",
            "applying Deployment/web failed: the cluster does not serve kind Deployment in apps/v1",
        ),
    ],
)
def test_a_refused_apply_fails_the_task_with_the_clusters_reason(
    kube_app, mock_server, mock, arrange, reason, message
):
    arrange(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    response = deploy(client, mock_server.url, dict(IMAGE_SOURCE))
    snapshot = wait_finished(client, response.get_json()["id"])

    assert snapshot["failure"] == {"reason": reason, "message": message}
    assert snapshot["appliedResources"] == []


def test_the_kubernetes_backend_requires_a_usable_kubeconfig(make_app, insert_task):
    # No integrations override: the app builds the kubernetes backend from its settings.
    app = make_app(cluster_backend="kubernetes", overrides={"integrations": None})
    client = app.test_client()
    body = {"projectId": "demo", "source": dict(IMAGE_SOURCE)}
    blocked = insert_task(status="blocked")
    exec_kubeconfig = kubeconfig_for("https://k8s.example:6443", token=None)
    exec_kubeconfig["users"][0]["user"] = {"exec": {"command": "gke-gcloud-auth-plugin"}}

    missing = client.post("/api/v1/tasks", json=body)
    missing_input = client.post(f"/api/v1/tasks/{blocked['id']}/input", json={"inputs": {}})
    unusable = client.post("/api/v1/tasks", json=body, headers=header(exec_kubeconfig))
    by_tool = client.post("/api/v1/tools/create_deployment", json=body)

    assert app.extensions["engine"].integrations.cluster_label == "kubernetes"
    assert (missing.status_code, missing.get_json()["code"]) == (400, "kubeconfig_required")
    assert (missing_input.status_code, missing_input.get_json()["code"]) == (
        400,
        "kubeconfig_required",
    )
    assert (by_tool.status_code, by_tool.get_json()["code"]) == (400, "kubeconfig_required")
    assert (unusable.status_code, unusable.get_json()["code"]) == (400, "invalid_request")
    assert "user.exec is not supported" in unusable.get_json()["message"]
    listed = client.get("/api/v1/tasks?projectId=demo").get_json()["items"]
    assert [t["id"] for t in listed] == [str(blocked["id"])]  # no task was created
    assert client.get(f"/api/v1/tasks/{blocked['id']}").get_json()["status"] == "blocked"
