"""The row-level secrets contract: a canary submitted anywhere is found nowhere afterwards."""

import logging
import uuid

import gevent
import pytest

from engine.operations.logs import JsonFormatter
from tests.helpers import assert_nowhere, canary, dump_database, wait_for


class StreamTap:
    """Reads a project's SSE stream in the background, keeping every frame."""

    def __init__(self, app, project_id="demo"):
        self.frames: list[str] = []
        self.response = app.test_client().get(
            f"/api/v1/projects/{project_id}/tasks/stream", buffered=False
        )
        self.greenlet = gevent.spawn(self._read)

    def _read(self):
        for chunk in self.response.response:
            self.frames.append(chunk.decode() if isinstance(chunk, bytes) else chunk)

    def close(self) -> str:
        self.greenlet.kill()
        self.response.close()
        return "".join(self.frames)


@pytest.fixture
def tap(app):
    taps = []

    def factory():
        taps.append(StreamTap(app))
        wait_for(lambda: taps[-1].frames, message="stream bootstrap")
        return taps[-1]

    yield factory
    for t in taps:
        t.close()


def test_canaries_through_create_input_redeploy_cancel_and_crash_leak_nowhere(
    app, client, cluster, sql_conn, insert_task, wait_status, tap, caplog
):
    caplog.set_level(logging.DEBUG)
    stream = tap()
    secrets_sent = {
        k: canary(k)
        for k in (
            "env",
            "input",
            "declared",
            "blocked",
            "redeploy",
            "cancel",
            "crash",
            "idem_env",
            "idem_input",
            "idem_tool",
            "crash_declared",
        )
    }

    # 1. create: a secret-looking env entry, a secret-looking input, a declared-sensitive input.
    created = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {
                "kind": "image",
                "image": "nginx",
                "name": "web",
                "env": {"LOG_LEVEL": "debug", "API_TOKEN": secrets_sent["env"]},
            },
            "inputs": {
                "DB_PASSWORD": secrets_sent["input"],
                "plain_looking": secrets_sent["declared"],
            },
            "sensitiveKeys": ["plain_looking"],
        },
    ).get_json()
    done = wait_status(created["id"], "completed")
    assert done["source"]["env"] == {"LOG_LEVEL": "debug"}
    assert set(done["sensitiveKeys"]) == {"API_TOKEN", "DB_PASSWORD", "plain_looking"}
    # Positive control: the cluster did receive them, as a Kubernetes Secret.
    secret_docs = [c.manifest for c in cluster.calls if c.op == "apply" and c.ref.kind == "Secret"]
    assert secret_docs and secret_docs[0]["stringData"]["API_TOKEN"] == secrets_sent["env"]

    # 2. input submission on a blocked task.
    blocked = insert_task(status="blocked", sensitive_keys=["DB_PASSWORD"])
    response = client.post(
        f"/api/v1/tasks/{blocked['id']}/input",
        json={"inputs": {"DB_PASSWORD": secrets_sent["blocked"]}},
    )
    assert response.status_code == 200 and response.get_json()["status"] == "running"
    wait_status(blocked["id"], "completed")

    # 3. redeploy of a failed task with a fresh secret.
    failed = insert_task(status="failed", sensitive_keys=["DB_PASSWORD"])
    clone = client.post(
        "/api/v1/tasks",
        json={
            "predecessorTaskId": str(failed["id"]),
            "inputs": {"DB_PASSWORD": secrets_sent["redeploy"]},
        },
    ).get_json()
    wait_status(clone["id"], "completed")

    # 4. cancel mid-run.
    cluster.apply_delay_s = 0.3
    running = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {"kind": "image", "image": "nginx", "name": "api"},
            "inputs": {"SECRET_KEY": secrets_sent["cancel"]},
        },
    ).get_json()
    wait_for(lambda: cluster.applying.is_set(), message="apply in flight")
    client.post(f"/api/v1/tasks/{running['id']}/cancel")
    wait_status(running["id"], "cancelled")
    cluster.apply_delay_s = 0

    # 5. a runner crash whose exception quotes the manifest carrying the secret.
    def crash(manifest, *, abort):
        raise RuntimeError(f"unexpected cluster answer for {manifest}")

    cluster.apply = crash
    # A declared-sensitive key too: only its value, not its name, can tell it is a secret.
    crashed = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {"kind": "image", "image": "nginx", "name": "boom"},
            "inputs": {"PASSWORD": secrets_sent["crash"], "opaque": secrets_sent["crash_declared"]},
            "sensitiveKeys": ["opaque"],
        },
    ).get_json()
    snap = wait_status(crashed["id"], "failed")
    assert (
        snap["failure"]["reason"] == "runner_error" and "[redacted]" in snap["failure"]["message"]
    )

    # The operator's side, before step 6's successes end the streak: the crash is a failure
    # streak of the cluster integration, shown by the admin API, the Health page, the CLI and the
    # metrics (and the JSON log lines, checked at the end).
    streaks = client.get("/api/v1/admin/streaks").get_data(as_text=True)
    assert "integration:cluster:default" in streaks and "unexpected cluster answer" in streaks
    health_page = client.get("/health").get_data(as_text=True)
    assert "integration:cluster:default" in health_page
    cli = app.test_cli_runner()
    cli_output = "\n".join(
        cli.invoke(args=args).output
        for args in (
            ["tasks", "list", "--json"],
            ["tasks", "show", "--json", crashed["id"]],
            ["tasks", "show", crashed["id"]],
            ["streaks", "--json"],
            ["streaks"],
            ["cleanup-jobs", "list", "--json"],
        )
    )
    assert crashed["id"] in cli_output and "integration:cluster:default" in cli_output
    metrics_text = client.get("/metrics").get_data(as_text=True)
    assert 'deploy_failure_streaks{subject="integration:cluster"} 1.0' in metrics_text

    # 6. idempotent creates and inputs: the kept answers and the fingerprints hold no secret.
    del cluster.apply  # the crash is over
    key = {"Idempotency-Key": str(uuid.uuid4())}
    body = {
        "projectId": "demo",
        "source": {
            "kind": "image",
            "image": "nginx",
            "name": "idem",
            "env": {"API_TOKEN": secrets_sent["idem_env"]},
        },
    }
    replies = [client.post("/api/v1/tasks", json=body, headers=key) for _ in range(2)]
    assert replies[1].headers["Idempotent-Replayed"] == "true"
    wait_status(replies[0].get_json()["id"], "completed")
    parked = insert_task(status="blocked", sensitive_keys=["DB_PASSWORD"])
    replies += [
        client.post(
            f"/api/v1/tasks/{parked['id']}/input",
            headers=key | {"Idempotency-Key": "input-" + key["Idempotency-Key"]},
            json={"inputs": {"DB_PASSWORD": secrets_sent["idem_input"]}},
        )
        for _ in range(2)
    ]
    assert replies[3].headers["Idempotent-Replayed"] == "true"
    wait_status(parked["id"], "completed")
    tool_args = {
        "projectId": "demo",
        "idempotencyKey": "tool-" + key["Idempotency-Key"],
        "source": {"kind": "image", "image": "nginx", "name": "idem-tool"},
        "inputs": {"password": secrets_sent["idem_tool"]},
    }
    replies += [client.post("/api/v1/tools/create_deployment", json=tool_args) for _ in range(2)]
    assert replies[5].headers["Idempotent-Replayed"] == "true"
    wait_status(replies[4].get_json()["id"], "completed")
    kept = sql_conn.execute(
        "SELECT count(*) AS n FROM idempotency_keys WHERE response_status IS NOT NULL"
    ).fetchone()["n"]
    assert kept == 3  # positive control: the table the dump below searches holds them
    replayed = "\n".join(r.get_data(as_text=True) for r in replies)

    frames = stream.close()
    assert '"status":"completed"' in frames  # the tap did see the run
    server_log = "\n".join(r.getMessage() for r in caplog.records)
    assert "runner crashed" in server_log  # the crash was logged, scrubbed
    json_log = "\n".join(JsonFormatter().format(r) for r in caplog.records)
    assert "runner crashed" in json_log
    assert_nowhere(
        secrets_sent.values(),
        dump_database(sql_conn),
        frames,
        server_log,
        replayed,
        streaks,
        health_page,
        cli_output,
        metrics_text,
        json_log,
    )


def test_snapshot_redacts_sensitive_named_fields_as_defence_in_depth(client, insert_task):
    row = insert_task(
        status="failed",
        source={
            "kind": "image",
            "image": "nginx",
            "name": "web",
            "env": {"SECRET_KEY": "left-over-from-old-row"},
        },
    )
    snap = client.get(f"/api/v1/tasks/{row['id']}").get_json()
    assert snap["source"]["env"]["SECRET_KEY"] == "[redacted]"
