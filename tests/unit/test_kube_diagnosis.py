"""Why a pod is not ready, read off pods and events shaped as the Kubernetes API returns them."""

import pytest

from engine.integrations.kube.diagnosis import Finding, diagnose, log_tail, not_ready


def pod(*, waiting=None, last=None, terminated=None, ready=False, scheduled=None, restarts=0):
    state = (
        {"waiting": waiting}
        if waiting
        else {"terminated": terminated}
        if terminated
        else {"running": {}}
    )
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conditions.append({"type": "PodScheduled", "status": "False", **scheduled})
    return {
        "metadata": {"name": "web-7c9f"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.99"}]},
        "status": {
            "phase": "Pending" if waiting or scheduled else "Running",
            "conditions": conditions,
            "containerStatuses": [
                {
                    "name": "web",
                    "image": "nginx:1.99",
                    "ready": ready,
                    "restartCount": restarts,
                    "state": state,
                    "lastState": {"terminated": last} if last else {},
                }
            ],
        },
    }


def event(reason, message):
    return {"reason": reason, "message": message, "lastTimestamp": "2026-12-01T00:00:00Z"}


PULL_NOT_FOUND = event(
    "Failed",
    'Failed to pull image "nginx:1.99": rpc error: code = NotFound desc = '
    'failed to pull and unpack image "docker.io/library/nginx:1.99": not found',
)


@pytest.mark.parametrize(
    "the_pod, events, cause, message",
    [
        (
            pod(waiting={"reason": "ImagePullBackOff"}),
            [PULL_NOT_FOUND],
            "image_not_found",
            "back-off pulling image nginx:1.99: not found (" + PULL_NOT_FOUND["message"] + ")",
        ),
        (
            pod(waiting={"reason": "ErrImagePull", "message": "pull access denied"}),
            [],
            "image_pull_failed",
            "cannot pull image nginx:1.99: pull access denied",
        ),
        (
            pod(waiting={"reason": "InvalidImageName", "message": "invalid reference format"}),
            [],
            "invalid_image_name",
            "invalid image name nginx:1.99: invalid reference format",
        ),
        (
            pod(
                waiting={
                    "reason": "CreateContainerConfigError",
                    "message": 'secret "db" not found',
                }
            ),
            [],
            "container_config_error",
            'container web cannot be created: secret "db" not found',
        ),
        (
            pod(
                waiting={"reason": "CrashLoopBackOff"},
                last={"exitCode": 2, "reason": "Error"},
                restarts=3,
            ),
            [],
            "crash_loop",
            "container web keeps crashing: exit code 2 (Error), restarted 3 times",
        ),
        (
            pod(
                waiting={"reason": "CrashLoopBackOff"},
                last={"exitCode": 137, "reason": "OOMKilled"},
                restarts=1,
            ),
            [],
            "oom_killed",
            "container web was killed for using more memory than its limit (OOMKilled), "
            "restarted 1 times",
        ),
        (
            pod(scheduled={"reason": "Unschedulable", "message": "0/3 nodes: Insufficient cpu."}),
            [],
            "unschedulable",
            "cannot be placed: 0/3 nodes: Insufficient cpu.",
        ),
        (
            pod(
                scheduled={
                    "reason": "Unschedulable",
                    "message": "pod has unbound immediate PersistentVolumeClaims",
                }
            ),
            [],
            "volume_unbound",
            "waits for a volume claim to bind: pod has unbound immediate PersistentVolumeClaims",
        ),
        (
            pod(),
            [event("Unhealthy", "Readiness probe failed: connection refused")],
            "readiness_probe_failed",
            "Readiness probe failed: connection refused",
        ),
    ],
)
def test_each_cause_is_read_off_the_pod_and_its_events(the_pod, events, cause, message):
    [finding] = diagnose([the_pod], {"web-7c9f": events})

    assert (finding.cause, finding.message) == (cause, message)
    assert finding.line() == f"web-7c9f: {message}"


def test_a_healthy_or_merely_starting_pod_has_no_finding():
    assert diagnose([pod(ready=True)], {}) == []
    assert diagnose([pod(waiting={"reason": "ContainerCreating"})], {}) == []
    assert diagnose([pod()], {"web-7c9f": [event("Unhealthy", "Liveness probe failed")]}) == []


def test_the_strongest_cause_comes_first_and_only_unready_pods_are_worth_a_look():
    crashing = pod(waiting={"reason": "CrashLoopBackOff"}, last={"exitCode": 1})
    missing = pod(waiting={"reason": "ImagePullBackOff"})
    healthy = pod(ready=True)

    findings = diagnose([crashing, missing], {"web-7c9f": [PULL_NOT_FOUND]})

    assert [f.cause for f in findings] == ["image_not_found", "crash_loop"]
    assert not_ready([crashing, healthy]) == [crashing]


def test_hostile_shapes_and_text_are_survived_and_bounded():
    weird = {"metadata": "x", "status": {"containerStatuses": ["nope", {"state": None}]}}
    long_message = pod(waiting={"reason": "InvalidImageName", "message": "\x1b[31m" + "y" * 5000})

    assert diagnose([weird, "not a pod"], {}) == []
    [finding] = diagnose([long_message], {})
    assert len(finding.message) <= 300 and "\x1b" not in finding.message
    assert isinstance(finding, Finding)


def test_a_log_tail_keeps_the_last_printable_lines():
    text = "one\n\x00two\n\nthree\n" + "z" * 1000

    assert log_tail(text, 2).split("\n")[0] == "three"
    assert len(log_tail(text, 2).split("\n")[1]) == 200
    assert log_tail(text, 10).startswith("one\ntwo\nthree\n")
