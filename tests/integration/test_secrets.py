"""The row-level secrets contract: a canary submitted anywhere is found nowhere afterwards."""

import base64
import json
import logging
import uuid

import gevent
import psycopg
import pytest
import yaml
from gevent.event import Event

from engine.integrations import Integrations
from engine.integrations.devbox import DevboxClient
from engine.operations.logs import JsonFormatter, TextFormatter
from engine.trust import secrets
from tests.helpers import assert_nowhere, canary, dump_database, on_disk, wait_for


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


def test_scrubbing_never_forgets_the_process_or_the_run_secrets(
    make_app, cluster, database_url, sql_conn, wait_status, caplog
):
    """1,000 tokens minted, then a cluster error quoting every kind of secret: the process's own
    credentials, the run's input, the token the run minted and its kubeconfig's credentials."""
    caplog.set_level(logging.DEBUG)
    own = {k: canary(k) for k in ("gateway", "signing", "oidc", "secret_key", "metrics", "db")}
    run = {k: canary(k) for k in ("input", "token", "password", "key", "provider")}
    client_key = f"-----BEGIN PRIVATE KEY-----\n{run['key']}\n-----END PRIVATE KEY-----\n"
    kubeconfig = {
        "current-context": "ctx",
        "contexts": [{"name": "ctx", "context": {"cluster": "c", "user": "u"}}],
        "clusters": [{"name": "c", "cluster": {"server": "https://cluster.example"}}],
        "users": [
            {
                "name": "u",
                "user": {
                    "token": run["token"],
                    "client-key-data": base64.b64encode(client_key.encode()).decode(),
                    "username": "admin",
                    "password": run["password"],
                    "auth-provider": {"config": {"id-token": run["provider"]}},
                },
            }
        ],
    }
    # The database password: trust authentication ignores it, the settings still carry it.
    with_password = psycopg.conninfo.make_conninfo(database_url, password=own["db"])
    devbox = DevboxClient("http://127.0.0.1:9", own["signing"])
    kubeconfigs_seen = []

    def cluster_for(kubeconfig):
        kubeconfigs_seen.append(kubeconfig)
        return cluster

    app = make_app(
        database_url=with_password,
        gateway_api_key=own["gateway"],
        devbox_signing_key=own["signing"],
        oidc_client_secret=own["oidc"],
        secret_key=own["secret_key"],
        metrics_token=own["metrics"],
        overrides={
            "integrations": Integrations(cluster=cluster_for, cluster_label="fake", devbox=devbox)
        },
    )
    client = app.test_client()
    minted_by_the_run, in_apply, go_on = [], Event(), Event()

    def quoting_apply(manifest, *, abort):
        minted_by_the_run.append(devbox.token("default"))  # as a devbox call of the run would
        in_apply.set()
        go_on.wait(30)
        every = [*own.values(), *run.values(), client_key, f"admin:{run['password']}"]
        raise RuntimeError("the cluster rejected " + " and ".join(every + minted_by_the_run))

    cluster.apply = quoting_apply
    created = client.post(
        "/api/v1/tasks",
        headers={"X-Kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()},
        json={
            "projectId": "demo",
            "source": {"kind": "image", "image": "nginx", "name": "web"},
            "inputs": {"DB_PASSWORD": run["input"]},
        },
    ).get_json()
    assert in_apply.wait(30)
    for i in range(1000):  # other runs, cleanup jobs: the recent ones no longer hold the run's
        devbox.token(f"workspace-{i}")
    assert minted_by_the_run[0] not in secrets._recent_tokens  # control: it did fall off there
    logging.getLogger("test.upstream").warning(
        "outside any run: %s", " ".join(own.values())
    )  # the process's credentials, quoted after the 1,000 tokens
    go_on.set()
    failed = wait_status(created["id"], "failed")

    assert kubeconfigs_seen == [kubeconfig]  # control: the run had the kubeconfig
    message = failed["failure"]["message"]
    assert message.startswith("RuntimeError: the cluster rejected [redacted] and [redacted]")
    answers = "\n".join(
        client.get(path).get_data(as_text=True)
        for path in (
            f"/api/v1/tasks/{created['id']}",
            f"/api/v1/tasks/{created['id']}/events",
            "/api/v1/admin/streaks",
        )
    )
    assert "runner crashed" in "\n".join(r.getMessage() for r in caplog.records)
    log_lines = "\n".join(
        formatter.format(record)
        for record in caplog.records
        for formatter in (TextFormatter(), JsonFormatter())
    )
    everything = [*own.values(), *run.values(), minted_by_the_run[0], client_key]
    assert_nowhere(everything, dump_database(sql_conn), answers, log_lines, json.dumps(failed))
    assert on_disk(sql_conn, everything) == []
    # Positive control of the disk search: text that is stored is found.
    assert on_disk(sql_conn, ["the cluster rejected [redacted] and [redacted]"])
