"""Property: no body makes a JSON endpoint answer 5xx; every refusal is JSON with a stable code;
a refused request writes nothing.

Bodies are generated from the same marshmallow schemas the endpoints validate with (plausible
values per field type, so many requests get deep into the handlers) mixed with hostile values:
NUL characters, lone surrogates, wrong types, deep nesting, non-objects, broken JSON. The run is
derandomized with a bounded example count, so `make test` is repeatable and its time bounded.
"""

import json
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from marshmallow import fields

from blueprints import schemas
from blueprints.api.tool_catalog import TOOLS
from engine.runners.kinds import KINDS
from tests.helpers import IMAGE_SOURCE

#: Every `code` an API error may carry; a new one must be added here on purpose.
STABLE_CODES = {
    "invalid_request",
    "malformed_json",
    "unsupported_media_type",
    "body_too_large",
    "task_not_found",
    "predecessor_not_found",
    "predecessor_not_redeployable",
    "redeploy_already_active",
    "task_already_finished",
    "task_not_blocked",
    "template_not_found",
    "kubeconfig_required",
    "unknown_tool",
    "not_found",
    "method_not_allowed",
    "shutting_down",
    "overloaded",
    "idempotency_key_in_flight",
    "idempotency_key_reused",
    "task_not_rollbackable",
    "app_deploy_active",
    "app_not_found",
}
#: Per endpoint: enough that a field losing the storable-text rule is found (measured: every
#: endpoint's 500s on the code before the edge rules were found well within this).
EXAMPLES_PER_ENDPOINT = 30

UNSTORABLE = st.sampled_from(["\x00", "\ud800", "a\x00b", "x\udfffy", "\udc00z"])
HOSTILE_TEXT = st.one_of(
    UNSTORABLE,
    st.sampled_from(["", " ", "\u202e", "${input:X}", "../../etc/passwd", "x" * 70]),
    st.text(max_size=12),
    st.text(alphabet=st.characters(categories=["Cs", "Cc"]), min_size=1, max_size=4),
)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | HOSTILE_TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(HOSTILE_TEXT, inner, max_size=3),
    max_leaves=8,
)
PLAUSIBLE_TEXT = st.sampled_from(
    [
        "demo",
        "web",
        "nginx:1.27",
        "webapp",
        "postgresql",
        "prompt",
        "image",
        "deploy a web app",
        "owner/repo",
        "main",
        "PASSWORD",
    ]
)


def field_values(field, task_ids):
    """Values for one schema field: plausible ones for its type, or anything hostile."""
    if isinstance(field, schemas.SourceField):
        plausible = st.one_of(
            *[
                body_for(schema, task_ids).map(lambda body, kind=kind: {**body, "kind": kind})
                for kind, schema in sorted((k.name, k.schema) for k in KINDS.values())
            ],
            st.just(IMAGE_SOURCE),
        )
    elif isinstance(field, fields.UUID):
        plausible = st.sampled_from(task_ids + [str(uuid.uuid4())])
    elif isinstance(field, (fields.Integer, fields.Float)):
        plausible = st.integers(-10, 70_000) | st.floats(allow_nan=False)
    elif isinstance(field, fields.Dict):
        plausible = st.dictionaries(
            PLAUSIBLE_TEXT | HOSTILE_TEXT,
            PLAUSIBLE_TEXT | HOSTILE_TEXT | st.integers() | st.booleans(),
            max_size=3,
        )
    elif isinstance(field, fields.List):
        plausible = st.lists(PLAUSIBLE_TEXT | HOSTILE_TEXT, max_size=3)
    else:
        plausible = PLAUSIBLE_TEXT | HOSTILE_TEXT
    return st.one_of(plausible, plausible, JSON_VALUES)


def body_for(schema, task_ids):
    """Objects with any subset of the schema's fields (and sometimes an unknown one)."""
    optional = {name: field_values(field, task_ids) for name, field in schema().fields.items()}
    optional["unexpected"] = JSON_VALUES
    return st.fixed_dictionaries({}, optional=optional)


def leaves_and_maps(value, prefix=()) -> tuple[list, list]:
    """(paths of the leaves, paths of the objects) inside a JSON object, deepest first: the
    generator favours early choices, and the leaves are where stored text lives."""
    leaves, maps = [], [prefix]
    for key, item in value.items():
        if isinstance(item, dict):
            more_leaves, more_maps = leaves_and_maps(item, prefix + (key,))
            leaves, maps = more_leaves + leaves, more_maps + maps
        else:
            leaves.append(prefix + (key,))
    return sorted(leaves, key=len, reverse=True), sorted(maps, key=len, reverse=True)


def mutated(base: dict):
    """`base` (a valid body) with one value replaced, or one key added, somewhere inside it."""
    leaves, maps = leaves_and_maps(base)

    def replace(choice):
        path, value = choice
        body = json.loads(json.dumps(base))
        target = body
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value
        return body

    def add(choice):
        path, key, value = choice
        body = json.loads(json.dumps(base))
        target = body
        for part in path:
            target = target[part]
        target[key] = value
        return body

    values = st.one_of(UNSTORABLE, HOSTILE_TEXT, JSON_VALUES)
    return st.one_of(
        st.tuples(st.sampled_from(leaves), values).map(replace),
        st.tuples(st.sampled_from(maps), HOSTILE_TEXT, values).map(add),
    )


def raw_bodies(schema, task_ids, valid: list[dict]):
    """The text of a request body: valid bodies with one hostile value, bodies generated from the
    schema, and things that are not JSON objects at all."""
    mutations = [mutated(base).map(json.dumps) for base in valid]
    return st.one_of(
        *(mutations * 4),
        st.sampled_from([json.dumps(base) for base in valid]),
        body_for(schema, task_ids).map(json.dumps),
        JSON_VALUES.map(json.dumps),
        st.sampled_from(
            [
                "[" * 50_000,
                '{"a":' * 20_000,
                '{"projectId": ',
                "",
                "null",
                "{}",
                '{"a": 1} trailing',
                "\xff\xfe",
            ]
        ),
    )


def endpoints(blocked_id: str, failed_id: str, completed_id: str):
    """(method, path, schema, valid bodies) of every JSON endpoint."""
    creates = [
        {"projectId": "demo", "source": dict(IMAGE_SOURCE, env={"MODE": "prod"})},
        {
            "projectId": "demo",
            "source": {
                "kind": "template",
                "template": "webapp",
                "args": {"image": "nginx:1.27", "port": 80},
            },
        },
        {
            "projectId": "demo",
            "source": {"kind": "prompt", "prompt": "a web app"},
            "inputs": {"API_TOKEN": "a-long-secret"},
            "sensitiveKeys": ["API_TOKEN"],
        },
    ]
    inputs = {"inputs": {"x": "long-enough-value"}, "sensitiveKeys": ["x"]}
    tool_bodies = {
        "create_deployment": creates,
        "cancel_deployment": [{"taskId": str(uuid.uuid4())}],
        "redeploy_deployment": [{"taskId": failed_id, "source": dict(IMAGE_SOURCE)}],
        "rollback_deployment": [{"taskId": completed_id}],
        "submit_deployment_inputs": [{"taskId": blocked_id, **inputs}],
        "explain_deployment": [{"taskId": failed_id}],
        "wait_for_deployment": [{"taskId": failed_id, "timeoutSeconds": 1}],
    }
    out = [
        ("POST", "/api/v1/tasks", schemas.CreateTask, creates + [{"predecessorTaskId": failed_id}]),
        ("POST", f"/api/v1/tasks/{blocked_id}/input", schemas.SubmitInputs, [inputs]),
        ("PATCH", f"/api/v1/tasks/{blocked_id}/canvas", schemas.CanvasPatch, [{"x": 1.5, "y": -2}]),
        (
            "POST",
            "/api/v1/cluster-access/check",
            schemas.AccessCheck,
            [{"projectId": "demo"}, {"projectId": None}],
        ),
    ]
    out += [
        ("POST", f"/api/v1/tools/{tool.name}", tool.arguments, tool_bodies[tool.name])
        for tool in TOOLS.values()
    ]
    return out


ENDPOINT_NAMES = ["create", "input", "canvas", "access_check"] + [f"tool:{n}" for n in TOOLS]


@pytest.mark.parametrize("endpoint", ENDPOINT_NAMES)
def test_no_json_endpoint_answers_5xx_and_refusals_write_nothing(
    client, insert_task, sql_conn, endpoint
):
    blocked = insert_task(status="blocked")
    failed = insert_task(status="failed")
    completed = insert_task(status="completed")
    task_ids = [str(blocked["id"]), str(failed["id"]), str(completed["id"])]
    named = dict(zip(ENDPOINT_NAMES, endpoints(*task_ids), strict=True))
    method, path, schema, valid = named[endpoint]
    cases = st.tuples(
        raw_bodies(schema, task_ids, valid),
        st.sampled_from(["application/json"] * 5 + ["text/plain"]),
    )
    seen = {"accepted": 0, "refused": 0}

    def task_count() -> int:
        return sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"]

    def blocked_row():
        return sql_conn.execute(
            "SELECT status, sensitive_keys, canvas, lease_epoch FROM deploy_tasks WHERE id = %s",
            (blocked["id"],),
        ).fetchone()

    @settings(
        max_examples=EXAMPLES_PER_ENDPOINT,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.function_scoped_fixture,
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
        ],
    )
    @given(case=cases)
    def check(case):
        text, content_type = case
        tasks_before, blocked_before = task_count(), blocked_row()

        response = client.open(
            path,
            method=method,
            data=text.encode("utf-8", "surrogatepass"),
            content_type=content_type,
        )

        assert response.status_code < 500, (path, text[:300], response.get_data(as_text=True))
        if response.status_code >= 400:
            seen["refused"] += 1
            error = response.get_json()
            assert isinstance(error, dict) and error.get("code") in STABLE_CODES, error
            assert isinstance(error.get("message"), str) and error["message"]
            assert task_count() == tasks_before
            if blocked_before["status"] == "blocked":
                assert blocked_row() == blocked_before
        else:
            seen["accepted"] += 1

    check()
    assert seen["refused"] > 0, seen
    # Positive control: the valid bodies the generator mutates are accepted (on fresh tasks, as
    # an accepted example may have claimed or redeployed the ones above).
    # A rollback's fresh target is another app: one of the app above may still be active.
    other_app = {"source": dict(IMAGE_SOURCE, name="web-control")}
    fresh = [
        str(insert_task(status="blocked")["id"]),
        str(insert_task(status="failed")["id"]),
        str(insert_task(status="completed", **other_app)["id"]),
    ]
    method, path, _, valid = dict(zip(ENDPOINT_NAMES, endpoints(*fresh), strict=False))[endpoint]
    response = client.open(path, method=method, json=valid[0])
    expected = 404 if endpoint == "tool:cancel_deployment" else 200  # a random task id
    assert response.status_code // 100 == expected // 100, response.get_json()


PATH_TEXT = st.one_of(
    st.sampled_from(["image:web", "template:webapp-x7k2q1", "database:pg", "web", "image:", ":"]),
    HOSTILE_TEXT,
)


def test_no_app_read_or_rollback_answers_5xx_whatever_its_path_and_query(
    client, insert_task, sql_conn
):
    """The apps' reads and the rollback take no body: their path and query are what a caller
    controls. No value answers 5xx; a refusal is JSON with a stable code and writes nothing."""
    from urllib.parse import quote

    completed = insert_task(status="completed")
    task_ids = [str(completed["id"]), str(uuid.uuid4()), "not-a-uuid"]
    seen = {"ok": 0, "refused": 0}

    def task_count() -> int:
        return sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"]

    @settings(
        max_examples=EXAMPLES_PER_ENDPOINT * 3,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(
        project=st.one_of(st.just("demo"), PATH_TEXT),
        app_key=PATH_TEXT,
        query=st.dictionaries(
            st.sampled_from(["cursor", "limit", "other"]),
            st.one_of(PLAUSIBLE_TEXT, HOSTILE_TEXT, st.integers().map(str)),
            max_size=3,
        ),
        task_id=st.sampled_from(task_ids),
        which=st.sampled_from(["list", "app", "rollback"]),
    )
    def check(project, app_key, query, task_id, which):
        def part(text):
            return quote(text.encode("utf-8", "surrogatepass"), safe="")

        before = task_count()
        if which == "rollback":
            response = client.post(f"/api/v1/tasks/{part(task_id)}/rollback")
        else:
            path = f"/api/v1/projects/{part(project)}/apps"
            if which == "app":
                path += f"/{part(app_key)}"
            response = client.get(
                path,
                query_string={
                    k: v.encode("utf-8", "surrogatepass").decode("utf-8", "replace")
                    for k, v in query.items()
                },
            )
        assert response.status_code < 500, (which, project, app_key, query)
        if response.status_code >= 400:
            seen["refused"] += 1
            error = response.get_json()
            assert isinstance(error, dict) and error.get("code") in STABLE_CODES, error
            if which == "rollback":
                assert task_count() == before
        else:
            seen["ok"] += 1

    check()
    assert seen["refused"] > 0 and seen["ok"] > 0, seen
    # Positive control: the plausible request reads the app.
    assert client.get("/api/v1/projects/demo/apps/image:web").status_code == 200
