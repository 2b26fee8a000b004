"""End to end through the real app: CLUSTER_BACKEND=kubernetes deploys an image source through the
Kubernetes adapter to kmock, and refuses requests that bring no usable kubeconfig."""

import pytest
import yaml
from markupsafe import escape

from engine.integrations.kube.retry import RetryPolicy
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
from tests.helpers import IMAGE_SOURCE, free_port


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
            "invalid_manifest",
            "applying Deployment/web failed: the cluster rejects it as invalid: "
            'Deployment.apps "web" is invalid: bad image (HTTP 422)',
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


def refuse(code: int, message: str, **extra):
    def arrange(mock):
        body = {"kind": "Status", "code": code, "message": message, **extra}
        mock[f"patch {DEPLOYMENT_PATH}"] << code << body

    return arrange


@pytest.mark.parametrize(
    "arrange, reason, cause, next_words",
    [
        (
            refuse(401, "Unauthorized"),
            "cluster_unauthorized",
            "The cluster does not accept the kubeconfig's credentials: the cluster does not "
            "accept the kubeconfig's credentials (token or client certificate): Unauthorized "
            "(HTTP 401)",
            "fresh kubeconfig",
        ),
        (
            refuse(403, 'deployments.apps "web" is forbidden: User "dev" cannot patch'),
            "cluster_forbidden",
            "The credential is not allowed to do this (Deployment/web): the credential may not "
            'patch deployments.apps in namespace demo: deployments.apps "web" is forbidden: '
            'User "dev" cannot patch (HTTP 403)',
            "missing permission",
        ),
        (
            refuse(
                404,
                'namespaces "demo" not found',
                details={"name": "demo", "kind": "namespaces"},
            ),
            "namespace_not_found",
            "The target namespace does not exist (Deployment/web): namespace demo does not "
            'exist: namespaces "demo" not found (HTTP 404)',
            "Create the namespace",
        ),
        (
            refuse(409, 'Apply failed with 1 conflict: conflict with "helm": .spec.replicas'),
            "resource_conflict",
            "An object of the same name belongs to someone else (Deployment/web): the object "
            "exists and is held by another owner or manager: Apply failed with 1 conflict: "
            'conflict with "helm": .spec.replicas (HTTP 409)',
            "belongs to someone else",
        ),
        (
            refuse(
                422,
                'Deployment.apps "web" is invalid: spec.replicas: Invalid value: -1',
                details={"causes": [{"field": "spec.replicas"}]},
            ),
            "invalid_manifest",
            "The cluster rejected a resource as invalid (Deployment/web): the cluster rejects it "
            'as invalid (field spec.replicas): Deployment.apps "web" is invalid: spec.replicas: '
            "Invalid value: -1 (HTTP 422)",
            "Fix the named field",
        ),
        (
            refuse(400, 'admission webhook "policy.example" denied the request: no latest tag'),
            "admission_denied",
            "A policy of the cluster refused a resource (Deployment/web): denied by the "
            'cluster\'s admission control: admission webhook "policy.example" denied the '
            "request: no latest tag (HTTP 400)",
            "quoted rule",
        ),
    ],
)
def test_each_refusal_is_named_alike_in_the_api_the_explain_tool_and_the_page(
    kube_app, mock_server, mock, arrange, reason, cause, next_words
):
    arrange(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    task_id = deploy(client, mock_server.url, dict(IMAGE_SOURCE)).get_json()["id"]
    snapshot = wait_finished(client, task_id)
    explained = client.post("/api/v1/tools/explain_deployment", json={"taskId": task_id}).get_json()
    page = client.get(f"/tasks/{task_id}/timeline", follow_redirects=True).get_data(as_text=True)

    assert snapshot["failure"]["reason"] == reason
    assert f"It failed ({reason})" in explained["summary"]
    assert next_words in explained["nextSteps"][0]
    assert escape(cause) in page
    assert escape(explained["nextSteps"][0]) in page


def test_an_unreachable_cluster_is_not_called_a_refusal(kube_app):
    port = free_port()  # nothing listens there: every connection is refused
    client = kube_app(RetryPolicy(max_retries=2, backoff_s=0.01)).test_client()

    task_id = deploy(client, f"http://127.0.0.1:{port}", dict(IMAGE_SOURCE)).get_json()["id"]
    snapshot = wait_finished(client, task_id)
    page = client.get(f"/tasks/{task_id}/timeline", follow_redirects=True).get_data(as_text=True)

    assert snapshot["failure"] == {
        "reason": "cluster_unreachable",
        "message": "applying Deployment/web failed: cannot reach the cluster at "
        f"127.0.0.1:{port}: the connection was refused (3 attempts)",
    }
    assert (
        f"The cluster could not be reached: cannot reach the cluster at 127.0.0.1:{port}: "
        "the connection was refused (3 attempts)"
    ) in page
    assert "fix the source" not in page
    assert escape("Check the kubeconfig's server address") in page


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
