"""The MCP endpoint: the official SDK client against a real server, and the transport's rules."""

import json
import subprocess
import sys

from tests.helpers import IMAGE_SOURCE, ROOT, oidc_settings, wait_for, wait_for_status

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
    sent = {**BOTH, **({"Mcp-Session-Id": session} if session else {}), **(headers or {})}
    return client.post(
        "/mcp", data=json.dumps(message), headers=sent, content_type="application/json"
    )


def initialize(client, version="2025-06-18"):
    response = rpc(client, {**INIT, "params": {**INIT["params"], "protocolVersion": version}})
    assert response.status_code == 200, response.get_data(as_text=True)
    return response


def test_the_sdk_client_lists_creates_waits_cancels_and_explains(start_server):
    server = start_server(
        env={
            "SANDBOX_APPLY_DELAY_S": "0.05",
            "SANDBOX_READY_DELAY_S": "0.2",
            "READINESS_POLL_S": "0.05",
        }
    )
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests/e2e/mcp_client.py"), f"{server.base}/mcp"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:] + server.output()[-3000:]
    report = json.loads(done.stdout)

    assert report["protocolVersion"] == "2025-11-25"
    assert set(report["tools"]) == {
        "create_deployment",
        "cancel_deployment",
        "redeploy_deployment",
        "submit_deployment_inputs",
        "explain_deployment",
        "wait_for_deployment",
    }
    assert report["tools"]["wait_for_deployment"]["properties"]["timeoutSeconds"]["maximum"] == 300
    assert report["created"]["isError"] is False
    assert report["created"]["structured"]["status"] == "running"
    waited = report["waited"]["structured"]
    assert waited["outcome"] == "terminal" and waited["snapshot"]["status"] == "completed"

    # The never-ready deployment: the wait times out saying so, a cancel stops it mid-run.
    hanging = report["hangingWait"]["structured"]
    assert hanging["outcome"] == "timeout" and hanging["snapshot"]["status"] == "applying"
    assert report["cancelled"]["structured"]["cancelRequestedAt"] is not None
    cancelled = report["cancelledWait"]["structured"]
    assert cancelled["outcome"] == "terminal" and cancelled["snapshot"]["status"] == "cancelled"
    explained = report["explainedCancel"]["structured"]
    assert explained["status"] == "cancelled" and "cancelled" in explained["summary"]
    assert explained["recent"] and explained["logTail"] is None
    # Cancelling a cancelled task again is a no-op that answers the current snapshot ...
    assert report["cancelAgain"]["isError"] is False
    assert report["cancelAgain"]["structured"]["status"] == "cancelled"
    # ... while cancelling a completed one is a tool error whose text starts with the stable code.
    assert report["cancelCompleted"]["isError"] is True
    assert report["cancelCompleted"]["text"].startswith("task_already_finished:")
    assert report["invalid"]["isError"] is True
    assert report["invalid"]["text"].startswith("invalid_request:")
    assert set(report["invalid"]["structured"]["fields"]) == {"projectId", "source"}

    failure = report["explainedFailure"]["structured"]
    assert failure["status"] == "failed"
    assert "simulated apply error" in failure["logTail"]


def test_initialize_negotiates_the_version_and_signs_a_session(client):
    response = initialize(client, "2025-03-26")
    body = response.get_json()
    assert body["result"]["protocolVersion"] == "2025-03-26"
    assert body["result"]["capabilities"] == {"tools": {"listChanged": False}}
    session = response.headers["Mcp-Session-Id"]

    unknown = initialize(client, "1999-01-01").get_json()
    assert unknown["result"]["protocolVersion"] == "2025-11-25"

    pong = rpc(client, {"jsonrpc": "2.0", "id": 2, "method": "ping"}, session)
    assert pong.get_json() == {"jsonrpc": "2.0", "id": 2, "result": {}}
    assert (
        rpc(client, {"jsonrpc": "2.0", "method": "notifications/initialized"}, session).status_code
        == 202
    )
    missing = rpc(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"})
    assert missing.status_code == 400
    forged = rpc(client, {"jsonrpc": "2.0", "id": 3, "method": "ping"}, session[:-2] + "xx")
    assert forged.status_code == 404
    bad_version = rpc(
        client,
        {"jsonrpc": "2.0", "id": 3, "method": "ping"},
        session,
        {"MCP-Protocol-Version": "1999-01-01"},
    )
    assert bad_version.status_code == 400
    nothing = rpc(client, {"jsonrpc": "2.0", "id": 4, "method": "resources/list"}, session)
    assert nothing.get_json()["error"]["code"] == -32601


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
