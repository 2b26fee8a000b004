"""The browser and network edge: Host allow-list, Origin checks against the configured public
origin, cross-site refusal of unsafe API methods, security headers, the session cookie's flags."""

import re
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]


def test_a_host_outside_the_allow_list_is_a_400_before_anything_runs(client, insert_task):
    task = insert_task(status="blocked")

    ok = client.get("/api/v1/tasks", headers={"Host": "127.0.0.1:8000"})
    rebound = client.get("/api/v1/tasks", headers={"Host": "evil.example:8000"})
    cancel = client.post(f"/api/v1/tasks/{task['id']}/cancel", headers={"Host": "evil.example"})
    page = client.get("/", headers={"Host": "attacker.test"})

    assert ok.status_code == 200  # positive control
    for response in (rebound, cancel):
        assert (response.status_code, response.get_json()["code"]) == (400, "untrusted_host")
    assert page.status_code == 400 and 'data-error-code="untrusted_host"' in page.get_data(True)
    assert client.get(f"/api/v1/tasks/{task['id']}").get_json()["status"] == "blocked"


def test_trusted_hosts_replaces_the_defaults(make_app):
    client = make_app(trusted_hosts="deploy.example.com").test_client()

    assert client.get("/healthz", headers={"Host": "deploy.example.com"}).status_code == 200
    assert client.get("/healthz", headers={"Host": "localhost"}).status_code == 400


@pytest.mark.parametrize(
    "headers",
    [
        {"Origin": "http://evil.example"},
        {"Origin": "null"},
        {"Origin": "http://localhost:8001"},  # same host, another port: another origin
        {"Sec-Fetch-Site": "cross-site"},
        {"Sec-Fetch-Site": "same-site"},
    ],
)
def test_unsafe_api_methods_refuse_cross_site_requests(client, insert_task, headers):
    task = insert_task(status="blocked")

    refused = client.post(f"/api/v1/tasks/{task['id']}/cancel", headers=headers)
    patched = client.patch(
        f"/api/v1/tasks/{task['id']}/canvas", json={"x": 1, "y": 2}, headers=headers
    )

    for response in (refused, patched):
        assert (response.status_code, response.get_json()["code"]) == (403, "cross_site_request")
    snapshot = client.get(f"/api/v1/tasks/{task['id']}").get_json()
    assert snapshot["status"] == "blocked"
    # Positive control: the site's own pages (and clients that send neither header) may.
    same = client.post(
        f"/api/v1/tasks/{task['id']}/cancel",
        headers={"Origin": "http://localhost:8000", "Sec-Fetch-Site": "same-origin"},
    )
    assert same.status_code == 200 and same.get_json()["status"] == "cancelled"


def test_the_websocket_origin_is_compared_with_the_public_origin(make_app):
    client = make_app(
        public_origin="https://deploy.example.com", trusted_hosts="deploy.example.com"
    ).test_client()
    path = f"/ws/tasks/{uuid.uuid4()}/timeline"
    host = {"Host": "deploy.example.com", "Upgrade": "websocket", "Connection": "Upgrade"}

    right = client.get(path, headers={**host, "Origin": "https://deploy.example.com"})
    # The request's own Host with another scheme is not the public origin.
    plain = client.get(path, headers={**host, "Origin": "http://deploy.example.com"})
    foreign = client.get(path, headers={**host, "Origin": "https://evil.example"})

    assert right.status_code == 404  # past the Origin check: the task does not exist
    assert plain.status_code == 403 and foreign.status_code == 403


def test_every_response_carries_the_security_headers(client):
    for response in (client.get("/"), client.get("/api/v1/tasks"), client.get("/nope")):
        csp = response.headers["Content-Security-Policy"]
        assert "frame-ancestors 'none'" in csp
        script_src = re.search(r"script-src ([^;]*)", csp).group(1)
        assert script_src == "'self'"  # no 'unsafe-inline', no 'unsafe-eval'
        assert response.headers["X-Content-Type-Options"] == "nosniff"
        assert response.headers["Referrer-Policy"] == "same-origin"


def test_no_template_has_an_inline_script_or_handler():
    templates = list((ROOT / "templates").rglob("*.html"))
    assert len(templates) > 5  # positive control: the scan sees the templates
    for path in templates:
        text = path.read_text()
        assert not re.search(r"<script(?![^>]*\bsrc=)[^>]*>", text), path
        assert not re.search(r"\son[a-z]+\s*=", text), path
        assert "hx-on" not in text and "javascript:" not in text, path


def test_the_session_cookie_is_samesite_lax_and_secure_behind_https(make_app):
    plain = make_app().test_client().get("/")
    secure = (
        make_app(public_origin="https://deploy.example.com", trusted_hosts="deploy.example.com")
        .test_client()
        .get("/", headers={"Host": "deploy.example.com"})
    )

    cookie = plain.headers["Set-Cookie"]
    assert "SameSite=Lax" in cookie and "HttpOnly" in cookie and "Secure" not in cookie
    assert "SameSite=Lax" in secure.headers["Set-Cookie"]
    assert "Secure" in secure.headers["Set-Cookie"]


#: A value for each path parameter of the app's routes (any well-formed one: the body limit
#: answers before the route looks anything up).
PATH_VALUES = {
    "task_id": uuid.uuid4(),
    "project_id": "demo",
    "app_key": "web",
    "name": "create_deployment",
    "kind": "image",
    "filename": "css/app.css",
}


def test_every_route_refuses_a_body_over_the_limit_sized_or_chunked(app, insert_task):
    """The limit holds for every body on every route, whatever the route reads and whatever
    the headers: a rollback without an Idempotency-Key read no body and took 300 KB (with a key,
    whose fingerprint reads it, it was a 413)."""
    from gevent.pywsgi import WSGIServer

    from app import MAX_BODY_BYTES
    from blueprints.auth.framing import StrictFramingHandler
    from tests.helpers import free_port

    task = insert_task(status="completed")
    body = b'{"projectId": "' + b"x" * MAX_BODY_BYTES + b'"}'
    with app.test_request_context():
        calls = [
            (method, route_path(rule))
            for rule in app.url_map.iter_rules()
            for method in sorted(rule.methods - {"HEAD", "OPTIONS"})
        ]
    assert len(calls) > 40 and ("POST", "/cluster-access/check") in calls
    port = free_port()
    server = WSGIServer(("127.0.0.1", port), app, log=None, handler_class=StrictFramingHandler)
    server.start()
    answers = {}
    try:
        with requests.Session() as session:
            rollback = f"http://127.0.0.1:{port}/api/v1/tasks/{task['id']}/rollback"
            small = session.post(rollback, json={}, timeout=10)
            for method, path in calls:
                url = f"http://127.0.0.1:{port}{path}"
                answers[method, path] = tuple(
                    refusal(session, method, url, data) for data in (body, iter([body]))
                )
    finally:
        server.stop(timeout=1)

    assert small.status_code == 201, small.text  # positive control: a small body is let through
    too_large = {True: (413, "body_too_large"), False: (413, None)}  # JSON under /api/
    assert answers == {(m, p): (too_large[p.startswith("/api/")],) * 2 for m, p in calls}


def route_path(rule) -> str:
    """`rule`'s path with PATH_VALUES in it (a websocket route builds as a ws:// URL)."""
    from flask import url_for

    return urlsplit(url_for(rule.endpoint, **{k: PATH_VALUES[k] for k in rule.arguments})).path


def refusal(session, method: str, url: str, data) -> tuple[int, str | None] | str:
    """The status of `method url` with body `data` (bytes: sized; an iterator: chunked) and its
    JSON error code, if it is JSON."""
    try:
        response = session.request(
            method, url, data=data, headers={"Content-Type": "application/json"}, timeout=10
        )
    except requests.RequestException as exc:
        return f"no answer: {type(exc).__name__}"  # a stream that started, say
    is_json = response.headers.get("Content-Type", "").startswith("application/json")
    return response.status_code, response.json().get("code") if is_json else None
