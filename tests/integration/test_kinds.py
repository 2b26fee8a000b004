"""Each source kind end to end: a run records the steps its runner declares, in order, and the
timeline counts exactly those ("step k of n")."""

import json
import re

import pytest

from engine.integrations import Integrations
from engine.integrations.base import ExecResult
from engine.integrations.gateway import GatewayClient
from engine.runners.kinds import KINDS
from tests.fakes import FakeDevbox, FakeGatewayServer, Reply
from tests.helpers import IMAGE_SOURCE, events, wait_for_status

#: A plan the fake model answers for the AI kinds: one Deployment.
PLAN = {
    "plan": {"summary": "nginx as web"},
    "manifests": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                },
            },
        }
    ],
}
#: A source of every kind that deploys to completed on the fakes.
SOURCES = {
    "template": {"kind": "template", "template": "webapp"},
    "image": IMAGE_SOURCE,
    "database": {"kind": "database", "engine": "postgresql", "name": "db"},
    "github": {"kind": "github", "repo": "acme/shop", "ref": "main"},
    "prompt": {"kind": "prompt", "prompt": "deploy an nginx web server"},
}


@pytest.fixture
def gateway():
    server = FakeGatewayServer().start()
    yield server
    server.stop()


@pytest.fixture
def client(make_app, cluster, gateway):
    """A client of an app whose runs use the fake cluster, devbox and gateway."""
    devbox = FakeDevbox(
        exec_results={"git -C /workspace/repo ls-files": ExecResult(0, "Dockerfile\n", "")}
    )
    integrations = Integrations(
        cluster=lambda kubeconfig: cluster,
        cluster_label="fake",
        devbox=devbox,
        gateway=GatewayClient(gateway.url, "fake-model", "gw-key", retries=0, idle_timeout_s=10),
    )
    return make_app(overrides={"integrations": integrations}).test_client()


def test_every_kind_is_covered():
    assert set(SOURCES) == set(KINDS)


@pytest.mark.parametrize("kind", list(KINDS))
def test_a_run_records_the_steps_its_runner_declares_and_the_timeline_counts_them(
    kind, client, gateway
):
    if KINDS[kind].streamed:
        gateway.script(Reply(text="```json\n" + json.dumps(PLAN) + "\n```"))
    created = client.post("/api/v1/tasks", json={"projectId": "demo", "source": SOURCES[kind]})
    assert created.status_code == 201, created.get_json()
    task_id = created.get_json()["id"]

    snap = wait_for_status(client, task_id, "completed", "failed", "blocked")
    assert snap["status"] == "completed", snap["failure"]
    recorded = [e["payload"]["step"] for e in events(client, task_id) if e["kind"] == "step"]
    assert list(dict.fromkeys(recorded)) == list(KINDS[kind].steps)

    pane = client.get(f"/tasks/{task_id}/timeline", headers={"HX-Request": "true"})
    html = pane.get_data(as_text=True)
    shown = re.findall(r'<li id="tl-step-[^"]*" class="step ', html)
    expected = re.search(r'data-expected-steps="(\d+)"', html)
    assert len(shown) == int(expected.group(1)) == len(KINDS[kind].steps)
