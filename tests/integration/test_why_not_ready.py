"""Why a workload is not ready: said in the timeline while the run waits, named in the verdict,
at once for a cause waiting cannot heal. Each cause is the sandbox's documented marker, read back
through the same diagnosis a real cluster's pods go through."""

import pytest

from engine.integrations import Integrations
from engine.integrations.sandbox import SandboxCluster
from tests.helpers import assert_nowhere, canary, dump_database, events, wait_for_status


@pytest.fixture
def sandbox_app(make_app):
    """Factory: (client, sandbox) of an app on a quick sandbox cluster, with `settings`."""

    def factory(**settings):
        sandbox = SandboxCluster(
            apply_delay_s=0.0, ready_delay_s=0.05, never_ready=False, apply_error=""
        )
        integrations = Integrations(cluster=lambda kubeconfig: sandbox, cluster_label="sandbox")
        app = make_app(overrides={"integrations": integrations}, **settings)
        return app.test_client(), sandbox

    return factory


def deploy(client, image: str, **body) -> dict:
    source = {"kind": "image", "image": image, "name": "web", "port": 80}
    response = client.post("/api/v1/tasks", json={"projectId": "demo", "source": source, **body})
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def said_while_waiting(client, task_id) -> list[str]:
    return [
        e["payload"]["detail"]
        for e in events(client, task_id)
        if e["kind"] == "step" and e["payload"].get("state") == "waiting"
    ]


#: Long enough that a failure inside it can only be the fail-fast path.
PATIENT = 120.0


@pytest.mark.parametrize(
    "marker, reason, words",
    [
        (
            "sandbox-image-not-found",
            "image_not_found",
            "web-7c9f5: back-off pulling image nginx:sandbox-image-not-found: not found",
        ),
        (
            "sandbox-invalid-image",
            "invalid_image_name",
            "web-7c9f5: invalid image name nginx:sandbox-invalid-image",
        ),
        (
            "sandbox-config-error",
            "container_config_error",
            'web-7c9f5: container web cannot be created: secret "web-config" not found',
        ),
    ],
)
def test_a_cause_waiting_cannot_heal_fails_the_run_at_once(sandbox_app, marker, reason, words):
    client, _ = sandbox_app(readiness_timeout_s=PATIENT)

    task = deploy(client, f"nginx:{marker}")
    done = wait_for_status(client, task["id"], "failed", "completed", timeout=60)

    assert done["failure"]["reason"] == reason
    assert done["failure"]["message"].startswith(f"Deployment/web cannot become ready: {words}")
    assert any(line.startswith(words) for line in said_while_waiting(client, task["id"]))
    assert [r["kind"] for r in done["appliedResources"]] == ["Deployment", "Service"]  # kept


def test_the_fail_fast_setting_decides_which_causes_end_the_run_early(sandbox_app):
    client, _ = sandbox_app(readiness_timeout_s=0.5, readiness_fail_fast="")

    task = deploy(client, "nginx:sandbox-image-not-found")
    done = wait_for_status(client, task["id"], "failed", "completed")

    # Waited the whole (short) timeout, then named the cause all the same.
    assert done["failure"]["reason"] == "image_not_found"
    assert done["failure"]["message"].startswith("not ready after 0.5s: Deployment/web: web-7c9f5")


@pytest.mark.parametrize(
    "marker, reason, words",
    [
        (
            "sandbox-crash-loop",
            "crash_loop",
            "web-7c9f5: container web keeps crashing: exit code 1 (Error), restarted 4 times",
        ),
        (
            "sandbox-oom",
            "oom_killed",
            "web-7c9f5: container web was killed for using more memory than its limit",
        ),
        (
            "sandbox-unschedulable",
            "unschedulable",
            "web-7c9f5: cannot be placed: 0/3 nodes are available: 3 Insufficient cpu.",
        ),
        (
            "sandbox-unbound-volume",
            "volume_unbound",
            "web-7c9f5: waits for a volume claim to bind: 0/3 nodes are available: pod has "
            "unbound immediate PersistentVolumeClaims.",
        ),
        (
            "sandbox-probe-failing",
            "readiness_probe_failed",
            "web-7c9f5: Readiness probe failed: HTTP probe failed with statuscode: 503",
        ),
    ],
)
def test_a_readiness_timeout_names_its_cause(sandbox_app, marker, reason, words):
    client, _ = sandbox_app(readiness_timeout_s=0.5)

    task = deploy(client, f"nginx:{marker}")
    done = wait_for_status(client, task["id"], "failed", "completed")
    page = client.get(f"/tasks/{task['id']}/timeline", follow_redirects=True).get_data(as_text=True)

    assert done["failure"]["reason"] == reason
    assert done["failure"]["message"].startswith(f"not ready after 0.5s: Deployment/web: {words}")
    assert any(line.startswith(words) for line in said_while_waiting(client, task["id"]))
    assert "Check the workload&#39;s pods" not in page  # the generic words are gone


def test_each_finding_is_said_once_while_the_run_waits(sandbox_app):
    client, _ = sandbox_app(readiness_timeout_s=0.5)

    task = deploy(client, "nginx:sandbox-probe-failing")
    wait_for_status(client, task["id"], "failed", "completed")

    # Dozens of polls (every 20 ms), one line.
    assert said_while_waiting(client, task["id"]) == [
        "web-7c9f5: Readiness probe failed: HTTP probe failed with statuscode: 503"
    ]


def test_a_crash_quotes_the_containers_last_log_lines_scrubbed_of_the_tasks_secrets(
    sandbox_app, sql_conn
):
    client, sandbox = sandbox_app(readiness_timeout_s=0.5)
    password = canary("crash-log")

    task = deploy(
        client,
        "nginx:sandbox-crash-loop",
        inputs={"DB_PASSWORD": password},
    )
    done = wait_for_status(client, task["id"], "failed", "completed")
    explained = client.post(
        "/api/v1/tools/explain_deployment", json={"taskId": task["id"]}
    ).get_json()

    assert done["failure"]["reason"] == "crash_loop"
    message = done["failure"]["message"]
    assert "last log lines:\nstarting up\nconfig DB_PASSWORD=" in message
    assert "Error: cannot connect to database at db:5432: connection refused" in message
    # The app printed the secret (positive control: the sandbox really logs it) ...
    [pod] = [p for p in sandbox.objects.values() if p.manifest["kind"] == "Deployment"]
    assert f"config DB_PASSWORD={password}" in sandbox._crash_log(pod)
    # ... and it is nowhere the product keeps or shows.
    assert_nowhere([password], message, str(explained), dump_database(sql_conn))


def test_no_permission_to_read_pods_degrades_to_a_plain_line_not_a_failure(sandbox_app):
    client, _ = sandbox_app(readiness_timeout_s=0.5)

    task = deploy(client, "nginx:sandbox-never-ready-sandbox-no-pod-access")
    done = wait_for_status(client, task["id"], "failed", "completed")

    assert done["failure"]["reason"] == "readiness_timeout"
    assert said_while_waiting(client, task["id"]) == [
        "no permission to read pods: why the workload is not ready cannot be shown"
    ]


def test_a_ready_workload_completes_without_a_word_of_diagnosis(sandbox_app):
    client, _ = sandbox_app()

    task = deploy(client, "nginx:1.27")
    wait_for_status(client, task["id"], "completed", "failed")

    assert said_while_waiting(client, task["id"]) == []
