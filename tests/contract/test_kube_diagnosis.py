"""Contract: the reads that say why a workload is not ready (pods, events, pods/log), request by
request against kmock, and a run through the real app that names the cause from them."""

import pytest

from engine.abort import AbortSignal
from engine.integrations.base import Forbidden
from engine.integrations.kube.retry import RetryPolicy
from tests.contract.conftest import kubeconfig_for
from tests.contract.helpers import (
    DEPLOYMENT_PATH,
    SERVICE_PATH,
    deploy,
    echo,
    header,
    status,
    wait_finished,
    workload_status,
)
from tests.helpers import assert_nowhere, canary, dump_database

PODS_PATH = "/api/v1/namespaces/demo/pods"
EVENTS_PATH = "/api/v1/namespaces/demo/events"
LOG_PATH = "/api/v1/namespaces/demo/pods/web-7c9f/log"
IMAGE = {"kind": "image", "image": "nginx:1.99", "name": "web", "port": 80}


def pod(state: dict, last: dict | None = None, restarts: int = 0) -> dict:
    """A pod of Deployment/web as the API lists it, its one container in `state`."""
    return {
        "metadata": {"name": "web-7c9f", "namespace": "demo", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.99"}]},
        "status": {
            "phase": "Pending",
            "conditions": [{"type": "Ready", "status": "False"}],
            "containerStatuses": [
                {
                    "name": "web",
                    "image": "nginx:1.99",
                    "ready": False,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": {"terminated": last} if last else {},
                }
            ],
        },
    }


def pod_list(*pods) -> dict:
    return {"kind": "PodList", "apiVersion": "v1", "items": list(pods)}


def event_list(reason: str, message: str) -> dict:
    return {
        "kind": "EventList",
        "apiVersion": "v1",
        "items": [
            {
                "involvedObject": {"kind": "Pod", "name": "web-7c9f", "namespace": "demo"},
                "reason": reason,
                "message": message,
                "type": "Warning",
                "lastTimestamp": "2026-12-01T00:00:00Z",
            }
        ],
    }


def test_the_reads_ask_for_the_workloads_pods_one_pods_events_and_a_crashed_log(kube, mock):
    mock[f"get {PODS_PATH}"] << pod_list(pod({"running": {}}))
    mock[f"get {EVENTS_PATH}"] << event_list("Unhealthy", "Readiness probe failed: 503")
    mock[f"get {LOG_PATH}"] << b"booting\nfatal: no DATABASE_URL\n"

    pods = kube.pods("demo", {"app": "web", "tier": "front"}, abort=AbortSignal())
    events = kube.events("demo", "web-7c9f", abort=AbortSignal())
    log = kube.log_tail("demo", "web-7c9f", "web", lines=5, abort=AbortSignal())

    assert [p["metadata"]["name"] for p in pods] == ["web-7c9f"]
    assert [e["reason"] for e in events] == ["Unhealthy"]
    assert log == "booting\nfatal: no DATABASE_URL"
    [listing] = mock[f"get {PODS_PATH}"]
    assert listing.params == {"labelSelector": "app=web,tier=front", "limit": "20"}
    [about] = mock[f"get {EVENTS_PATH}"]
    assert about.params == {"fieldSelector": "involvedObject.name=web-7c9f"}
    [logged] = mock[f"get {LOG_PATH}"]
    assert logged.params == {
        "container": "web",
        "tailLines": "5",
        "limitBytes": "16384",
        "previous": "true",
    }


def test_a_container_that_never_crashed_gives_its_current_log(kube, mock):
    mock[f"get {LOG_PATH}"][:1] << 400 << status(400, "previous terminated container not found")
    mock[f"get {LOG_PATH}"] << b"still starting\n"

    assert kube.log_tail("demo", "web-7c9f", "web", lines=5, abort=AbortSignal()) == (
        "still starting"
    )
    assert [r.params["previous"] for r in mock[f"get {LOG_PATH}"]] == ["true", "false"]


def test_reads_the_credential_may_not_make_are_forbidden_naming_them(kube, mock):
    mock[f"get {EVENTS_PATH}"] << 403 << status(403, 'events is forbidden: User "dev"')

    with pytest.raises(Forbidden) as caught:
        kube.events("demo", "web-7c9f", abort=AbortSignal())

    assert (caught.value.verb, caught.value.resource, caught.value.namespace) == (
        "list",
        "events",
        "demo",
    )


def script_a_deployment_that_never_becomes_ready(mock):
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock[f"patch {SERVICE_PATH}"] << 201 << echo
    mock[f"get {DEPLOYMENT_PATH}"] << workload_status(available=0)


def test_an_image_that_does_not_exist_fails_the_run_at_once_naming_it(kube_app, mock_server, mock):
    script_a_deployment_that_never_becomes_ready(mock)
    mock[f"get {PODS_PATH}"] << pod_list(
        pod({"waiting": {"reason": "ImagePullBackOff", "message": 'Back-off pulling "nginx"'}})
    )
    mock[f"get {EVENTS_PATH}"] << event_list(
        "Failed",
        'Failed to pull image "nginx:1.99": rpc error: code = NotFound desc = not found',
    )
    # The readiness timeout is the app's default (10 minutes): only the fail-fast path ends it.
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    task_id = deploy(client, mock_server.url, IMAGE).get_json()["id"]
    snapshot = wait_finished(client, task_id)

    assert snapshot["failure"]["reason"] == "image_not_found"
    assert snapshot["failure"]["message"].startswith(
        "Deployment/web cannot become ready: web-7c9f: back-off pulling image nginx:1.99: not found"
    )
    [listing] = mock[f"get {PODS_PATH}"][:1]
    # The manifest's own selector (what the direct runner renders for an image source).
    assert listing.params["labelSelector"] == "app.kubernetes.io/name=web"


def test_a_crash_loop_is_named_with_its_log_lines_scrubbed(kube_app, mock_server, mock, sql_conn):
    password = canary("kmock-crash")
    script_a_deployment_that_never_becomes_ready(mock)
    mock[f"get {PODS_PATH}"] << pod_list(
        pod(
            {"waiting": {"reason": "CrashLoopBackOff"}},
            last={"exitCode": 3, "reason": "Error"},
            restarts=6,
        )
    )
    mock[f"get {EVENTS_PATH}"] << {"items": []}
    mock[f"get {LOG_PATH}"] << f"connecting with password {password}\nexit 3\n".encode()
    mock["patch /api/v1/namespaces/demo/secrets/web-env"] << 201 << echo  # the password's home
    # A crash loop may heal by waiting; an operator who thinks not makes it fail fast.
    client = kube_app(RetryPolicy(max_retries=0), readiness_fail_fast="crash_loop").test_client()

    task_id = client.post(
        "/api/v1/tasks",
        headers=header(kubeconfig_for(mock_server.url)),
        json={"projectId": "demo", "source": IMAGE, "inputs": {"DB_PASSWORD": password}},
    ).get_json()["id"]
    snapshot = wait_finished(client, task_id)

    assert snapshot["failure"]["reason"] == "crash_loop"
    message = snapshot["failure"]["message"]
    assert "container web keeps crashing: exit code 3 (Error), restarted 6 times" in message
    assert "last log lines:\nconnecting with password [redacted]\nexit 3" in message
    assert mock[f"get {LOG_PATH}"]  # positive control: the log, password included, was read
    assert_nowhere([password], message, dump_database(sql_conn))
