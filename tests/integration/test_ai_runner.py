"""The AI runner (prompt and github sources) end to end through the API: the real gateway client
against an OpenAI-compatible fake on loopback, a fake devbox at the integrations boundary."""

import base64
import json
import time
from collections import Counter

import gevent
import pytest
from gevent.event import Event
from hypothesis import example, given
from hypothesis import strategies as st

from engine.integrations import Integrations
from engine.integrations.devbox import ExecResult
from engine.integrations.gateway import GatewayClient
from tests.fakes import FakeDevbox, FakeGatewayServer, Reply
from tests.helpers import (
    assert_nowhere,
    canary,
    dump_database,
    events,
    oidc_settings,
    poll_status,
    wait_for,
    wait_for_status,
)
from tests.hostile_json import examples, hostile

PROMPT = {"kind": "prompt", "prompt": "deploy an nginx web server"}


def plan_answer(name="web", *, extra_manifests=(), plan=None) -> str:
    """A model answer as prose around a fenced JSON object (what real models tend to send)."""
    body = plan_body(name, extra_manifests=extra_manifests, plan=plan)
    return "Sure. Here is the plan:\n```json\n" + json.dumps(body, indent=1) + "\n```\nDone."


def plan_body(name="web", *, extra_manifests=(), plan=None) -> dict:
    """The protocol object of a plan: a Deployment and its Service."""
    labels = {"app": name}
    return {
        "plan": plan or {"summary": f"nginx as {name}", "args": {"replicas": 1}},
        "manifests": [
            *extra_manifests,
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": name, "labels": labels},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {"containers": [{"name": name, "image": "nginx:1.27"}]},
                    },
                },
            },
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": name},
                "spec": {"selector": labels, "ports": [{"port": 80}]},
            },
        ],
    }


@pytest.fixture
def gateway():
    server = FakeGatewayServer().start()
    yield server
    server.stop()


@pytest.fixture
def devbox():
    return FakeDevbox(
        exec_results={
            "git -C /workspace/repo ls-files": ExecResult(0, "Dockerfile\nserver.py\n", "")
        }
    )


@pytest.fixture
def make_ai_app(make_app, cluster, devbox, gateway):
    """Factory: an app whose runs use the fake cluster, the fake devbox and the fake gateway
    (through the real gateway client)."""

    def factory(**settings):
        client = GatewayClient(gateway.url, "fake-model", "gw-key", retries=0, idle_timeout_s=10)
        integrations = Integrations(
            cluster=lambda kubeconfig: cluster,
            cluster_label="fake",
            devbox=devbox,
            gateway=client,
        )
        return make_app(**settings, overrides={"integrations": integrations})

    return factory


@pytest.fixture
def app(make_ai_app):
    return make_ai_app()


def gateway_text(client, task_id, turn=None) -> str:
    """The persisted (scrubbed) answer text of a task's gateway events."""
    return "".join(
        e["payload"]["text"]
        for e in events(client, task_id)
        if e["kind"] == "gateway"
        and e["payload"]["type"] == "delta"
        and turn in (None, e["payload"]["turn"])
    )


def status_moves(client, task_id) -> list[tuple]:
    return [
        (e["payload"]["to"], e["payload"].get("by"))
        for e in events(client, task_id)
        if e["kind"] == "status"
    ]


def paused(devbox) -> list[str]:
    """The devbox ops once the runner's finally has paused it (it follows the terminal write)."""
    wait_for(devbox.paused.is_set, timeout=30, message="the devbox pause")
    return devbox.ops()


def devbox_row(sql_conn, task_id) -> dict:
    return sql_conn.execute(
        "SELECT devbox_id, devbox_paused_at FROM deploy_tasks WHERE id = %s", (task_id,)
    ).fetchone()


class GatewayTap:
    """Reads a task's gateway SSE stream in the background, keeping (time, event, data)."""

    def __init__(self, app, task_id):
        self.frames: list[tuple[float, str, dict]] = []
        self.raw: list[str] = []
        self.ended = False
        self.response = None
        # The whole request runs in one greenlet: the test client pulls the first frame itself,
        # and Flask's request context must be pushed and popped in the same greenlet.
        self.greenlet = gevent.spawn(self._read, app, task_id)
        wait_for(lambda: self.frames, message="the gateway stream's first frame")

    def _read(self, app, task_id):
        self.response = app.test_client().get(
            f"/api/v1/tasks/{task_id}/gateway/stream", buffered=False
        )
        assert self.response.status_code == 200
        buffer = ""
        for chunk in self.response.response:
            text = chunk.decode() if isinstance(chunk, bytes) else chunk
            self.raw.append(text)
            buffer += text
            while "\n\n" in buffer:
                block, buffer = buffer.split("\n\n", 1)
                lines = dict(
                    line.split(": ", 1) for line in block.splitlines() if not line.startswith(":")
                )
                if "event" in lines:
                    self.frames.append(
                        (time.monotonic(), lines["event"], json.loads(lines["data"]))
                    )
        self.ended = True

    def text(self, turn=None) -> str:
        return "".join(
            d["text"] for _, kind, d in self.frames if kind == "delta" and turn in (None, d["turn"])
        )

    def kinds(self) -> list[str]:
        return [kind for _, kind, _ in self.frames]

    def close(self):
        self.greenlet.kill()


def test_a_prompt_plans_with_the_gateway_then_applies_and_completes(
    client, create_task, wait_status, cluster, devbox, gateway, sql_conn
):
    answer = plan_answer("web")
    gateway.script(Reply(text=answer, chunk_chars=5))

    task = create_task(PROMPT)
    done = wait_status(task["id"], "completed", "failed")

    assert done["status"] == "completed", done["failure"]
    assert done["runner"] == "ai"
    assert cluster.applied() == ["Deployment/web", "Service/web"]
    applied = [c.manifest for c in cluster.calls if c.op == "apply"]
    assert all(m["metadata"]["namespace"] == "demo" for m in applied)
    assert all(
        m["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "deploy-task-engine"
        for m in applied
    )
    assert [r["name"] for r in done["appliedResources"]] == ["web", "web"]
    # The model was asked the prompt, under one gateway session, with the configured model.
    [request] = gateway.requests
    assert request.path == "/v1/chat/completions"
    assert request.body["model"] == "fake-model" and request.body["stream"] is True
    assert request.body["messages"][0]["role"] == "system"
    assert "Prompt: deploy an nginx web server" in request.body["messages"][1]["content"]
    started = [
        e["payload"]
        for e in events(client, task["id"])
        if e["kind"] == "gateway" and e["payload"]["type"] == "turn_started"
    ]
    assert [s["sessionId"] for s in started] == [request.headers["X-Session-Id"]]
    # The streamed answer is persisted whole, in batches far fewer than its pieces.
    assert gateway_text(client, task["id"]) == answer
    batches = [
        e
        for e in events(client, task["id"])
        if e["kind"] == "gateway" and e["payload"]["type"] == "delta"
    ]
    assert request.sent > 50 and len(batches) <= 3
    # Its devbox was created, recorded, and paused on completion with the server credential.
    assert paused(devbox) == ["create", "pause"]
    row = wait_for(
        lambda: (lambda r: r if r["devbox_paused_at"] else None)(devbox_row(sql_conn, task["id"])),
        message="the pause to be recorded",
    )
    assert row["devbox_id"] == devbox.calls[0].devbox_id == devbox.calls[1].devbox_id
    assert devbox.calls[0].workspace == "default"


def test_a_github_source_is_cloned_in_the_devbox_before_the_turn(
    create_task, wait_status, cluster, devbox, gateway
):
    gateway.script(Reply(text=plan_answer("shop"), chunk_chars=40))

    task = create_task({"kind": "github", "repo": "octo/shop", "ref": "main"})
    done = wait_status(task["id"], "completed", "failed")

    assert done["status"] == "completed", done["failure"]
    assert paused(devbox) == ["create", "exec", "exec", "pause"]
    clone, listing = devbox.calls[1], devbox.calls[2]
    assert clone.command == [
        "git",
        "clone",
        "--depth",
        "1",
        "--branch",
        "main",
        "--",
        "https://github.com/octo/shop.git",
        "/workspace/repo",
    ]
    assert listing.command == ["git", "-C", "/workspace/repo", "ls-files"]
    # The turn saw what the clone produced, so it came after it.
    prompt = gateway.requests[0].body["messages"][1]["content"]
    assert "Repository: octo/shop (ref main)" in prompt and "server.py" in prompt
    assert cluster.applied() == ["Deployment/shop", "Service/shop"]


@pytest.mark.parametrize(
    "stderr, reason, words",
    [
        ("fatal: repository not found\n", "repo_not_found", "octo/missing does not exist"),
        (
            "fatal: could not read Username for 'https://github.com': terminal prompts disabled",
            "repo_no_access",
            "octo/missing is private or needs credentials",
        ),
        (
            "fatal: Remote branch v9 not found in upstream origin\n",
            "repo_ref_not_found",
            "v9 is not a branch or tag of octo/missing",
        ),
        ("fatal: early EOF\n", "clone_failed", "cloning octo/missing failed: fatal: early EOF"),
    ],
)
def test_a_failed_clone_fails_the_task_saying_why_and_pauses_the_devbox(
    create_task, wait_status, devbox, gateway, stderr, reason, words
):
    devbox.exec_results["git clone"] = ExecResult(128, "", stderr)

    task = create_task({"kind": "github", "repo": "octo/missing", "ref": "v9"})
    done = wait_status(task["id"], "failed", "completed")

    assert done["failure"]["reason"] == reason
    assert words in done["failure"]["message"]
    assert stderr.strip().splitlines()[-1] in done["failure"]["message"]  # git's own words too
    assert gateway.requests == []
    assert paused(devbox) == ["create", "exec", "pause"]


def test_a_malformed_answer_fails_with_a_clear_reason(
    create_task, wait_status, cluster, devbox, gateway
):
    gateway.script(Reply(text="I would use nginx, probably with two replicas."))

    task = create_task(PROMPT)
    done = wait_status(task["id"], "failed", "completed")

    assert done["failure"]["reason"] == "malformed_answer"
    assert "not a usable plan" in done["failure"]["message"]
    assert cluster.calls == []
    assert paused(devbox) == ["create", "pause"]


def test_a_cluster_scoped_manifest_is_refused(create_task, wait_status, cluster, gateway):
    gateway.script(
        Reply(
            text=plan_answer(
                "web",
                extra_manifests=[
                    {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "elsewhere"}}
                ],
            )
        )
    )

    done = wait_status(create_task(PROMPT)["id"], "failed", "completed")

    assert done["failure"]["reason"] == "malformed_answer"
    assert "Namespace is not a namespaced kind a task may create" in done["failure"]["message"]
    assert cluster.calls == []


def test_inputs_park_blocked_then_resume_reattaches_and_no_secret_is_persisted_or_streamed(
    app, client, create_task, wait_status, cluster, devbox, gateway, sql_conn
):
    secret = canary("magic")
    ask = {
        "needInputs": [
            # Not secret-looking by name: only the model's declaration makes it sensitive.
            {
                "name": "MAGIC_WORD",
                "type": "string",
                "sensitive": True,
                "required": True,
                "default": "model-invented-default",
            },
            {"name": "REPLICAS", "type": "number", "required": True, "default": 2},
        ]
    }
    gateway.script(Reply(text=json.dumps(ask), chunk_chars=9))

    task = create_task(PROMPT)
    blocked = wait_status(task["id"], "blocked", "failed", "completed")

    assert blocked["status"] == "blocked", blocked["failure"]
    assert blocked["pendingInputs"] == [
        {"name": "MAGIC_WORD", "type": "string", "sensitive": True, "required": True},
        {"name": "REPLICAS", "type": "number", "sensitive": False, "required": True, "default": 2},
    ]
    assert devbox.ops() == ["create"]  # parked: the devbox stays as it is
    devbox_id = devbox.calls[0].devbox_id
    session_id = gateway.requests[0].headers["X-Session-Id"]

    # The resumed turn echoes the secret every way a model might (raw, JSON-escaped, base64,
    # in an args map, split across stream pieces) and references it as the protocol says.
    echoed = plan_answer(
        "vault",
        plan={
            "summary": f"uses {secret}",
            "args": {"MAGIC_WORD": secret, "replicas": 2},
            "encoded": base64.b64encode(secret.encode()).decode(),
        },
        extra_manifests=[
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "vault-magic"},
                "stringData": {"MAGIC_WORD": "${input:MAGIC_WORD}"},
            }
        ],
    )
    gateway.script(Reply(text=echoed, chunk_chars=7, delay_s=0.005))
    tap = GatewayTap(app, task["id"])
    try:
        response = client.post(
            f"/api/v1/tasks/{task['id']}/input",
            json={"inputs": {"MAGIC_WORD": secret, "REPLICAS": "2"}},
        )
        assert response.status_code == 200, response.get_json()
        done = wait_status(task["id"], "completed", "failed")
        wait_for(lambda: tap.ended, message="the gateway stream to end")
    finally:
        tap.close()

    assert done["status"] == "completed", done["failure"]
    # Re-attached to the same devbox and the same gateway session.
    assert paused(devbox) == ["create", "attach", "pause"]
    assert {c.devbox_id for c in devbox.calls} == {devbox_id}
    assert [r.headers["X-Session-Id"] for r in gateway.requests] == [session_id, session_id]
    resumed = gateway.requests[1].body["messages"]
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "user"]
    assert "MAGIC_WORD" in resumed[3]["content"] and 'REPLICAS = "2"' in resumed[3]["content"]
    # The value went to the cluster (substituted in memory), never to the model...
    [stored] = [c.manifest for c in cluster.calls if c.op == "apply" and c.ref.kind == "Secret"]
    assert stored["stringData"] == {"MAGIC_WORD": secret}
    assert_nowhere([secret], json.dumps([r.body for r in gateway.requests]))
    # ...and into no table, no event, no stream frame (live pieces included).
    assert tap.text(turn=2) == gateway_text(client, task["id"], turn=2)
    assert "[redacted]" in tap.text(turn=2)
    assert_nowhere(
        [secret],
        dump_database(sql_conn),
        "".join(tap.raw),
        json.dumps(events(client, task["id"])),
        json.dumps(client.get(f"/api/v1/tasks/{task['id']}").get_json()),
    )
    # The structured copies are sanitized too: the args map lost its sensitive key.
    plan = sql_conn.execute(
        "SELECT artifact_summary -> 'deploymentPlan' AS p FROM deploy_tasks WHERE id = %s",
        (task["id"],),
    ).fetchone()["p"]
    assert plan["args"] == {"replicas": 2} and "[redacted]" in plan["summary"]


def test_a_resume_whose_devbox_is_gone_replaces_it_and_records_the_new_one(
    client, create_task, wait_status, cluster, devbox, gateway, sql_conn
):
    gateway.script(
        Reply(text=json.dumps({"needInputs": [{"name": "TAG", "required": True}]})),
        Reply(text=plan_answer("tagged")),
    )
    task = create_task({"kind": "github", "repo": "octo/shop"})
    wait_status(task["id"], "blocked")
    devbox.boxes.clear()  # e.g. deleted out of band while the task waited

    client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"TAG": "v2"}})
    done = wait_status(task["id"], "completed", "failed")

    assert done["status"] == "completed", done["failure"]
    assert paused(devbox) == [
        "create",
        "exec",
        "exec",
        "attach",
        "create",
        "exec",
        "exec",
        "pause",
    ]  # re-cloned into the new one
    new_id = devbox.calls[4].devbox_id
    assert new_id != devbox.calls[0].devbox_id and devbox.calls[-1].devbox_id == new_id
    assert devbox_row(sql_conn, task["id"])["devbox_id"] == new_id
    # Same conversation: the inputs answer continues the recorded session.
    assert len({r.headers["X-Session-Id"] for r in gateway.requests}) == 1
    assert 'TAG = "v2"' in gateway.requests[1].body["messages"][3]["content"]


def test_a_cancel_mid_stream_resolves_cancelled_within_a_second_and_pauses_the_devbox(
    client, create_task, wait_status, cluster, devbox, gateway, sql_conn
):
    # About 90 s of answer (175 pieces, 0.5 s apart): only the cancel can end the run within the
    # wait below (generous for a loaded machine; the cancel latency is measured in BENCHMARKS.md).
    gateway.script(Reply(text=plan_answer("slow"), chunk_chars=4, delay_s=0.5))

    task = create_task(PROMPT)
    wait_for(
        lambda: gateway.requests and gateway.requests[0].sent >= 3,
        timeout=30,
        message="the answer to be mid-stream",
    )
    assert client.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 200
    done = wait_status(task["id"], "cancelled", "failed", "completed", timeout=30)

    assert done["status"] == "cancelled", done["status"]
    assert done["cancellation"]["applied"] == "nothing"
    assert cluster.calls == []
    # The stream was cut, not read to its end.
    wait_for(lambda: gateway.requests[0].disconnected, timeout=30, message="gateway disconnect")
    assert not gateway.requests[0].finished
    # The devbox was paused with a live signal of its own, and recorded as paused.
    assert paused(devbox) == ["create", "pause"]
    assert devbox.calls[1].outcome == "ok" and not devbox.calls[1].aborted_on_entry
    wait_for(
        lambda: devbox_row(sql_conn, task["id"])["devbox_paused_at"],
        message="the pause to be recorded",
    )
    # The pause wrote no status: the only terminal move is the runner's acknowledgement.
    assert status_moves(client, task["id"]) == [("running", "dev"), ("cancelled", "runner")]


def test_the_gateway_stream_shows_pieces_while_the_model_is_still_answering(
    app, client, create_task, wait_status, gateway
):
    answer = plan_answer("live")
    # The model goes silent after two pieces until the test resumes it: nothing is persisted
    # during the silence (batches flush when text arrives), so only the live feed can show those
    # pieces meanwhile. The model starts only once the viewer has subscribed.
    # The two pieces end a line: text that could begin a secret this process scrubs (any of its
    # credentials or recent tokens, registered process-wide, by earlier tests too) is held back
    # until the next piece settles it, and a line end begins none, so all of it is shown.
    first_two = answer[:24]
    assert first_two.endswith("plan:\n")
    subscribed, resumed = Event(), Event()
    gateway.script(
        Reply(text=answer, chunk_chars=12, hold=subscribed, stall_after=2, resume=resumed)
    )

    task = create_task(PROMPT)
    tap = GatewayTap(app, task["id"])  # its first frame has arrived: subscribed
    subscribed.set()
    try:
        wait_for(lambda: tap.text() == first_two, timeout=30, message="the first two pieces")
        assert gateway.requests[0].sent == 2, "shown only after the model went on"
        assert [d["offset"] for _, kind, d in tap.frames if kind == "delta"][0] == 0
        resumed.set()
        wait_for(lambda: tap.ended, timeout=60, message="the stream to end")
    finally:
        resumed.set()
        tap.close()

    assert tap.text() == answer  # every piece once, in order (live and persisted deduped)
    kinds = tap.kinds()
    assert kinds[0] == "status" and kinds[-1] == "end"
    assert kinds.index("turn_started") < kinds.index("delta") < kinds.index("turn_done")
    assert tap.frames[-1][2] == {"status": "completed"}
    # A late viewer bootstraps the same text from the persisted events.
    late = GatewayTap(app, task["id"])
    wait_for(lambda: late.ended, message="the late stream to end")
    late.close()
    assert late.text() == answer


def test_the_gateway_stream_of_an_unknown_task_is_404(client):
    response = client.get("/api/v1/tasks/00000000-0000-0000-0000-000000000000/gateway/stream")
    assert response.status_code == 404
    assert response.get_json()["code"] == "task_not_found"


def test_prompt_and_github_sources_are_validated_strictly(client):
    for source in (
        {"kind": "prompt"},
        {"kind": "prompt", "prompt": "  "},
        {"kind": "prompt", "prompt": "x", "image": "nginx"},
        {"kind": "github", "repo": "not-a-repo"},
        {"kind": "github", "repo": "octo/shop", "ref": "--upload-pack=evil"},
    ):
        response = client.post("/api/v1/tasks", json={"projectId": "demo", "source": source})
        assert response.status_code == 400, source
        assert response.get_json()["code"] == "invalid_request"


def test_the_zero_setup_default_plans_with_the_sandbox_devbox_and_gateway(
    make_app, cluster, sql_conn
):
    app = make_app(sandbox_gateway_delay_s=0.0)  # no devbox or gateway given: the sandboxes
    client = app.test_client()

    created = client.post(
        "/api/v1/tasks",
        json={"projectId": "demo", "source": {"kind": "prompt", "prompt": "Deploy a redis cache"}},
    )
    assert created.status_code == 201
    done = wait_for_status(client, created.get_json()["id"], "completed", "failed")
    assert done["status"] == "completed", done["failure"]
    assert cluster.applied() == ["Deployment/redis-cache", "Service/redis-cache"]
    deployment = next(c.manifest for c in cluster.calls if c.ref.kind == "Deployment")
    assert deployment["metadata"]["labels"]["deploy.sandbox/generated"] == "true"

    # The sandbox can also ask for a sensitive input, for demos of the blocked path.
    secret = canary("sandbox")
    asking = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {"kind": "prompt", "prompt": "an admin panel sandbox-needs-input"},
        },
    ).get_json()
    blocked = wait_for_status(client, asking["id"], "blocked", "failed", "completed")
    assert [i["name"] for i in blocked["pendingInputs"]] == ["ADMIN_PASSWORD"]
    client.post(f"/api/v1/tasks/{asking['id']}/input", json={"inputs": {"ADMIN_PASSWORD": secret}})
    done = wait_for_status(client, asking["id"], "completed", "failed")
    assert done["status"] == "completed", done["failure"]
    stored = next(c.manifest for c in cluster.calls if c.ref.kind == "Secret")
    assert stored["stringData"] == {"ADMIN_PASSWORD": secret}
    assert_nowhere([secret], dump_database(sql_conn))


ALIAS_BOMB = (
    "\n".join(
        ["a: &a [x,x,x,x,x,x,x,x,x]"]
        + [
            f"{chr(98 + i)}: &{chr(98 + i)} [*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)},"
            f"*{chr(97 + i)},*{chr(97 + i)},*{chr(97 + i)}]"
            for i in range(8)
        ]
    )
    + "\nkind: ConfigMap\napiVersion: v1\nmetadata: {name: bomb}\n"
)


def secret_in(kind: str, where: str) -> dict:
    doc = {"apiVersion": "v1", "kind": kind, "metadata": {"name": "creds"}}
    if where == "annotation":
        doc["metadata"]["annotations"] = {"k": "${input:DB_PASSWORD}"}
    elif where == "data":
        doc["stringData"] = {"password": "${input:DB_PASSWORD}"}
    return doc


def run_with_a_sensitive_input(create_task, wait_status) -> dict:
    """A prompt task given DB_PASSWORD as a sensitive input, once it has settled."""
    task = create_task(
        PROMPT, inputs={"DB_PASSWORD": "a-long-secret-value"}, sensitiveKeys=["DB_PASSWORD"]
    )
    return wait_status(task["id"], "failed", "completed", "blocked", timeout=30)


@pytest.mark.parametrize(
    "answer, message",
    [
        (plan_answer("web", extra_manifests=[ALIAS_BOMB]), "uses YAML aliases"),
        ("x" * 200_001, "longer than 200000 characters"),
        (
            plan_answer(
                "web", extra_manifests=[secret_in("ConfigMap", "data"), secret_in("Secret", "data")]
            ).replace('"nginx:1.27"', '"nginx:${input:DB_PASSWORD}"'),
            "outside a Secret's data",
        ),
        (
            plan_answer("web", extra_manifests=[secret_in("Secret", "annotation")]),
            "outside a Secret's data",
        ),
    ],
)
def test_hostile_answers_fail_as_malformed_without_touching_the_cluster(
    create_task, wait_status, cluster, gateway, answer, message
):
    assert len(ALIAS_BOMB) < 400
    gateway.script(Reply(text=answer, chunk_chars=4096))
    started = time.monotonic()

    done = run_with_a_sensitive_input(create_task, wait_status)

    assert done["failure"]["reason"] == "malformed_answer", done["failure"]
    assert message in done["failure"]["message"]
    assert cluster.calls == []
    assert time.monotonic() - started < 15  # no alias expansion blocked the worker (2-14 s)


def test_a_sensitive_input_in_a_secrets_data_is_deployed(
    create_task, wait_status, cluster, gateway
):
    gateway.script(Reply(text=plan_answer("web", extra_manifests=[secret_in("Secret", "data")])))

    done = run_with_a_sensitive_input(create_task, wait_status)

    assert done["status"] == "completed", done["failure"]


def test_sensitive_keys_sent_with_input_are_recorded_and_kept_from_the_model(
    client, create_task, wait_status, cluster, gateway, sql_conn
):
    secret = canary("greeting")
    # The model declares an innocuous, non-sensitive input; the user says it is sensitive.
    gateway.script(
        Reply(
            text=json.dumps(
                {
                    "needInputs": [
                        {"name": "GREETING", "type": "string", "sensitive": False, "required": True}
                    ]
                }
            )
        )
    )
    task = create_task(PROMPT)
    assert wait_status(task["id"], "blocked", "failed", "completed")["status"] == "blocked"
    gateway.script(
        Reply(
            text=plan_answer(
                "web",
                extra_manifests=[
                    {
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {"name": "greeting"},
                        "stringData": {"GREETING": "${input:GREETING}"},
                    }
                ],
            )
        )
    )

    response = client.post(
        f"/api/v1/tasks/{task['id']}/input",
        json={"inputs": {"GREETING": secret}, "sensitiveKeys": ["GREETING"]},
    )
    done = wait_status(task["id"], "completed", "failed")

    assert response.status_code == 200 and done["status"] == "completed", done["failure"]
    assert "GREETING" in done["sensitiveKeys"]
    [stored] = [c.manifest for c in cluster.calls if c.op == "apply" and c.ref.kind == "Secret"]
    assert stored["stringData"] == {"GREETING": secret}  # positive control: it was delivered
    resumed = json.dumps(gateway.requests[1].body["messages"])
    assert "GREETING: sensitive, not shown" in resumed
    assert_nowhere([secret], resumed, dump_database(sql_conn))


def test_devbox_calls_carry_the_tasks_workspace_never_a_header(
    make_ai_app, issuer, devbox, gateway
):
    """AUTH_MODE=oidc: the devbox is addressed (and its JWT minted) with the task row's
    workspace; identity headers the client adds change nothing."""
    http = make_ai_app(**oidc_settings(issuer.url)).test_client()
    gateway.script(Reply(text=plan_answer("web"), chunk_chars=50))
    headers = {
        **issuer.bearer(workspaces=("team-a", "team-b")),
        "X-Workspace": "team-b",
        "X-Namespace": "team-a",
        "X-User-Id": "root",
        "X-Forwarded-User": "root",
    }
    created = http.post(
        "/api/v1/tasks", headers=headers, json={"projectId": "demo", "source": PROMPT}
    )
    assert created.status_code == 201, created.get_json()
    task_id = created.get_json()["id"]
    poll_status(
        lambda: http.get(f"/api/v1/tasks/{task_id}", headers=headers).get_json(),
        ("completed", "failed"),
        timeout=20,
        message="the prompt task",
    )
    assert devbox.calls and {call.workspace for call in devbox.calls} == {"team-b"}


#: A model's answer of each kind, the shapes the property below mutates.
NEED_INPUTS = {"needInputs": [{"name": "REPLICAS", "type": "number", "required": True}]}
SERVICE = plan_body()["manifests"][1]
YAML_DATE = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {d: 2020-01-01}\n"


def test_a_model_answer_of_any_shape_ends_the_run_with_a_named_reason(make_ai_app, gateway):
    """Every answer (any JSON, a plan or an input request with fields of other types, text
    PostgreSQL cannot store) parks the run, completes it or fails it naming why; none crashes
    it (`runner_error`)."""
    client = make_ai_app(readiness_timeout_s=1, readiness_poll_s=0.05).test_client()
    seen = Counter()

    @examples(16)
    @given(
        answer=hostile(plan_body()) | hostile(NEED_INPUTS),
        prose=st.sampled_from(["", "Here:\n", "\x00\ud800 "]),
    )
    # The answers that crashed a run (runner_error) before their fields were read by type.
    @example(answer={"needInputs": [{"name": "X", "type": []}]}, prose="")
    @example(answer=plan_body(plan={"summary": "a\x00b"}), prose="")
    @example(answer=plan_body(plan={"summary": "\ud800"}), prose="")
    @example(answer={"plan": {}, "manifests": [{**SERVICE, "spec": [1]}]}, prose="")
    @example(answer={"plan": {}, "manifests": [{**SERVICE, "kind": "A\x00"}]}, prose="")
    @example(answer={"plan": {}, "manifests": [YAML_DATE]}, prose="")
    @example(answer=plan_body(extra_manifests=[{**SERVICE, "spec": {"selector": [1]}}]), prose="")
    @example(answer=plan_body(), prose="\x00\ud800 ")  # unstorable text streamed
    def check(answer, prose):
        gateway.script(Reply(text=prose + json.dumps(answer), chunk_chars=4096))

        created = client.post("/api/v1/tasks", json={"projectId": "demo", "source": PROMPT})
        done = wait_for_status(
            client, created.get_json()["id"], "completed", "failed", "blocked", timeout=30
        )

        failure = done["failure"] or {}
        assert failure.get("reason") in (None, "malformed_answer"), (answer, failure)
        seen[failure.get("reason") or done["status"]] += 1

    check()
    assert seen["completed"] and seen["blocked"] and seen["malformed_answer"], seen
