"""The OpenAPI document: valid OpenAPI 3.1, complete (every /api/v1 route), and generated from
the schemas the API validates with; the docs page renders it with the vendored Redoc."""

from openapi_spec_validator import validate

from blueprints.api.openapi_document import documented_rules, openapi_path
from blueprints.api.tool_catalog import TOOLS, CreateDeployment
from blueprints.api.tool_schemas import schema_of
from blueprints.schemas import PROJECT_ID
from tests.helpers import IMAGE_SOURCE, wait_for


def test_the_document_is_valid_openapi_31_and_names_every_api_route(app, client):
    document = client.get("/api/v1/openapi.json").get_json()
    validate(document)
    assert document["openapi"] == "3.1.0"
    rules = documented_rules(app)
    assert len(rules) >= 12
    for rule in rules:
        if rule.endpoint == "tools.call_tool":  # one path per tool instead
            assert {f"/api/v1/tools/{name}" for name in TOOLS} <= set(document["paths"])
            continue
        operations = document["paths"][openapi_path(rule.rule)]
        for method in rule.methods - {"HEAD", "OPTIONS"}:
            operation = operations[method.lower()]
            assert operation["operationId"] and operation["responses"], (rule.rule, method)


def test_the_document_comes_from_the_validation_schemas(client):
    document = client.get("/api/v1/openapi.json").get_json()
    create = document["paths"]["/api/v1/tasks"]["post"]
    body, _ = create["requestBody"]["content"]["application/json"]["schema"]["anyOf"]
    assert body["additionalProperties"] is False
    assert body["properties"]["projectId"]["pattern"] == PROJECT_ID.regex.pattern
    image = next(
        s
        for s in body["properties"]["source"]["oneOf"]
        if s["properties"]["kind"]["const"] == "image"
    )
    assert image["title"] == "Container image"  # a generated client's class name, not an index
    assert image["properties"]["port"] == {"type": "integer", "minimum": 1, "maximum": 65535}
    assert image["properties"]["env"]["maxProperties"] == 100
    assert "pattern" in image["properties"]["env"]["propertyNames"]
    headers = {p["name"] for p in create["parameters"]}
    assert {"Idempotency-Key", "X-Kubeconfig"} <= headers
    assert set(create["responses"]["201"]["links"]) == {
        "GetTask",
        "ListEvents",
        "CancelTask",
        "ListApps",
    }
    # Errors: one body with the stable codes, used by every error response.
    codes = document["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    assert {
        "invalid_request",
        "task_not_found",
        "redeploy_already_active",
        "idempotency_key_reused",
        "idempotency_key_in_flight",
        "unknown_tool",
    } <= set(codes)
    assert create["responses"]["409"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Error"
    }
    # The SSE streams are described per event.
    stream = document["paths"]["/api/v1/projects/{project_id}/tasks/stream"]["get"]
    events = stream["responses"]["200"]["content"]["text/event-stream"]["schema"]["oneOf"]
    assert {e["properties"]["event"]["const"] for e in events} == {"snapshot", "upsert", "remove"}
    assert all(e["properties"]["data"]["contentMediaType"] == "application/json" for e in events)
    # Query schemas become parameters with their constraints.
    listing = {p["name"]: p for p in document["paths"]["/api/v1/tasks"]["get"]["parameters"]}
    assert listing["limit"]["schema"]["maximum"] == 200
    assert listing["cursor"]["schema"]["pattern"] == "^[A-Za-z0-9_-]+$"
    assert document["components"]["securitySchemes"]["bearer"]["scheme"] == "bearer"


def test_responses_match_the_documented_snapshot(client, create_task, wait_status):
    import jsonschema

    document = client.get("/api/v1/openapi.json").get_json()
    task = create_task()
    snapshot = wait_status(task["id"], "completed")
    described = {"$ref": "#/components/schemas/Task", "components": document["components"]}
    jsonschema.validate(snapshot, described)
    assert set(snapshot) == set(document["components"]["schemas"]["Task"]["properties"])


def test_the_apps_and_the_rollback_answer_what_the_document_says(client, create_task, wait_status):
    import jsonschema

    document = client.get("/api/v1/openapi.json").get_json()
    rollback = document["paths"]["/api/v1/tasks/{task_id}/rollback"]["post"]
    assert {p["name"] for p in rollback["parameters"]} >= {"task_id", "Idempotency-Key"}
    assert {"201", "404", "409"} <= set(rollback["responses"])
    codes = document["components"]["schemas"]["Error"]["properties"]["code"]["enum"]
    assert {"task_not_rollbackable", "app_deploy_active", "app_not_found"} <= set(codes)

    def conforms(body, schema):
        jsonschema.validate(body, {"$ref": f"#/components/schemas/{schema}", **document})

    v1 = wait_status(create_task()["id"], "completed")
    back = client.post(f"/api/v1/tasks/{v1['id']}/rollback")
    assert back.status_code == 201
    conforms(back.get_json(), "Task")
    wait_status(back.get_json()["id"], "completed")
    conforms(client.get("/api/v1/projects/demo/apps").get_json(), "AppList")
    app = client.get("/api/v1/projects/demo/apps/image:web").get_json()
    conforms(app, "AppDetail")
    assert set(app) == set(document["components"]["schemas"]["AppDetail"]["properties"])
    again = client.post(f"/api/v1/tasks/{app['history']['items'][0]['id']}/rollback")
    assert again.status_code == 201  # the rollback completed: it can be rolled back to too
    wait_status(again.get_json()["id"], "completed")


def test_docs_page_renders_the_document_with_the_vendored_renderer(client):
    page = client.get("/api/docs")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'spec-url="/api/v1/openapi.json"' in html
    assert "https://" not in html and "http://" not in html
    script = client.get("/static/vendor/redoc-3.0.1/redoc.standalone.js")
    assert script.status_code == 200 and len(script.get_data()) > 1_000_000
    # No outside fetch: the attribution logo is not Redocly's CDN, and the policy allows no
    # other origin for anything (static/vendor/README.md).
    assert b"cdn.redoc.ly" not in script.get_data()
    policy = page.headers["Content-Security-Policy"]
    assert "https:" not in policy and "http:" not in policy and "img-src 'self' data:;" in policy


def waiting_on(runtime, task_id) -> bool:
    """Whether a long-poll is subscribed to the task's changes (the barrier before acting)."""
    return any(sub.task == str(task_id) for sub in list(runtime.listener.subscribers))


def test_a_task_read_can_long_poll_until_the_task_settles(client, cluster, runtime, wait_status):
    cluster.ready_after_polls = "never"
    task = client.post(
        "/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE}
    ).get_json()
    wait_status(task["id"], "applying")
    timed_out = client.get(f"/api/v1/tasks/{task['id']}?waitFor=terminal&timeout=0").get_json()
    assert timed_out["waitOutcome"] == "timeout" and timed_out["status"] == "applying"
    import gevent

    waiting = gevent.spawn(client.get, f"/api/v1/tasks/{task['id']}?waitFor=terminal&timeout=120")
    wait_for(lambda: waiting_on(runtime, task["id"]), message="the long-poll to subscribe")
    assert not waiting.ready()
    assert client.post(f"/api/v1/tasks/{task['id']}/cancel").status_code == 200
    settled = waiting.get(timeout=15).get_json()
    assert settled["waitOutcome"] == "terminal" and settled["status"] == "cancelled"
    plain = client.get(f"/api/v1/tasks/{task['id']}").get_json()
    assert "waitOutcome" not in plain
    bad = client.get(f"/api/v1/tasks/{task['id']}?waitFor=terminal&timeout=301")
    assert bad.status_code == 400 and bad.get_json()["fields"] == {
        "timeout": ["Must be greater than or equal to 0 and less than or equal to 300."]
    }


def test_the_document_states_what_the_server_requires_checks_and_answers(client):
    document = client.get("/api/v1/openapi.json").get_json()
    create = document["paths"]["/api/v1/tasks"]["post"]
    body = create["requestBody"]["content"]["application/json"]["schema"]
    # Conditional requirements: a fresh create, or a redeploy naming its predecessor; each a
    # whole object (the same fields), so a generated client types both bodies.
    fresh, redeploy = body["anyOf"]
    assert (fresh["title"], fresh["required"]) == ("NewTask", ["projectId", "source"])
    assert (redeploy["title"], redeploy["required"]) == ("Redeploy", ["predecessorTaskId"])
    assert fresh["properties"] == redeploy["properties"]
    assert fresh["additionalProperties"] is redeploy["additionalProperties"] is False
    assert client.post("/api/v1/tasks", json={}).status_code == 400
    headers = {p["name"]: p["schema"] for p in create["parameters"]}
    assert headers["X-Kubeconfig"]["pattern"] and headers["Idempotency-Key"]["maxLength"] == 255
    created = create["responses"]["201"]["headers"]
    assert {"Location", "Idempotent-Replayed", "X-Served-By"} <= set(created)
    rolled_back = document["paths"]["/api/v1/tasks/{task_id}/rollback"]["post"]["responses"]
    assert {"Location", "Idempotent-Replayed", "X-Served-By"} <= set(rolled_back["201"]["headers"])
    assert set(document["components"]["headers"]) >= {"Location", "X-Served-By"}
    # Each tool is its own operation with the body the server validates.
    tool = document["paths"]["/api/v1/tools/create_deployment"]["post"]
    assert tool["operationId"] == "createDeployment"
    tool_body = tool["requestBody"]["content"]["application/json"]["schema"]
    assert tool_body == schema_of(CreateDeployment)
    assert set(tool_body["required"]) == {"projectId", "source"}
    assert tool["responses"]["201"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Task"
    }


def test_a_405_names_the_allowed_methods(client):
    refused = client.open("/api/v1/whoami", method="TRACE")
    assert refused.status_code == 405
    assert set(refused.headers["Allow"].split(", ")) >= {"GET"}
    assert refused.get_json()["code"] == "method_not_allowed"
    assert refused.mimetype == "application/json"
    created = client.post("/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE})
    assert created.headers["Location"] == f"/api/v1/tasks/{created.get_json()['id']}"
