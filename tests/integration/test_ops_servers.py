"""Real server processes: logging is configured the same under `python app.py` and gunicorn, and
gunicorn's workers' metrics add up (prometheus-client multiprocess mode)."""

import json

import gevent
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers import IMAGE_SOURCE, wait_for


def create_on(server, request_id: str) -> tuple[str, str]:
    response = requests.post(
        server.base + "/api/v1/tasks",
        timeout=10,
        headers={"X-Request-Id": request_id},
        json={"projectId": "demo", "source": IMAGE_SOURCE},
    )
    assert response.status_code == 201, response.text
    assert response.headers["X-Request-Id"] == request_id
    return response.json()["id"], response.headers["X-Served-By"]


def json_lines(server) -> list[dict]:
    """Every line the server wrote, each of which must be one JSON object."""
    lines = [line for line in server.output().splitlines() if line.strip()]
    assert lines
    parsed = []
    for line in lines:
        try:
            parsed.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"not a JSON line: {line!r}\n{server.output()}")
    return parsed


def cancel(server, task_id: str, request_id: str) -> None:
    response = requests.post(
        f"{server.base}/api/v1/tasks/{task_id}/cancel",
        timeout=10,
        headers={"X-Request-Id": request_id},
    )
    assert response.status_code in (200, 409), response.text


def test_the_dev_server_logs_one_json_object_per_line(start_server):
    server = start_server("app", env={"LOG_FORMAT": "json", "SANDBOX_NEVER_READY": "1"})
    task_id, _ = create_on(server, "dev-create-1")
    for _ in range(5):
        assert requests.get(server.base + "/readyz", timeout=10).status_code in (200, 503)
    # The cancel comes after the probes: once its line is out, a probe's would be too.
    cancel(server, task_id, "dev-cancel-1")
    lines = wait_for(
        lambda: (
            (ls := json_lines(server))
            and any(line.get("request_id") == "dev-cancel-1" for line in ls)
            and ls
        ),
        message="cancel line",
    )
    mine = next(line for line in lines if line.get("request_id") == "dev-cancel-1")
    assert {"time", "level", "logger", "message"} <= set(mine)
    assert mine["task_id"] == task_id and mine["workspace"] == "default"
    assert not any("/readyz" in line["message"] for line in lines)  # probes are never logged


def test_gunicorn_logs_json_and_its_workers_metrics_add_up(start_server, tmp_path):
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    # Left by an earlier run: a master start must clear it (it would not even parse).
    (metrics_dir / "counter_999999.db").write_bytes(b"not a metrics file")
    server = start_server(
        "gunicorn",
        workers=2,
        env={
            "LOG_FORMAT": "json",
            "ACCESS_LOG": "-",
            "SANDBOX_NEVER_READY": "1",
            "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir),
            # One connection at a time per worker: while one worker serves a create, the next
            # concurrent one can only be accepted by the other (an idle machine otherwise lets
            # one worker's accept loop win every connection).
            "WORKER_CONNECTIONS": "1",
        },
    )
    served: dict[str, str] = {}
    for round_ in range(10):  # concurrent creates spread over both workers' accept loops
        batch = [gevent.spawn(create_on, server, f"gu-{round_}-{i}") for i in range(4)]
        gevent.joinall(batch, raise_error=True)
        served.update(g.value for g in batch)
        if len(set(served.values())) == 2:
            break
    assert len(set(served.values())) == 2, "every task landed on one worker"

    body = requests.get(server.base + "/metrics", timeout=10).text
    samples = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(body)
        for s in family.samples
    }
    creates = sum(
        v
        for (name, labels), v in samples.items()
        if name == "deploy_action_duration_seconds_count" and ("action", "create") in labels
    )
    assert creates == len(served)  # both workers' counts, whichever answered the scrape
    assert sum(v for (name, _), v in samples.items() if name == "deploy_leases_held") == len(served)
    assert sum(
        v
        for (name, labels), v in samples.items()
        if name == "deploy_tasks" and dict(labels)["status"] in ("running", "applying")
    ) == len(served)

    for _ in range(3):
        requests.get(server.base + "/healthz", timeout=10)
    # The control: a request made after the probes is in the access log (a probe's line, were
    # it logged, is written as its answer goes out, before this one was even sent).
    requests.get(server.base + "/api/v1/tasks?projectId=after-probes", timeout=10)
    lines = wait_for(
        lambda: (
            (ls := json_lines(server))
            and any("after-probes" in line["message"] for line in ls)
            and ls
        ),
        60,
        message="the access line of the request after the probes",
    )
    assert any(line["logger"] == "gunicorn.error" for line in lines)  # gunicorn's own lines too
    access = [line for line in lines if line["logger"] == "gunicorn.access"]
    assert any("/api/v1/tasks" in line["message"] for line in access)  # the access log works
    assert not any(
        "/healthz" in line["message"] or "/metrics" in line["message"] for line in access
    )
