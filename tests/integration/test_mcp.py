"""The MCP endpoint: the official SDK client against a real server, and the transport's rules."""

import json
import subprocess
import sys

import pytest

from blueprints.api.tool_catalog import MAX_TOOL_WAIT_S, TOOLS
from tests.helpers import (
    IMAGE_SOURCE,
    ROOT,
    oidc_settings,
    poll_status,
    wait_for,
    wait_for_status,
)

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "test", "version": "0"},
    },
}
BOTH = {"Accept": "application/json, text/event-stream"}


def rpc(client, message, session=None, headers=None):
    """POST one message; in a session, with the version header of `initialize`'s default."""
    in_session = {"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"}
    sent = {**BOTH, **(in_session if session else {}), **(headers or {})}
    return client.post(
        "/mcp", data=json.dumps(message), headers=sent, content_type="application/json"
    )


def initialize(client, version="2025-06-18"):
    response = rpc(client, {**INIT, "params": {**INIT["params"], "protocolVersion": version}})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response


@pytest.mark.parametrize("mode", ["auto", "legacy"])
def test_the_sdk_client_lists_creates_waits_cancels_and_explains_across_processes(
    start_server, mode
):
    env = {
        "SANDBOX_APPLY_DELAY_S": "0.05",
        "SANDBOX_READY_DELAY_S": "0.2",
        "READINESS_POLL_S": "0.05",
        # Both processes sign and check the handshake era's sessions with the same key.
        "SECRET_KEY": "mcp-test-key",
    }
    first, second = start_server(env=env), start_server(env=env)
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tests/e2e/mcp_client.py"),
            mode,
            f"{first.base}/mcp",
            f"{second.base}/mcp",
        ],
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stderr[-6000:] + first.output()[-3000:]
    report = json.loads(done.stdout)

    assert report["protocolVersion"] == {"auto": "2026-07-28", "legacy": "2025-11-25"}[mode]
    assert set(report["tools"]) == set(TOOLS)
    for name, tool in report["tools"].items():
        assert tool["output"]["type"] == "object", name
        assert {"readOnlyHint", "destructiveHint"} <= set(tool["annotations"]), name
    hints = {name: tool["annotations"] for name, tool in report["tools"].items()}
    assert hints["cancel_deployment"]["destructiveHint"] is True
    assert hints["cancel_deployment"]["idempotentHint"] is True
    for reader in ("explain_deployment", "wait_for_deployment"):
        assert hints[reader]["readOnlyHint"] is True
    assert hints["create_deployment"]["destructiveHint"] is False
    assert (
        report["tools"]["wait_for_deployment"]["input"]["properties"]["timeoutSeconds"]["maximum"]
        == MAX_TOOL_WAIT_S
    )

    if mode == "auto":
        # The Tasks extension: create answered a task handle, polled on the other process until
        # it ended; the final result is the wait's.
        flow = report["taskFlow"]
        assert flow[0]["handle"] == "working", flow
        assert flow[-1] == {"polled": "completed"}, flow
        assert report["created"]["structured"]["status"] == "completed"
    else:
        assert report["created"]["structured"]["status"] in ("running", "applying", "completed")
    assert report["waited"]["structured"]["snapshot"]["status"] == "completed"
    assert report["cancelled"]["isError"] is False
    assert report["cancelledWait"]["structured"]["snapshot"]["status"] == "cancelled"
    assert report["cancelAgain"]["isError"] is False
    assert report["cancelCompleted"]["isError"] is True
    assert report["cancelCompleted"]["text"].startswith("task_already_finished")
    failure = report["explainedFailure"]["structured"]
    assert failure["status"] == "failed"
    assert "simulated apply error" in failure["logTail"]
    assert report["invalid"]["isError"] is True


def test_initialize_negotiates_the_version_and_signs_a_session_of_its_own(client):
    response = initialize(client, "2025-03-26")
    body = response.get_json()
    assert body["result"]["protocolVersion"] == "2025-03-26"
    assert body["result"]["capabilities"] == {"tools": {"listChanged": False}}
    session = response.headers["Mcp-Session-Id"]
    # Each handshake its own session, even for the same caller and version.
    assert initialize(client, "2025-03-26").headers["Mcp-Session-Id"] != session

    unknown = initialize(client, "1999-01-01").get_json()
    assert unknown["result"]["protocolVersion"] == "2025-11-25"

    old = {"MCP-Protocol-Version": "2025-03-26"}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    pong = rpc(client, ping, session, old)
    assert pong.get_json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    # 2025-03-26 clients predate the header: without it, the session's version is assumed.
    no_header = client.post(
        "/mcp", data=json.dumps(ping), headers={**BOTH, "Mcp-Session-Id": session}
    )
    assert no_header.get_json()["result"] == {}
    notified = rpc(client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session, old)
    assert notified.status_code == 202 and "Content-Type" not in notified.headers
    missing = rpc(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert missing.status_code == 400
    forged = rpc(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session[:-2] + "xx", old)
    assert forged.status_code == 404
    for other in ("1999-01-01", "2025-06-18"):  # unknown, or known but not the session's
        refused = rpc(client, ping, session, {"MCP-Protocol-Version": other})
        assert refused.status_code == 400, other
    nothing = rpc(client, {"jsonrpc": "2.0", "id": 4, "method": "resources/list"}, session, old)
    assert nothing.get_json()["error"]["code"] == -32601


def test_a_session_id_that_is_no_session_id_is_refused_before_any_lookup(client):
    """An Mcp-Session-Id holding a NUL reached PostgreSQL's text and answered 500 (POST and
    DELETE); ids are visible ASCII (the transport spec), so anything else names no session."""
    session = initialize(client).headers["Mcp-Session-Id"]
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    for bad in ("\x00", session + "\x00", "caf\xe9", "a b", "x" * 201):
        posted = rpc(client, ping, bad)
        ended = client.delete("/mcp", headers={"Mcp-Session-Id": bad})
        for response in (posted, ended):
            assert response.status_code == 400, (bad, response.get_data(as_text=True))
            assert "not a session id" in response.get_json()["error"]["message"]
    # Positive control: the session is untouched and still ends on DELETE.
    assert rpc(client, ping, session).get_json()["result"] == {}
    assert client.delete("/mcp", headers={"Mcp-Session-Id": session}).status_code == 204


def test_json_rpc_envelope_errors_follow_the_specification(client):
    session = initialize(client).headers["Mcp-Session-Id"]
    # A message with an id and no method is neither a request nor a response.
    no_method = rpc(client, {"jsonrpc": "2.0", "id": 5}, session)
    assert no_method.status_code == 400
    assert no_method.get_json()["error"]["code"] == -32600
    assert no_method.get_json()["id"] == 5
    # A client's response to a server request is acknowledged.
    assert rpc(client, {"jsonrpc": "2.0", "id": 5, "result": {}}, session).status_code == 202
    for name in (7, None, ["create_deployment"], {"x": 1}):
        call = {"jsonrpc": "2.0", "id": 6, "method": "tools/call", "params": {"name": name}}
        answer = rpc(client, call, session)
        assert answer.status_code == 200, name
        assert answer.get_json()["error"]["code"] == -32602, name
    bad_params = rpc(client, {"jsonrpc": "2.0", "id": 8, "method": "ping", "params": [1]}, session)
    assert bad_params.get_json()["error"]["code"] == -32600


def test_batches_only_in_a_2025_03_26_session(client):
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    old = initialize(client, "2025-03-26").headers["Mcp-Session-Id"]
    batch = rpc(
        client,
        [ping, listed, {"jsonrpc": "2.0", "method": "x"}],
        old,
        {"MCP-Protocol-Version": "2025-03-26"},
    )
    answers = {a["id"]: a for a in batch.get_json()}
    assert answers[1]["result"] == {} and answers[2]["result"]["tools"]
    newer = initialize(client, "2025-06-18").headers["Mcp-Session-Id"]
    refused = rpc(client, [ping], newer)
    assert refused.status_code == 400
    assert refused.get_json()["error"]["code"] == -32600


def test_the_stateless_revision_checks_its_envelope_and_serves_tasks(client, cluster):
    # Never ready: the run waits in verify until the cancel reaches it (a run that completed
    # before the cancel would never say cancelled).
    cluster.ready_after_polls = "never"
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {
            "extensions": {"io.modelcontextprotocol/tasks": {}}
        },
    }

    def call(method, params=None, headers=None):
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": {**(params or {})}}
        message["params"]["_meta"] = meta
        sent = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": method, **(headers or {})}
        return rpc(client, message, headers=sent)

    discovered = call("server/discover").get_json()["result"]
    assert discovered["supportedVersions"] == ["2026-07-28"]
    assert "io.modelcontextprotocol/tasks" in discovered["capabilities"]["extensions"]
    assert call("ping", headers={"MCP-Protocol-Version": "2025-11-25"}).status_code == 400
    assert call("ping", headers={"Mcp-Method": "tools/list"}).get_json()["error"]["code"] == -32020
    no_meta = rpc(
        client,
        {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}},
        headers={"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"},
    )
    assert no_meta.status_code == 400 and no_meta.get_json()["error"]["code"] == -32602
    assert call("initialize").status_code == 404  # no handshake in this revision

    created = call(
        "tools/call",
        {"name": "create_deployment", "arguments": {"projectId": "demo", "source": IMAGE_SOURCE}},
    ).get_json()["result"]
    assert created["resultType"] == "task" and created["status"] == "working"
    polled = call("tasks/get", {"taskId": created["taskId"]}).get_json()["result"]
    assert polled["taskId"] == created["taskId"]
    assert call("tasks/cancel", {"taskId": created["taskId"]}).get_json()["result"] == {
        "resultType": "complete",
        "_meta": {
            "io.modelcontextprotocol/serverInfo": {"name": "deployment-task-engine", "version": "1"}
        },
    }
    ended = poll_status(
        lambda: call("tasks/get", {"taskId": created["taskId"]}).get_json()["result"],
        ("cancelled",),
        message="the task handle to say cancelled",
    )
    assert ended["result"]["structuredContent"]["status"] == "cancelled"
    unknown = call("tasks/get", {"taskId": "00000000-0000-0000-0000-000000000000"})
    assert unknown.get_json()["error"]["code"] == -32602


def test_the_origin_rule_is_the_sites_public_origin_not_the_requests_host(make_app):
    client = make_app(public_origin="https://deploy.example.com").test_client()
    session = initialize(client).headers["Mcp-Session-Id"]
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    assert rpc(client, ping, session, {"Origin": "https://deploy.example.com"}).status_code == 200
    # The request's own Host (localhost) is no longer an acceptable origin.
    refused = rpc(client, ping, session, {"Origin": "http://localhost"})
    assert refused.status_code == 403
    assert refused.get_json()["error"]["message"] == "cross-origin requests are refused"


def test_transport_rules_origin_accept_sse_and_get(client):
    session = initialize(client).headers["Mcp-Session-Id"]
    ping = {"jsonrpc": "2.0", "id": 7, "method": "ping"}
    # The configured origin (PUBLIC_ORIGIN, by default http://<trusted host>:PORT).
    ours = next(o for o in client.application.config["PUBLIC_ORIGINS"] if "localhost" in o)
    assert rpc(client, ping, session, {"Origin": ours}).status_code == 200
    assert rpc(client, ping, session, {"Origin": "http://evil.example"}).status_code == 403
    assert rpc(client, ping, session, {"Accept": "text/html"}).status_code == 406
    sse = rpc(client, ping, session, {"Accept": "text/event-stream"})
    assert sse.status_code == 200 and sse.mimetype == "text/event-stream"
    frame = sse.get_data(as_text=True)
    assert frame.startswith("event: message\ndata: ")
    assert json.loads(frame.split("data: ", 1)[1]) == {"jsonrpc": "2.0", "id": 7, "result": {}}
    assert client.get("/mcp").status_code == 405
    assert (
        client.post("/mcp", data="{nope", headers=BOTH, content_type="application/json").status_code
        == 400
    )


def test_wait_for_deployment_wakes_on_the_change_not_on_a_timer(client, cluster, runtime):
    cluster.ready_after_polls = "never"
    session = initialize(client).headers["Mcp-Session-Id"]
    created = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {"kind": "image", "image": "nginx:1.27", "name": "web"},
        },
    ).get_json()
    wait_for_status(client, created["id"], "applying")
    import gevent

    waiting = gevent.spawn(
        rpc,
        client,
        {
            "jsonrpc": "2.0",
            "id": 9,
            "method": "tools/call",
            "params": {
                "name": "wait_for_deployment",
                "arguments": {"taskId": created["id"], "timeoutSeconds": 120},
            },
        },
        session,
    )
    wait_for(
        lambda: any(sub.task == created["id"] for sub in list(runtime.listener.subscribers)),
        message="the wait to subscribe",
    )
    assert not waiting.ready()
    assert client.post(f"/api/v1/tasks/{created['id']}/cancel").status_code == 200
    answer = waiting.get(timeout=15).get_json()["result"]
    assert answer["isError"] is False
    assert answer["structuredContent"]["outcome"] == "terminal"
    assert answer["structuredContent"]["snapshot"]["status"] == "cancelled"


def test_in_oidc_mode_mcp_needs_a_bearer_token_and_scopes_tools_to_its_workspace(make_app, issuer):
    client = make_app(**oidc_settings(issuer.url)).test_client()
    team_a = issuer.bearer(workspaces=("team-a",))
    # Positive control first: a valid token initializes, lists the tools and calls one.
    session = rpc(client, INIT, headers=team_a)
    assert session.status_code == 200, session.get_data(as_text=True)
    session_id = session.headers["Mcp-Session-Id"]
    listed = rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session_id, team_a)
    assert "create_deployment" in {t["name"] for t in listed.get_json()["result"]["tools"]}
    called = rpc(
        client,
        {
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {
                "name": "create_deployment",
                "arguments": {"projectId": "demo", "source": IMAGE_SOURCE},
            },
        },
        session_id,
        team_a,
    )
    result = called.get_json()["result"]
    assert result["isError"] is False, result
    task_id = result["structuredContent"]["id"]
    # The task lives in the token's workspace: team-a sees it, team-b does not.
    assert client.get(f"/api/v1/tasks/{task_id}", headers=team_a).status_code == 200
    team_b = issuer.bearer(user="bob", workspaces=("team-b",))
    assert client.get(f"/api/v1/tasks/{task_id}", headers=team_b).status_code == 404

    # No token: the JSON 401 with the bearer challenge (an MCP client's cue to authorize).
    for message, sid in (
        (INIT, None),
        ({"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, session_id),
    ):
        refused = rpc(client, message, sid)
        assert refused.status_code == 401
        assert refused.headers["WWW-Authenticate"].startswith("Bearer")
        assert refused.get_json()["code"] == "unauthenticated"
