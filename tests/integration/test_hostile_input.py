"""Hostile input at the API's edge: every refusal is a 4xx JSON error with a stable code, and a
refused request writes nothing (each case below answered 500 before the edge rules)."""

import base64
import json

import pytest
import requests
from gevent.pywsgi import WSGIServer

from tests.helpers import IMAGE_SOURCE, free_port

NUL, SURROGATE = "\u0000", "\ud800"


def post_raw(client, path, text: str, content_type="application/json", method="POST", **kw):
    """Send `text` as the body byte for byte (json.dumps keeps a lone surrogate as \\ud800)."""
    return client.open(
        path, method=method, data=text.encode("utf-8"), content_type=content_type, **kw
    )


def rows(sql_conn) -> tuple[int, int]:
    return (
        sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"],
        sql_conn.execute("SELECT count(*) AS n FROM deploy_task_events").fetchone()["n"],
    )


def image(**fields):
    return {"projectId": "demo", "source": {**IMAGE_SOURCE, **fields}}


def bodies_with(bad: str) -> list[tuple[str, dict]]:
    """(path, body) pairs that put `bad` into each stored string field."""
    return [
        ("/api/v1/tasks", image(image=f"nginx{bad}")),
        ("/api/v1/tasks", image(name=f"web{bad}")),
        ("/api/v1/tasks", image(env={"MODE": f"x{bad}"})),
        ("/api/v1/tasks", image(env={f"MO{bad}DE": "x"})),
        (
            "/api/v1/tasks",
            {"projectId": "demo", "source": {"kind": "prompt", "prompt": f"deploy {bad}"}},
        ),
        (
            "/api/v1/tasks",
            {
                "projectId": "demo",
                "source": {
                    "kind": "template",
                    "template": "webapp",
                    "args": {"image": f"nginx{bad}"},
                },
            },
        ),
        ("/api/v1/tasks", {**image(), "sensitiveKeys": [f"KEY{bad}"]}),
        ("/api/v1/tasks", {**image(), "inputs": {"a": f"b{bad}"}}),
        ("/api/v1/tools/create_deployment", image(image=f"nginx{bad}")),
        ("/api/v1/tools/create_deployment", {**image(), "sensitiveKeys": [f"K{bad}"]}),
    ]


@pytest.mark.parametrize("bad", [NUL, SURROGATE], ids=["nul", "lone-surrogate"])
def test_unstorable_text_anywhere_is_a_400_naming_the_field(client, sql_conn, insert_task, bad):
    predecessor = insert_task(status="failed")
    blocked = insert_task(status="blocked")
    cases = bodies_with(bad) + [
        (
            "/api/v1/tasks",
            {
                "predecessorTaskId": str(predecessor["id"]),
                "source": {**IMAGE_SOURCE, "image": f"nginx{bad}"},
            },
        ),
        (
            "/api/v1/tools/redeploy_deployment",
            {"taskId": str(predecessor["id"]), "source": {**IMAGE_SOURCE, "name": f"w{bad}"}},
        ),
        (
            f"/api/v1/tasks/{blocked['id']}/input",
            {"inputs": {"x": "y"}, "sensitiveKeys": [f"x{bad}"]},
        ),
        (
            "/api/v1/tools/submit_deployment_inputs",
            {"taskId": str(blocked["id"]), "inputs": {f"x{bad}": "y"}},
        ),
    ]
    before = rows(sql_conn)
    # Positive control: the same body without the bad character is accepted.
    assert post_raw(client, "/api/v1/tasks", json.dumps(image())).status_code == 201
    control = rows(sql_conn)
    assert control[0] == before[0] + 1

    for path, body in cases:
        response = post_raw(client, path, json.dumps(body))
        assert response.status_code == 400, (path, body, response.get_data(as_text=True))
        error = response.get_json()
        assert error["code"] == "invalid_request", error
        assert "fields" in error and bad not in json.dumps(error, ensure_ascii=False)

    assert rows(sql_conn)[0] == control[0]
    assert client.get(f"/api/v1/tasks/{blocked['id']}").get_json()["status"] == "blocked"


@pytest.mark.parametrize("kind", [[], {}, 7, None, True])
def test_a_source_kind_that_is_not_a_string_is_a_400(client, sql_conn, kind):
    before = rows(sql_conn)
    for path in ("/api/v1/tasks", "/api/v1/tools/create_deployment"):
        response = client.post(path, json={"projectId": "demo", "source": {"kind": kind}})
        assert (response.status_code, response.get_json()["code"]) == (400, "invalid_request")
        assert "kind must be one of" in json.dumps(response.get_json()["fields"])
    assert rows(sql_conn)[0] == before[0]


DEEP = ["[" * 50_000, '{"a":' * 20_000, "[" * 65 + "]" * 65]


@pytest.mark.parametrize("text", DEEP, ids=["lists", "objects", "65-levels"])
def test_deep_nesting_is_a_400_on_every_json_endpoint(client, sql_conn, insert_task, text):
    blocked = insert_task(status="blocked")
    tid = blocked["id"]
    endpoints = [
        ("POST", "/api/v1/tasks"),
        ("POST", f"/api/v1/tasks/{tid}/input"),
        ("PATCH", f"/api/v1/tasks/{tid}/canvas"),
    ] + [
        ("POST", f"/api/v1/tools/{name}")
        for name in (
            "create_deployment",
            "cancel_deployment",
            "redeploy_deployment",
            "submit_deployment_inputs",
            "explain_deployment",
        )
    ]
    before = rows(sql_conn)
    for method, path in endpoints:
        response = post_raw(client, path, text, method=method)
        assert response.status_code == 400, (path, response.get_data(as_text=True)[:200])
        assert response.get_json()["code"] == "malformed_json"
        assert "nested deeper than 64 levels" in response.get_json()["message"]
    assert rows(sql_conn)[0] == before[0]
    # 64 levels is within the limit: the same endpoint parses it (and refuses the shape).
    shallow = post_raw(client, "/api/v1/tasks", "[" * 64 + "]" * 64)
    assert (shallow.status_code, shallow.get_json()["code"]) == (400, "invalid_request")


@pytest.mark.parametrize(
    "document",
    ["[" * 5_000, '{"a":' * 5_000, "a: &x [1]\nb: *x\n"],
    ids=["lists", "objects", "alias"],
)
def test_a_deep_or_aliased_kubeconfig_header_is_a_400(client, sql_conn, document):
    header = base64.b64encode(document.encode()).decode()
    before = rows(sql_conn)

    response = client.post("/api/v1/tasks", json=image(), headers={"X-Kubeconfig": header})

    assert (response.status_code, response.get_json()["code"]) == (400, "invalid_request")
    assert "X-Kubeconfig" in response.get_json()["message"]
    assert rows(sql_conn)[0] == before[0]


@pytest.mark.parametrize(
    "decoded",
    [
        ["2026-01-01T00:00:00", 123],
        ["2026-01-01T00:00:00+00:00", None],
        [1, 2],
        "x",
        {"a": 1},
        ["2026-01-01T00:00:00", "00000000-0000-0000-0000-000000000000"],  # naive time
        ["2026-01-01T00:00:00+00:00", "not-a-uuid"],
        ["2026-01-01T00:00:00+00:00", "a", "b"],
    ],
)
def test_a_cursor_of_the_wrong_shape_is_a_400(client, create_task, decoded):
    create_task()
    create_task()
    page = client.get("/api/v1/tasks?limit=1").get_json()
    assert client.get(f"/api/v1/tasks?limit=1&cursor={page['nextCursor']}").status_code == 200
    cursor = base64.urlsafe_b64encode(json.dumps(decoded).encode()).decode().rstrip("=")

    response = client.get(f"/api/v1/tasks?cursor={cursor}")

    assert (response.status_code, response.get_json()["code"]) == (400, "invalid_request")
    assert response.get_json()["fields"] == {"cursor": ["not a valid cursor"]}


def test_malformed_json_wrong_content_type_and_non_object_have_distinct_answers(client):
    malformed = post_raw(client, "/api/v1/tasks", '{"projectId": ')
    form = post_raw(
        client,
        "/api/v1/tasks",
        json.dumps(image()),
        content_type="application/x-www-form-urlencoded",
    )
    text = post_raw(client, "/api/v1/tasks", json.dumps(image()), content_type="text/plain")
    array = post_raw(client, "/api/v1/tasks", "[1, 2]")

    assert (malformed.status_code, malformed.get_json()["code"]) == (400, "malformed_json")
    assert malformed.get_json()["message"].startswith("the body is not valid JSON")
    for response in (form, text):
        assert (response.status_code, response.get_json()["code"]) == (
            415,
            "unsupported_media_type",
        )
        assert "application/json" in response.get_json()["message"]
    assert (array.status_code, array.get_json()["code"]) == (400, "invalid_request")
    assert array.get_json()["message"] == "the body must be a JSON object"


def test_a_chunked_body_over_the_limit_is_a_413_like_a_sized_one(app, sql_conn):
    from app import MAX_BODY_BYTES

    port = free_port()
    server = WSGIServer(("127.0.0.1", port), app, log=None)
    server.start()
    url = f"http://127.0.0.1:{port}/api/v1/tasks"
    padding = {
        "projectId": "demo",
        "source": {
            **IMAGE_SOURCE,
            "env": {"A": "x" * 30_000, **{f"P{i}": "y" * 30_000 for i in range(10)}},
        },
    }
    body = json.dumps(padding).encode()
    assert len(body) > MAX_BODY_BYTES
    before = rows(sql_conn)

    def chunks():
        for start in range(0, len(body), 8192):
            yield body[start : start + 8192]

    try:
        small = requests.post(
            url,
            data=iter([json.dumps(image()).encode()]),
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        sized = requests.post(
            url, data=body, headers={"Content-Type": "application/json"}, timeout=10
        )
        chunked = requests.post(
            url, data=chunks(), headers={"Content-Type": "application/json"}, timeout=10
        )
    finally:
        server.stop(timeout=1)

    assert small.status_code == 201, small.text  # positive control: a chunked body is read
    assert small.request.headers.get("Transfer-Encoding") == "chunked"
    assert chunked.request.headers.get("Transfer-Encoding") == "chunked"
    for response in (sized, chunked):
        assert (response.status_code, response.json()["code"]) == (413, "body_too_large")
    assert rows(sql_conn)[0] == before[0] + 1


def template_source(name="webapp", **args):
    return {"projectId": "demo", "source": {"kind": "template", "template": name, "args": args}}


def test_template_args_are_checked_against_the_declarations_at_create(client, sql_conn):
    before = rows(sql_conn)
    unknown_template = client.post("/api/v1/tasks", json=template_source("no-such-template"))
    unknown_arg = client.post("/api/v1/tasks", json=template_source(image="nginx", colour="red"))
    mistyped = client.post("/api/v1/tasks", json=template_source(image="nginx", port="eighty"))
    by_tool = client.post(
        "/api/v1/tools/create_deployment", json=template_source(image="nginx", replicas=True)
    )

    assert (unknown_template.status_code, unknown_template.get_json()["code"]) == (
        404,
        "template_not_found",
    )
    assert (unknown_arg.status_code, unknown_arg.get_json()["code"]) == (400, "invalid_request")
    assert unknown_arg.get_json()["fields"] == {
        "source": {"args": {"colour": ["not an input of template webapp"]}}
    }
    assert "source.args.colour" in unknown_arg.get_json()["message"]
    assert mistyped.status_code == 400
    assert mistyped.get_json()["fields"] == {"source": {"args": {"port": ["must be an integer"]}}}
    assert by_tool.status_code == 400
    assert "replicas" in by_tool.get_json()["fields"]["source"]["args"]
    assert rows(sql_conn)[0] == before[0]
    # Positive control: the declared args, typed right, create a task.
    ok = client.post("/api/v1/tasks", json=template_source(image="nginx:1.27", port="8080"))
    assert ok.status_code == 201, ok.get_json()


def test_template_inputs_are_checked_against_the_declarations_at_create(client, sql_conn):
    before = rows(sql_conn)
    # Positive control first: declared inputs, typed right, create a task.
    ok = client.post(
        "/api/v1/tasks",
        json={**template_source(image="nginx:1.27"), "inputs": {"port": "8080", "replicas": "2"}},
    )
    assert ok.status_code == 201, ok.get_json()
    assert rows(sql_conn)[0] == before[0] + 1

    unknown = client.post(
        "/api/v1/tasks", json={**template_source(image="nginx:1.27"), "inputs": {"colour": "red"}}
    )
    mistyped = client.post(
        "/api/v1/tasks", json={**template_source(image="nginx:1.27"), "inputs": {"port": "eighty"}}
    )
    both = client.post(
        "/api/v1/tools/create_deployment",
        json={**template_source(image="nginx:1.27", port="eighty"), "inputs": {"replicas": "many"}},
    )
    assert (unknown.status_code, unknown.get_json()["code"]) == (400, "invalid_request")
    assert unknown.get_json()["fields"] == {
        "inputs": {"colour": ["not an input of template webapp"]}
    }
    assert "inputs.colour" in unknown.get_json()["message"]
    assert (mistyped.status_code, mistyped.get_json()["fields"]) == (
        400,
        {"inputs": {"port": ["must be an integer"]}},
    )
    assert "eighty" not in mistyped.get_json()["message"]
    assert both.status_code == 400
    assert set(both.get_json()["fields"]) == {"source", "inputs"}
    assert "replicas" in both.get_json()["fields"]["inputs"]
    assert rows(sql_conn)[0] == before[0] + 1  # nothing more was created
