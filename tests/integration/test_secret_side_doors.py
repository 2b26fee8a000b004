"""Secrets through side doors: short values, truncated messages, the server's own credentials,
the page forms' error text."""

import json

import pytest

from engine.integrations import Integrations
from engine.integrations.gateway import GatewayClient
from tests.fakes import FakeDevbox, FakeGatewayServer, Reply
from tests.helpers import IMAGE_SOURCE, assert_nowhere, canary, dump_database


def rows(sql_conn) -> int:
    return sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"]


def page_post(client, path, form):
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    return client.post(path, data=form, headers={"X-CSRF-Token": "test-token"})


@pytest.mark.parametrize(
    "path, body, field",
    [
        (
            "/api/v1/tasks",
            {"projectId": "demo", "source": {**IMAGE_SOURCE, "env": {"API_TOKEN": "abc"}}},
            {"source": {"env": {"API_TOKEN": ["a sensitive value needs at least 8 characters"]}}},
        ),
        (
            "/api/v1/tasks",
            {
                "projectId": "demo",
                "source": IMAGE_SOURCE,
                "inputs": {"plain": "1234567"},
                "sensitiveKeys": ["plain"],
            },
            {"inputs": {"plain": ["a sensitive value needs at least 8 characters"]}},
        ),
        (
            "/api/v1/tasks",
            {
                "projectId": "demo",
                "source": {
                    "kind": "template",
                    "template": "postgresql",
                    "args": {"password": "pw"},
                },
            },
            {"source": {"args": {"password": ["a sensitive value needs at least 8 characters"]}}},
        ),
        (
            "/api/v1/tools/create_deployment",
            {"projectId": "demo", "source": IMAGE_SOURCE, "inputs": {"DB_PASSWORD": "short"}},
            {"inputs": {"DB_PASSWORD": ["a sensitive value needs at least 8 characters"]}},
        ),
    ],
)
def test_a_sensitive_value_too_short_to_scrub_is_refused_at_create(
    client, sql_conn, path, body, field
):
    before = rows(sql_conn)
    ok = dict(body, inputs={k: "long-enough-1" for k in body.get("inputs", {})})
    if "env" in body["source"]:
        ok["source"] = dict(body["source"], env={"API_TOKEN": "long-enough-1"})
    if "args" in body["source"]:
        ok["source"] = dict(body["source"], args={"password": "long-enough-1"})

    response = client.post(path, json=body)
    accepted = client.post(path, json=ok)  # positive control: 8 characters or more pass

    assert (response.status_code, response.get_json()["code"]) == (400, "invalid_request")
    assert response.get_json()["fields"] == field
    assert accepted.status_code == 201, accepted.get_json()
    assert rows(sql_conn) == before + 1


def test_a_short_sensitive_answer_is_refused_on_every_input_path(client, insert_task):
    blocked = insert_task(
        status="blocked",
        sensitive_keys=["DB_PASSWORD"],
        artifact_summary={
            "pendingInputs": [
                {"name": "DB_PASSWORD", "type": "password", "sensitive": True, "required": True},
                {"name": "greeting", "type": "string", "sensitive": True, "required": False},
            ]
        },
    )
    path = f"/api/v1/tasks/{blocked['id']}/input"

    api = client.post(path, json={"inputs": {"DB_PASSWORD": "short"}})
    declared = client.post(
        path, json={"inputs": {"DB_PASSWORD": "long-enough-1", "greeting": "hi"}}
    )
    named = client.post(
        path, json={"inputs": {"DB_PASSWORD": "long-enough-1", "x": "1234"}, "sensitiveKeys": ["x"]}
    )
    tool = client.post(
        "/api/v1/tools/submit_deployment_inputs",
        json={"taskId": str(blocked["id"]), "inputs": {"DB_PASSWORD": "short"}},
    )
    page = page_post(
        client,
        f"/tasks/{blocked['id']}/input",
        {"f:DB_PASSWORD": "short", "f:greeting": "long-enough-2"},
    )

    for response, name in (
        (api, "DB_PASSWORD"),
        (declared, "greeting"),
        (named, "x"),
        (tool, "DB_PASSWORD"),
    ):
        assert response.status_code == 400, response.get_json()
        assert name in response.get_json()["fields"]["inputs"]
    assert page.status_code == 200
    assert "at least 8 characters" in page.get_data(as_text=True)
    assert client.get(f"/api/v1/tasks/{blocked['id']}").get_json()["status"] == "blocked"
    ok = client.post(path, json={"inputs": {"DB_PASSWORD": "long-enough-1"}})
    assert ok.status_code == 200, ok.get_json()  # positive control


def test_the_pages_create_form_refuses_a_short_secret_by_name(client, sql_conn):
    before = rows(sql_conn)

    response = page_post(
        client,
        "/projects/demo/tasks",
        {"kind": "image", "f:image": "nginx:1.27", "f:name": "web", "s:env": "API_TOKEN=abc"},
    )

    assert response.status_code == 200
    assert "API_TOKEN: a sensitive value needs at least 8 characters" in response.get_data(
        as_text=True
    )
    assert rows(sql_conn) == before


def test_the_secret_values_error_never_echoes_the_line(client, sql_conn):
    secret = canary("pairs")

    response = page_post(
        client,
        "/projects/demo/tasks",
        {"kind": "image", "f:image": "nginx:1.27", "f:name": "web", "s:env": secret},
    )

    html = response.get_data(as_text=True)
    assert "line 1 is not KEY=value" in html  # positive control: the error is shown
    assert_nowhere([secret], html, dump_database(sql_conn))
    assert secret[:8] not in html


def test_a_message_cut_inside_a_secret_keeps_no_part_of_it(client, cluster, wait_status):
    secret = canary("straddle")

    def crash(manifest, *, abort):
        # "RuntimeError: " + 470 characters: the secret starts at 484 and crosses the 500 cut.
        raise RuntimeError("x" * 470 + f"{secret} and more")

    cluster.apply = crash

    task = client.post(
        "/api/v1/tasks",
        json={"projectId": "demo", "source": IMAGE_SOURCE, "inputs": {"PASSWORD": secret}},
    ).get_json()
    failure = wait_status(task["id"], "failed")["failure"]

    assert failure["reason"] == "runner_error" and len(failure["message"]) <= 500
    assert "x" * 400 in failure["message"]  # positive control: the message is there, bounded
    assert secret[:5] not in failure["message"] and "[redacted]" in failure["message"]


def test_the_gateway_key_never_reaches_a_task(make_app, cluster, sql_conn, wait_status):
    key = "gw-key-" + canary("server")
    gateway = FakeGatewayServer().start()
    try:
        gateway.script(Reply(status=400, text=f"invalid api key {key}"))
        client = make_app(
            overrides={
                "integrations": Integrations(
                    cluster=lambda kubeconfig: cluster,
                    cluster_label="fake",
                    devbox=FakeDevbox(),
                    gateway=GatewayClient(gateway.url, "fake-model", key, retries=0),
                )
            }
        ).test_client()
        task = client.post(
            "/api/v1/tasks",
            json={"projectId": "demo", "source": {"kind": "prompt", "prompt": "a web app"}},
        ).get_json()
        failure = wait_status(task["id"], "failed")["failure"]
    finally:
        gateway.stop()

    assert gateway.requests[0].headers["Authorization"] == f"Bearer {key}"  # it was used
    assert "invalid api key [redacted]" in failure["message"]
    assert_nowhere([key], json.dumps(failure), dump_database(sql_conn))
