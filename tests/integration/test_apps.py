"""Apps and rollback through the API, the chat tools, MCP and the app page: the deployments that
converge on the same resources, their history newest first, and "Roll back to this"."""

import json
import re
import textwrap
import threading

import pytest

from tests.helpers import (
    applied_manifests,
    assert_nowhere,
    canary,
    create,
    dump_database,
    events,
    steps,
    template,
    wait_for_status,
)

V1 = {"kind": "image", "image": "nginx:1.26", "name": "web", "port": 80}
V2 = {**V1, "image": "nginx:1.27"}
APP = "/api/v1/projects/demo/apps/image:web"


def rollback(client, task_id, **headers):
    return client.post(f"/api/v1/tasks/{task_id}/rollback", headers=headers)


def completed(client, source, **body) -> dict:
    task = create(client, source, **body)
    snap = wait_for_status(client, task["id"], "completed", "failed", "blocked")
    assert snap["status"] == "completed", snap
    return snap


def deployment_images(cluster) -> list[str]:
    return [
        m["spec"]["template"]["spec"]["containers"][0]["image"]
        for m in applied_manifests(cluster, "Deployment")
    ]


def test_a_rollback_applies_v1s_plan_and_the_history_lists_all_three_newest_first(client, cluster):
    v1 = completed(client, V1)
    assert v1["appKey"] == "image:web"
    cluster.fail_kinds = {"Service"}
    v2 = create(client, V2)
    assert wait_for_status(client, v2["id"], "failed", "completed")["status"] == "failed"
    cluster.fail_kinds = set()
    assert deployment_images(cluster) == ["nginx:1.26", "nginx:1.27"]

    response = rollback(client, v1["id"])
    assert response.status_code == 201, response.get_json()
    back = response.get_json()
    assert response.headers["Location"] == f"/api/v1/tasks/{back['id']}"
    assert back["rolledBackFromTaskId"] == v1["id"] and back["retriedFromTaskId"] is None
    assert back["appKey"] == "image:web" and back["source"] == V1
    assert wait_for_status(client, back["id"], "completed", "failed")["status"] == "completed"
    # v1's plan, on the same objects.
    assert deployment_images(cluster) == ["nginx:1.26", "nginx:1.27", "nginx:1.26"]
    assert [m["metadata"]["name"] for m in applied_manifests(cluster, "Deployment")] == ["web"] * 3
    created = next(e for e in events(client, back["id"]) if e["kind"] == "created")
    assert created["payload"]["rolledBackFromTaskId"] == v1["id"]

    app = client.get(APP).get_json()
    assert (app["kind"], app["name"], app["status"]) == ("image", "web", "completed")
    assert [(r["kind"], r["name"], r["taskId"], r["status"]) for r in app["resources"]] == [
        ("Deployment", "web", back["id"], "completed"),
        ("Service", "web", back["id"], "completed"),
    ]
    # A Service answers inside the cluster only: labelled so, never a link.
    assert app["endpoints"] == [{"address": "web.demo.svc:80", "url": None, "inCluster": True}]
    history = app["history"]["items"]
    assert [(h["id"], h["status"], h["rollbackable"]) for h in history] == [
        (back["id"], "completed", True),
        (v2["id"], "failed", False),
        (v1["id"], "completed", True),
    ]
    assert app["history"]["nextCursor"] is None
    listed = client.get("/api/v1/projects/demo/apps").get_json()["items"]
    assert [a["key"] for a in listed] == ["image:web"]

    # Paged: one at a time, newest first, by cursor.
    seen, cursor = [], None
    while True:
        page = client.get(APP, query_string={"limit": 1, **({"cursor": cursor} if cursor else {})})
        body = page.get_json()["history"]
        seen += [h["id"] for h in body["items"]]
        cursor = body["nextCursor"]
        if cursor is None:
            break
    assert seen == [back["id"], v2["id"], v1["id"]]


@pytest.mark.parametrize("status", ["failed", "cancelled", "running", "blocked", "queued"])
def test_a_rollback_to_a_deployment_that_did_not_complete_is_409(client, insert_task, status):
    task = insert_task(status=status)
    response = rollback(client, task["id"])
    assert response.status_code == 409
    body = response.get_json()
    assert body["code"] == "task_not_rollbackable"
    assert body["snapshot"]["id"] == str(task["id"]) and body["snapshot"]["status"] == status


def test_a_task_with_no_app_cannot_be_rolled_back(client, insert_task):
    prompt = insert_task(
        status="completed", source={"kind": "prompt", "prompt": "a blog"}, source_kind="prompt"
    )
    assert prompt["app_key"] is None
    response = rollback(client, prompt["id"])
    assert response.status_code == 409 and response.get_json()["code"] == "task_not_rollbackable"


def test_two_rollbacks_at_once_start_one_the_other_gets_409_with_the_winner(
    app, client, cluster, sql_conn
):
    v1 = completed(client, V1)
    cluster.apply_delay_s = 2  # the winner stays active while the others race
    responses = []

    def one():
        responses.append(rollback(app.test_client(), v1["id"]))

    threads = [threading.Thread(target=one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 7
    winner = next(r for r in responses if r.status_code == 201).get_json()
    for lost in (r.get_json() for r in responses if r.status_code == 409):
        assert lost["code"] == "app_deploy_active" and lost["snapshot"]["id"] == winner["id"]
    active = sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_tasks WHERE rolled_back_from_task_id IS NOT NULL"
    ).fetchone()["n"]
    assert active == 1
    assert client.post(f"/api/v1/tasks/{winner['id']}/cancel").status_code == 200


def test_a_rollback_while_a_deploy_of_the_app_is_active_is_409_with_it(client, cluster):
    v1 = completed(client, V1)
    cluster.ready_after_polls = "never"
    running = create(client, V2)
    response = rollback(client, v1["id"])
    assert response.status_code == 409
    assert response.get_json()["code"] == "app_deploy_active"
    assert response.get_json()["snapshot"]["id"] == running["id"]
    assert client.post(f"/api/v1/tasks/{running['id']}/cancel").status_code == 200


def test_a_rollback_is_idempotent_by_key(client, sql_conn):
    v1 = completed(client, V1)
    first = rollback(client, v1["id"], **{"Idempotency-Key": "rb-1"})
    again = rollback(client, v1["id"], **{"Idempotency-Key": "rb-1"})
    assert first.status_code == again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first.get_json()["id"]
    assert again.headers["Location"] == first.headers["Location"]
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_tasks WHERE rolled_back_from_task_id = %s",
            (v1["id"],),
        ).fetchone()["n"]
        == 1
    )


def test_a_template_rollback_converges_on_the_same_instance(client, cluster):
    v1 = completed(client, template("webapp", image="nginx:1.26"))
    instance = v1["resultIdentities"]["templateInstanceName"]
    assert v1["appKey"] == f"template:{instance}"
    back = rollback(client, v1["id"]).get_json()
    assert back["resultIdentities"] == v1["resultIdentities"]
    assert wait_for_status(client, back["id"], "completed", "failed")["status"] == "completed"
    assert [m["metadata"]["name"] for m in applied_manifests(cluster, "Deployment")] == [
        instance,
        instance,
    ]
    assert deployment_images(cluster) == ["nginx:1.26", "nginx:1.26"]
    assert [s["reused"] for s in steps(client, back["id"], "identity")] == [True]
    app = client.get(f"/api/v1/projects/demo/apps/template:{instance}").get_json()
    assert [h["id"] for h in app["history"]["items"]] == [back["id"], v1["id"]]


NOTE = """
name: note
title: Note
description: a note kept in a Secret, served behind an Ingress
inputs:
  - name: note
    type: string
    sensitive: true
  - name: code
    type: string
    required: true
resources:
  - apiVersion: v1
    kind: Secret
    metadata:
      name: ${instance}
    stringData:
      note: ${inputs.note}
      code: ${inputs.code}
  - apiVersion: networking.k8s.io/v1
    kind: Ingress
    metadata:
      name: ${instance}
    spec:
      rules:
        - host: notes.example.com
          http:
            paths:
              - path: /
                pathType: Prefix
                backend:
                  service:
                    name: ${instance}
                    port:
                      number: 80
"""


def test_a_rollback_of_a_plan_with_a_secret_asks_for_it_again_and_stores_it_nowhere(
    make_app, cluster, sql_conn, tmp_path
):
    (tmp_path / "note.yaml").write_text(textwrap.dedent(NOTE))
    client = make_app(template_catalog_dir=str(tmp_path)).test_client()
    first, second = canary("first"), canary("second")
    v1 = completed(client, template("note", note=first, code="plain-code"))
    # The positive control: the cluster got the value, so the detector below can see it.
    assert applied_manifests(cluster, "Secret")[0]["stringData"]["note"] == first
    instance = v1["resultIdentities"]["templateInstanceName"]
    app = client.get(f"/api/v1/projects/demo/apps/template:{instance}").get_json()
    # An Ingress host is an endpoint a user can open.
    assert app["endpoints"] == [
        {
            "address": "http://notes.example.com/",
            "url": "http://notes.example.com/",
            "inCluster": False,
        }
    ]

    back = rollback(client, v1["id"]).get_json()
    blocked = wait_for_status(client, back["id"], "blocked", "completed", "failed")
    assert blocked["status"] == "blocked"
    pending = {d["name"]: d for d in blocked["pendingInputs"]}
    assert pending["note"]["missing"] is True and pending["note"]["sensitive"] is True
    assert pending["code"]["missing"] is False  # the plan's plain settings are kept
    answered = client.post(f"/api/v1/tasks/{back['id']}/input", json={"inputs": {"note": second}})
    assert answered.status_code == 200
    assert wait_for_status(client, back["id"], "completed", "failed")["status"] == "completed"
    assert applied_manifests(cluster, "Secret")[-1]["stringData"] == {
        "note": second,
        "code": "plain-code",
    }
    assert applied_manifests(cluster, "Secret")[-1]["metadata"]["name"] == instance
    history = client.get(f"/api/v1/projects/demo/apps/template:{instance}").get_data(as_text=True)
    assert_nowhere(
        [first, second],
        dump_database(sql_conn),
        history,
        json.dumps(events(client, back["id"])),
    )


def test_another_workspaces_app_and_task_are_404(client, insert_task):
    foreign = insert_task(status="completed", workspace="elsewhere")
    assert foreign["app_key"] == "image:web"
    response = client.get(APP)
    assert response.status_code == 404 and response.get_json()["code"] == "app_not_found"
    assert client.get("/api/v1/projects/demo/apps").get_json()["items"] == []
    refused = rollback(client, foreign["id"])
    assert refused.status_code == 404 and refused.get_json()["code"] == "task_not_found"
    # Positive control: the same row in this workspace is an app.
    insert_task(status="completed")
    assert client.get(APP).status_code == 200


def mcp(client, method: str, params: dict | None = None, session: str | None = None):
    """One JSON-RPC call to /mcp; the response."""
    headers = {"Accept": "application/json, text/event-stream"}
    if session:
        # A session's later requests name its revision (the one `initialize` agreed below).
        headers.update({"Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-06-18"})
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    return client.post(
        "/mcp", data=json.dumps(message), headers=headers, content_type="application/json"
    )


def test_the_chat_tool_and_mcp_roll_back(client, sql_conn):
    v1 = completed(client, V1)
    by_tool = client.post("/api/v1/tools/rollback_deployment", json={"taskId": v1["id"]})
    assert by_tool.status_code == 201
    assert by_tool.get_json()["rolledBackFromTaskId"] == v1["id"]
    assert (
        wait_for_status(client, by_tool.get_json()["id"], "completed", "failed")["status"]
        == "completed"
    )

    hello = {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t"}}
    session = mcp(client, "initialize", hello).headers["Mcp-Session-Id"]
    listed = mcp(client, "tools/list", session=session)
    assert "rollback_deployment" in {t["name"] for t in listed.get_json()["result"]["tools"]}
    arguments = {"taskId": v1["id"]}
    called = mcp(
        client, "tools/call", {"name": "rollback_deployment", "arguments": arguments}, session
    ).get_json()["result"]
    assert called["isError"] is False
    assert called["structuredContent"]["rolledBackFromTaskId"] == v1["id"]
    wait_for_status(client, called["structuredContent"]["id"], "completed", "failed")
    failed = sql_conn.execute(
        "UPDATE deploy_tasks SET status = 'failed' WHERE id = %s RETURNING id", (v1["id"],)
    ).fetchone()
    refused = client.post("/api/v1/tools/rollback_deployment", json={"taskId": str(failed["id"])})
    assert refused.status_code == 409 and refused.get_json()["code"] == "task_not_rollbackable"


# -- the pages ----------------------------------------------------------------------------------
def csrf_of(html: str) -> str:
    return re.search(r'name="csrf-token" content="([^"]+)"', html).group(1)


def test_the_app_page_shows_history_and_offers_rollback_only_on_completed_entries(client, cluster):
    v1 = completed(client, V1)
    cluster.fail_kinds = {"Service"}
    v2 = create(client, V2)
    wait_for_status(client, v2["id"], "failed")
    cluster.fail_kinds = set()

    project = client.get("/projects/demo").get_data(as_text=True)
    assert 'href="/projects/demo/apps/image:web"' in project

    page = client.get("/projects/demo/apps/image:web")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    entries = re.findall(r'<li class="history-entry" data-task="([^"]+)" data-status="(\w+)"', html)
    assert entries == [(v2["id"], "failed"), (v1["id"], "completed")]
    assert re.findall(r'data-rollback-for="([^"]+)"', html) == [v1["id"]]
    assert f'href="/projects/demo?task={v1["id"]}"' in html  # each entry opens its timeline
    # v2 re-applied the Deployment and failed on the Service: the Service v1 applied is still
    # there, and still answers in the cluster.
    app = client.get(APP).get_json()
    assert [(r["kind"], r["taskId"]) for r in app["resources"]] == [
        ("Deployment", v2["id"]),
        ("Service", v1["id"]),
    ]
    assert "web.demo.svc:80" in html and "in-cluster" in html

    # The form is CSRF-checked like every page form.
    assert client.post(f"/tasks/{v1['id']}/rollback").status_code == 403
    posted = client.post(f"/tasks/{v1['id']}/rollback", data={"csrf_token": csrf_of(html)})
    assert posted.status_code == 303
    new_id = re.search(r"task=([0-9a-f-]+)", posted.headers["Location"]).group(1)
    assert wait_for_status(client, new_id, "completed", "failed")["status"] == "completed"
    # Its timeline says what it rolls back to and leads to the app's history.
    opened = client.get(posted.headers["Location"]).get_data(as_text=True)
    head = re.search(rf'<header id="tl-head-{new_id}".*?</header>', opened, re.S).group(0)
    assert f'data-open-for="{v1["id"]}"' in head and "rollback to" in head
    assert 'data-app-link="image:web"' in head
    # htmx follows the same answer as HX-Redirect; a refusal renders the pages' error message.
    refused = client.post(
        f"/tasks/{v2['id']}/rollback",
        data={"csrf_token": csrf_of(html)},
        headers={"HX-Request": "true"},
    )
    assert refused.status_code == 409 and "rolled back" in refused.get_data(as_text=True)
    assert client.get("/projects/demo/apps/image:nope").status_code == 404
