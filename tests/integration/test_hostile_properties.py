"""Property: the surfaces that take structured client input answer no 5xx, whatever its shape.

JSON-RPC messages to /mcp with every field of any JSON type; CSRF tokens of any Unicode, in the
header or the form field, on every CSRF-checked route; kubeconfig documents of any YAML shape
(maps, lists, scalars and nulls in every slot) on create and on the access check; and every
route's path parameters, query arguments and headers, each given values PostgreSQL cannot store.
Every refusal carries a stable `code`. Derandomized with bounded example counts, like
test_api_properties.py.
"""

import base64
import json
import re
import uuid

import pytest
import yaml
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from blueprints.api.tool_catalog import TOOLS
from tests.helpers import IMAGE_SOURCE

EXAMPLES = 150
PROPERTY = settings(
    max_examples=EXAMPLES,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

TEXT = st.one_of(
    st.sampled_from(["", "x", "é", "\u202e", "\x00", "[", "2.0"]),
    st.text(max_size=8),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def anything_or(plausible):
    """A slot's plausible values (three times in four, so many messages reach a tool), or any
    JSON value at all."""
    return st.one_of(plausible, plausible, plausible, JSON)


# -- /mcp ------------------------------------------------------------------------------------------

#: wait_for_deployment is left out of the names: a generated timeout would only make the run slow.
TOOL_NAMES = sorted(name for name in TOOLS if name != "wait_for_deployment")
MCP_MESSAGES = st.fixed_dictionaries(
    {
        "jsonrpc": anything_or(st.just("2.0")),
        "method": anything_or(st.sampled_from(["tools/call"] * 3 + ["tools/list", "ping"])),
        "id": anything_or(st.integers()),
    },
    optional={
        "params": anything_or(
            st.fixed_dictionaries(
                {"name": anything_or(st.sampled_from(TOOL_NAMES) | st.sampled_from([[], {}]))},
                optional={
                    "arguments": anything_or(
                        st.fixed_dictionaries(
                            {},
                            optional={
                                "projectId": anything_or(st.just("demo")),
                                "source": anything_or(st.just(dict(IMAGE_SOURCE))),
                                "taskId": anything_or(st.just(str(uuid.uuid4()))),
                                "idempotencyKey": anything_or(st.just("key-1")),
                            },
                        )
                    ),
                    "protocolVersion": anything_or(st.just("2025-06-18")),
                },
            )
        ),
    },
)


CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call"}


def test_no_json_rpc_message_makes_mcp_answer_5xx(client):
    both = {"Accept": "application/json, text/event-stream"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    started = client.post("/mcp", json=init, headers=both)
    session = {
        **both,
        "Mcp-Session-Id": started.headers["Mcp-Session-Id"],
        # A session's later requests name the revision its `initialize` agreed.
        "MCP-Protocol-Version": started.get_json()["result"]["protocolVersion"],
    }
    seen = {"refused": 0, "tool_called": 0}

    @PROPERTY
    @given(message=MCP_MESSAGES, with_session=st.sampled_from([True, True, True, False]))
    # The cases found answering 500 (issue 25), always among the examples.
    @example(message={**CALL, "params": {"name": []}}, with_session=True)
    @example(message={**CALL, "params": {"name": {}}}, with_session=True)
    def check(message, with_session):
        response = client.post(
            "/mcp",
            data=json.dumps(message).encode("utf-8", "surrogatepass"),
            content_type="application/json",
            headers=session if with_session else both,
        )

        assert response.status_code < 500, (message, response.get_data(as_text=True))
        body = response.get_json(silent=True)
        if response.status_code >= 400:
            seen["refused"] += 1
            assert isinstance(body["error"]["code"], int), body
            assert body["error"]["message"], body
        elif isinstance(body, dict) and "structuredContent" in body.get("result", {}):
            seen["tool_called"] += 1

    check()
    assert seen["refused"] > 0 and seen["tool_called"] > 0, seen


# -- CSRF ------------------------------------------------------------------------------------------

#: A token of any Unicode; a header carries what a WSGI server decodes from the wire (latin-1).
TOKENS = st.one_of(st.text(min_size=1, max_size=40), st.just("test-tokén"), st.just("test-token"))


def test_no_csrf_token_makes_a_checked_route_answer_5xx(client, insert_task):
    task = insert_task(status="failed")
    routes = [
        ("/projects", {"id": "fresh"}),
        ("/cluster-access/check", {}),
        ("/projects/demo/tasks", {"kind": "image", "image": "nginx:1.27", "name": "web"}),
        (f"/tasks/{task['id']}/cancel", {}),
        (f"/tasks/{task['id']}/redeploy", {}),
        (f"/tasks/{task['id']}/input", {}),
    ]
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    refused = []

    @PROPERTY
    @given(route=st.sampled_from(routes), token=TOKENS, in_header=st.booleans())
    @example(route=routes[0], token="tést", in_header=True)  # the cases found answering 500
    @example(route=routes[0], token="tést", in_header=False)
    @example(route=routes[1], token="tést", in_header=True)
    @example(route=routes[1], token="tést", in_header=False)
    def check(route, token, in_header):
        path, form = route
        if in_header:
            # What a WSGI server hands on: the wire's bytes as latin-1, never a line break.
            wire = token.encode("utf-8", "surrogatepass").decode("latin-1")
            header = wire.replace("\r", "?").replace("\n", "?")
            response = client.post(path, data=form, headers={"X-CSRF-Token": header})
        else:
            response = client.post(path, data={**form, "csrf_token": token})

        assert response.status_code < 500, (path, token, response.get_data(as_text=True))
        if token != "test-token":
            refused.append(token)
            assert response.status_code == 403
            body = response.get_json(silent=True)
            if body is not None:
                assert body["code"] == "cross_site_request", body
            else:  # a page: the error box names the code
                assert 'data-error-code="cross_site_request"' in response.get_data(as_text=True)

    check()
    assert any(not token.isascii() for token in refused), refused
    # Positive control: the right token goes through.
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    accepted = client.post("/projects", data={"id": "fresh", "csrf_token": "test-token"})
    assert accepted.status_code == 303


# -- X-Kubeconfig ----------------------------------------------------------------------------------

YAML_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
PEM_LIKE = st.sampled_from(
    [
        base64.b64encode(b"-----BEGIN CERTIFICATE-----\nnot really\n").decode(),
        base64.b64encode("-----BEGIN CERTIFICATE----- é".encode()).decode(),
        "not base64!",
    ]
)
#: Servers that need no DNS answer: literals, broken literals, wrong schemes.
SERVERS = st.sampled_from(
    [
        "https://203.0.113.7",
        "https://[",
        "http://[::1",
        "https://[::1]:99999",
        "https://[fe80::1%25eth0]",
        "ftp://198.51.100.1",
        "https://u:p@198.51.100.1",
        "https://198.51.100.1?x",
    ]
)


def slot(*plausible):
    return st.one_of(*plausible, YAML_ANY)


KUBECONFIGS = slot(
    st.fixed_dictionaries(
        {},
        optional={
            "current-context": slot(st.just("c")),
            "contexts": slot(
                st.lists(
                    slot(
                        st.fixed_dictionaries(
                            {"name": slot(st.just("c"))},
                            optional={
                                "context": slot(
                                    st.fixed_dictionaries(
                                        {},
                                        optional={
                                            "cluster": slot(st.just("k")),
                                            "user": slot(st.just("u")),
                                            "namespace": slot(st.just("demo")),
                                        },
                                    )
                                )
                            },
                        )
                    ),
                    max_size=2,
                )
            ),
            "clusters": slot(
                st.lists(
                    slot(
                        st.fixed_dictionaries(
                            {"name": slot(st.just("k"))},
                            optional={
                                "cluster": slot(
                                    st.fixed_dictionaries(
                                        {"server": slot(SERVERS)},
                                        optional={
                                            "certificate-authority-data": slot(PEM_LIKE),
                                            "tls-server-name": slot(st.just("kube.example")),
                                            "insecure-skip-tls-verify": slot(st.booleans()),
                                            "proxy-url": slot(st.just("http://proxy")),
                                        },
                                    )
                                )
                            },
                        )
                    ),
                    max_size=2,
                )
            ),
            "users": slot(
                st.lists(
                    slot(
                        st.fixed_dictionaries(
                            {"name": slot(st.just("u"))},
                            optional={
                                "user": slot(
                                    st.fixed_dictionaries(
                                        {},
                                        optional={
                                            "token": slot(st.just("t0ken")),
                                            "client-certificate-data": slot(PEM_LIKE),
                                            "client-key-data": slot(PEM_LIKE),
                                            "exec": slot(st.just({"command": "id"})),
                                        },
                                    )
                                )
                            },
                        )
                    ),
                    max_size=2,
                )
            ),
        },
    )
)


ONE_CONTEXT = {"contexts": [{"name": "c", "context": {"cluster": "k", "user": "u"}}]}


def cluster(server: str) -> dict:
    return {"name": "k", "cluster": {"server": server}}


def header(document) -> dict:
    text = yaml.safe_dump(document, allow_unicode=True)
    return {"X-Kubeconfig": base64.b64encode(text.encode("utf-8", "surrogatepass")).decode()}


@pytest.mark.parametrize("backend", ["kubernetes", "sandbox"])
def test_no_kubeconfig_shape_makes_create_or_the_access_check_answer_5xx(make_app, backend):
    client = make_app(cluster_backend=backend).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "test-token"
    checked = {"sent": 0, "refused": 0, "ok": 0}

    @PROPERTY
    @given(document=KUBECONFIGS)
    # The cases found answering 500 (issue 25), always among the examples.
    @example(document={"contexts": 5})
    @example(document={"current-context": "c", "contexts": 5})
    @example(document={"current-context": None, "contexts": 5})
    @example(document={**ONE_CONTEXT, "clusters": 5})
    @example(document={**ONE_CONTEXT, "clusters": [cluster("https://k")], "users": True})
    @example(document={**ONE_CONTEXT, "clusters": [cluster("https://[")]})
    @example(document={**ONE_CONTEXT, "clusters": [cluster("http://[::1")]})
    def check(document):
        sent = header(document)
        checked["sent"] += 1
        created = client.post(
            "/api/v1/tasks", json={"projectId": "demo", "source": dict(IMAGE_SOURCE)}, headers=sent
        )
        access = client.post(
            "/cluster-access/check", headers={**sent, "X-CSRF-Token": "test-token"}
        )

        assert created.status_code < 500, (document, created.get_data(as_text=True))
        if created.status_code >= 400:
            checked["refused"] += 1
            assert created.get_json()["code"] == "invalid_request", created.get_json()
        assert access.status_code == 200, (document, access.get_data(as_text=True))
        verdict = access.get_json()
        checked["ok"] += verdict["ok"] is True
        if not verdict["ok"]:
            assert verdict["code"] == "invalid_request", verdict

    check()
    if backend == "kubernetes":  # every document here is refused (no server is routable)
        assert checked["refused"] == checked["sent"], checked
    else:  # the sandbox reads no kubeconfig: each one goes through
        assert checked["ok"] > 0, checked


# -- every route's path parameters, query arguments and headers -----------------------------------

#: Values no route may answer 5xx to, wherever they come: what PostgreSQL's text refuses (a NUL,
#: a lone surrogate: percent-encoded in a path or query, as raw bytes in a header), a long one,
#: and shapes a rule may refuse.
SURFACE_VALUES = ["\x00", "\ud800", "x" * 3000, "UPPER", "..", "é", " "]
#: Every query argument a route reads (request.args in blueprints/), and one none reads.
QUERY_ARGS = (
    "task", "deploy", "template", "before", "cursor", "limit", "projectId", "status", "after",
    "waitFor", "timeout", "next", "unread",
)  # fmt: skip
#: Every request header a route reads (request.headers in blueprints/, the auth gate's aside:
#: test_auth_bearer.py), and one none reads.
HEADER_NAMES = (
    "Idempotency-Key", "X-Kubeconfig", "Mcp-Session-Id", "MCP-Protocol-Version", "Mcp-Method",
    "Mcp-Name", "X-Request-Id", "HX-Request", "Accept", "Origin", "Sec-Fetch-Site", "Unread",
)  # fmt: skip


def test_no_route_answers_5xx_to_any_path_parameter_query_argument_or_header(app, insert_task):
    """Every route of the app, every method: each path parameter, query argument and header it
    reads, given each of SURFACE_VALUES in turn (an Mcp-Session-Id holding a NUL answered 500).
    A stream is sent only its hostile path parameters (a valid request streams forever)."""
    from urllib.parse import quote

    client = app.test_client()
    with client.session_transaction() as session:
        session["csrf"] = "t"
    task = insert_task(status="completed")
    valid = {"task_id": str(task["id"]), "project_id": "demo", "app_key": "image:web"}
    valid |= {"name": "create_deployment", "kind": "image", "filename": "css/app.css"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    mcp = {"Accept": "application/json, text/event-stream"}
    mcp["Mcp-Session-Id"] = client.post("/mcp", json=init, headers=mcp).headers["Mcp-Session-Id"]

    def path_of(rule, values) -> str:
        def part(match):
            return quote(values[match.group(1)].encode("utf-8", "surrogatepass"), safe="")

        return re.sub(r"<(?:[a-z]+:)?([a-z_]+)>", part, rule.rule)

    def wire(value: str) -> str:
        """A header value as a WSGI server hands it on: the bytes sent, read as latin-1."""
        return value.encode("utf-8", "surrogatepass").decode("latin-1")

    sent, failed = 0, []
    for rule in app.url_map.iter_rules():
        streams = rule.endpoint in {"static", "ws.timeline_socket"} or "stream" in rule.rule
        for method in sorted(rule.methods - {"HEAD", "OPTIONS"}):
            cases = [
                ({**valid, name: value}, "", {})
                for name in rule.arguments - {"task_id"}  # a uuid converter: 404 for anything else
                for value in SURFACE_VALUES
            ]
            if not streams:
                cases += [
                    (valid, f"?{arg}={quote(value.encode('utf-8', 'surrogatepass'))}", extra)
                    for arg in QUERY_ARGS
                    for value in SURFACE_VALUES
                    for extra in ({}, {"HX-Request": "true"})
                ]
                cases += [
                    (valid, "", {**(mcp if rule.rule == "/mcp" else {}), name: wire(value)})
                    for name in HEADER_NAMES
                    for value in SURFACE_VALUES
                ]
            for values, query, headers in cases:
                body = {"jsonrpc": "2.0", "id": 2, "method": "ping"} if rule.rule == "/mcp" else {}
                response = client.open(
                    path_of(rule, values) + query,
                    method=method,
                    headers={"X-CSRF-Token": "t", **headers},
                    json=body if method != "GET" else None,
                )
                sent += 1
                if response.status_code >= 500:
                    failed.append((method, rule.rule, values, query, headers))
    assert failed == []
    assert sent > 5000, sent  # positive control: the sweep went everywhere
