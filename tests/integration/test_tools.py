"""Chat tools: schemas generated from the API's validation, calls landing on the same actions."""

from tests.helpers import IMAGE_SOURCE, wait_for

COMPARED = (
    "status",
    "project_id",
    "source",
    "sensitive_keys",
    "source_kind",
    "runner",
    "retried_from_task_id",
    "created_by",
    "workspace",
)


def row(sql_conn, task_id):
    return sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()


def call(client, name, **args):
    return client.post(f"/api/v1/tools/{name}", json=args)


def test_tools_are_listed_with_json_schema_parameters(client):
    items = {t["name"]: t for t in client.get("/api/v1/tools").get_json()["items"]}
    assert set(items) == {
        "create_deployment",
        "cancel_deployment",
        "redeploy_deployment",
        "rollback_deployment",
        "submit_deployment_inputs",
        "explain_deployment",
        "wait_for_deployment",
    }
    create = items["create_deployment"]["parameters"]
    assert create["type"] == "object" and create["additionalProperties"] is False
    assert set(create["required"]) == {"projectId", "source"}
    assert create["properties"]["projectId"]["pattern"].startswith("^[a-z0-9]")
    image = next(
        s
        for s in create["properties"]["source"]["oneOf"]
        if s["properties"]["kind"].get("const") == "image"
    )
    assert set(image["required"]) == {"kind", "image", "name"}
    assert image["properties"]["port"] == {"type": "integer", "minimum": 1, "maximum": 65535}
    template = next(
        s
        for s in create["properties"]["source"]["oneOf"]
        if s["properties"]["kind"].get("const") == "template"
    )
    assert template["properties"]["args"]["additionalProperties"] == {
        "type": ["string", "integer", "boolean"],
        "minimum": -(2**53 - 1),
        "maximum": 2**53 - 1,
        "maxLength": 32_768,
        "pattern": r"^[^\x00]*$",
    }
    assert items["cancel_deployment"]["parameters"]["properties"]["taskId"]["format"] == "uuid"
    assert all(t["description"] for t in items.values())


def test_chat_and_api_create_the_same_rows(client, sql_conn, wait_status):
    body = {"projectId": "demo", "source": dict(IMAGE_SOURCE, env={"API_KEY": "k-123456"})}
    via_api = client.post("/api/v1/tasks", json=body).get_json()
    via_chat = call(client, "create_deployment", **body)
    assert via_chat.status_code == 201
    via_chat = via_chat.get_json()
    for task in (via_api, via_chat):
        wait_status(task["id"], "completed")
    a, b = row(sql_conn, via_api["id"]), row(sql_conn, via_chat["id"])
    assert {k: a[k] for k in COMPARED} == {k: b[k] for k in COMPARED}


def test_chat_cancel_redeploy_and_explain_follow_the_same_lifecycle(
    client, cluster, sql_conn, wait_status
):
    cluster.ready_after_polls = "never"
    task = call(client, "create_deployment", projectId="demo", source=IMAGE_SOURCE).get_json()
    wait_status(task["id"], "applying")
    # Readiness is polled once every document is applied: the cancel then finds it fully applied.
    wait_for(lambda: cluster.polls > 0, message="the resources to be applied")
    cancelled = call(client, "cancel_deployment", taskId=task["id"])
    assert cancelled.status_code == 200
    wait_status(task["id"], "cancelled")
    # A repeat cancel's intent is already satisfied: 200 with the snapshot, as on the API.
    again = call(client, "cancel_deployment", taskId=task["id"])
    assert again.status_code == 200 and again.get_json()["status"] == "cancelled"

    explained = call(client, "explain_deployment", taskId=task["id"]).get_json()
    assert explained["status"] == "cancelled"
    assert "cancelled; fully applied" in explained["summary"]
    assert "Nothing was deleted" in explained["summary"]
    assert explained["applied"] == ["Deployment/web", "Service/web"]
    assert any(s.startswith("Cancel requested") for s in explained["steps"])

    cluster.ready_after_polls = None
    clone = call(client, "redeploy_deployment", taskId=task["id"])
    assert clone.status_code == 201
    clone = clone.get_json()
    assert clone["retriedFromTaskId"] == task["id"]
    assert row(sql_conn, clone["id"])["source"] == row(sql_conn, task["id"])["source"]
    wait_status(clone["id"], "completed")
    # A completed task is not redeployable, through chat as through the API.
    assert call(client, "redeploy_deployment", taskId=clone["id"]).status_code == 409


def test_explain_says_why_a_task_failed_and_what_to_do(client, cluster, wait_status):
    cluster.fail_kinds = {"Service"}
    task = call(client, "create_deployment", projectId="demo", source=IMAGE_SOURCE).get_json()
    wait_status(task["id"], "failed")
    explained = call(client, "explain_deployment", taskId=task["id"]).get_json()
    assert "It failed (apply_failed)" in explained["summary"]
    assert explained["nextSteps"] == [
        "The cluster refused a resource; fix the source (edit & redeploy)."
    ]


def test_tool_errors_are_the_api_errors(client):
    assert call(client, "nope").status_code == 404
    bad = call(client, "create_deployment", projectId="demo", source={"kind": "image"}, extra=1)
    assert bad.status_code == 400 and bad.get_json()["code"] == "invalid_request"
    assert set(bad.get_json()["fields"]) == {"source", "extra"}
    missing = call(client, "explain_deployment", taskId="00000000-0000-0000-0000-000000000000")
    assert missing.status_code == 404 and missing.get_json()["code"] == "task_not_found"
