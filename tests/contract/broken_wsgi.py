"""The engine with one response broken per schemathesis check: the contract run's positive
control (tests/contract/test_api_contract.py). Served by gunicorn as
`tests.contract.broken_wsgi:app`; never imported by the application.

Each rule breaks one operation in the one way its check must catch (the check is named beside
it), and only that operation, so the other checks still see a working API; the one exception,
ensure_resource_availability, breaks two of a create's links and has every create start fresh.
"""

import io
import json

from wsgi import app as engine_app  # first: gevent's patching, then the app


def app(environ, start_response):
    """The engine's answer, broken where BROKEN says."""
    method, path = environ["REQUEST_METHOD"], environ.get("PATH_INFO", "")
    if method == "POST" and path == "/api/v1/tasks":
        _fresh_create(environ)
    captured = {}

    def capture(status, headers, exc_info=None):
        captured["status"], captured["headers"] = status, list(headers)
        return lambda data: None

    body = b"".join(engine_app(environ, capture))
    status, headers = captured["status"], captured["headers"]

    def replace(new_status=None, new_body=None, drop=(), content_type=None):
        nonlocal status, headers, body
        status = new_status or status
        if new_body is not None:
            body = new_body
        headers = [(k, v) for k, v in headers if k.lower() not in drop + ("content-length",)]
        if content_type:
            headers = [(k, v) for k, v in headers if k.lower() != "content-type"]
            headers.append(("Content-Type", content_type))
        headers.append(("Content-Length", str(len(body))))

    error = json.dumps({"code": "invalid_request", "message": "broken on purpose"}).encode()
    if method == "TRACE" and path == "/api/v1/whoami":  # unsupported_method
        replace("200 OK", b"{}", content_type="application/json")
    elif status.startswith("405"):  # unsupported_method: a 405 must say what is allowed
        replace(drop=("allow",))
    elif method == "GET" and path == "/api/v1/templates":  # not_a_server_error
        replace("500 INTERNAL SERVER ERROR", error)
    elif method == "GET" and path == "/api/v1/whoami":  # status_code_conformance
        replace("418 I'M A TEAPOT")
    elif method == "GET" and path == "/api/v1/tools":  # content_type_conformance
        replace(content_type="text/plain")
    elif method == "GET" and path == "/api/v1/admin/streaks":  # response_schema_conformance
        replace(new_body=b'{"items": 5}')
    elif method == "GET" and path == "/api/v1/tasks":  # response_headers_conformance
        replace(drop=("x-served-by",))
    elif method == "GET" and path.endswith("/events") and status.startswith("400"):
        # negative_data_rejection: a refused query answered as a page
        replace("200 OK", b'{"items": [], "nextCursor": null}')
    elif method == "POST" and path == "/api/v1/tools/explain_deployment":
        # positive_data_acceptance
        replace("400 BAD REQUEST", error)
    elif path.startswith("/api/v1/tasks/") and (
        (method == "POST" and path.endswith("/cancel"))
        or (method == "GET" and path.endswith("/events") and status.startswith("200"))
    ):
        # ensure_resource_availability: a task just created can be neither cancelled nor have
        # its events listed: "not found" (two of a create's links, so a run follows one of them)
        replace("404 NOT FOUND", json.dumps({"code": "task_not_found", "message": "x"}).encode())
    start_response(status, headers)
    return [body]


def _fresh_create(environ) -> None:
    """For ensure_resource_availability: every create starts a fresh task (a redeploy's
    predecessorTaskId is dropped), so with the control's pinned source each one succeeds and
    the stateful phase has tasks to follow links from."""
    length = int(environ.get("CONTENT_LENGTH") or 0)
    raw = environ["wsgi.input"].read(length) if length else b""
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    if isinstance(body, dict):
        body.pop("predecessorTaskId", None)
        raw = json.dumps(body).encode()
    environ["wsgi.input"], environ["CONTENT_LENGTH"] = io.BytesIO(raw), str(len(raw))
