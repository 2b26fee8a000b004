"""Two users in two workspaces (AUTH_MODE=oidc, tokens from a test issuer's real JWKS) walk every
route: the other workspace's task is 404 (never 403), missing from lists, and no frame of it
reaches the other's streams or websockets. Each refusal follows the owner's own success.

Served in this process by gevent's WSGIServer so streams and websockets are real connections.
"""

import json
import re

import gevent
import pytest
import requests
import websocket
from gevent.pywsgi import WSGIServer

from tests.helpers import IMAGE_SOURCE, EventStream, free_port, oidc_settings


@pytest.fixture
def site(make_app, issuer):
    port = free_port()  # the app knows its own origin (the websocket Origin check)
    app = make_app(**oidc_settings(issuer.url), port=port)
    server = WSGIServer(("127.0.0.1", port), app, log=None)
    server.start()
    yield f"http://127.0.0.1:{server.server_port}"
    app.extensions["engine"].shutdown()
    server.stop(timeout=5)


class User:
    """A browser-like client signed by the issuer for one workspace (bearer + a CSRF session)."""

    def __init__(self, site, issuer, name, workspace):
        self.site, self.name = site, name
        self.http = requests.Session()
        self.http.headers.update(issuer.bearer(user=name, workspaces=(workspace,)))
        page = self.http.get(site + "/projects/demo", timeout=10)
        assert page.status_code == 200, page.text
        self.csrf = re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)

    def call(self, method, path, **kwargs):
        return self.http.request(method, self.site + path, timeout=10, **kwargs)

    def action(self, path, data=None):
        """A page action as htmx sends it."""
        return self.call(
            "POST", path, data=data or {}, headers={"X-CSRF-Token": self.csrf, "HX-Request": "true"}
        )

    def create(self, project="demo") -> str:
        response = self.call(
            "POST", "/api/v1/tasks", json={"projectId": project, "source": IMAGE_SOURCE}
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def stream(self, path) -> EventStream:
        return EventStream(self.site, path=path, headers=dict(self.http.headers))

    def websocket(self, task_id):
        return websocket.create_connection(
            self.site.replace("http", "ws") + f"/ws/tasks/{task_id}/timeline",
            timeout=10,
            origin=self.site,
            header=[f"Authorization: {self.http.headers['Authorization']}"],
        )


def api_routes(task_id):
    return [
        ("GET", f"/api/v1/tasks/{task_id}", None),
        ("GET", f"/api/v1/tasks/{task_id}/events", None),
        ("POST", f"/api/v1/tasks/{task_id}/input", {"inputs": {"A": "b"}}),
        ("PATCH", f"/api/v1/tasks/{task_id}/canvas", {"x": 1, "y": 2}),
        ("POST", "/api/v1/tools/explain_deployment", {"taskId": task_id}),
        (
            "POST",
            "/api/v1/tools/submit_deployment_inputs",
            {"taskId": task_id, "inputs": {"A": "b"}},
        ),
        ("POST", "/api/v1/tools/redeploy_deployment", {"taskId": task_id}),
        ("POST", f"/api/v1/tasks/{task_id}/cancel", None),
        ("POST", "/api/v1/tools/cancel_deployment", {"taskId": task_id}),
    ]


def page_routes(task_id):
    return [
        ("GET", f"/tasks/{task_id}/timeline"),
        ("GET", f"/tasks/{task_id}/edit"),
        ("POST", f"/tasks/{task_id}/input"),
        ("POST", f"/tasks/{task_id}/redeploy"),
        ("POST", f"/tasks/{task_id}/cancel"),
    ]


def test_two_workspaces_never_see_each_other(site, issuer):
    alice = User(site, issuer, "alice", "team-a")
    bob = User(site, issuer, "bob", "team-b")
    theirs = alice.create()

    # the API and chat tools: the owner reads it, the other workspace gets 404 everywhere
    assert alice.call("GET", f"/api/v1/tasks/{theirs}").status_code == 200
    assert alice.call("GET", f"/api/v1/tasks/{theirs}/events").status_code == 200
    assert (
        alice.call("POST", "/api/v1/tools/explain_deployment", json={"taskId": theirs}).status_code
        == 200
    )
    for method, path, body in api_routes(theirs):
        response = bob.call(method, path, json=body)
        assert response.status_code == 404, (method, path, response.status_code, response.text)
        assert response.json()["code"].endswith("not_found"), response.text
    assert bob.call("GET", f"/api/v1/tasks/{theirs}/gateway/stream").status_code == 404
    assert theirs in alice.call("GET", "/api/v1/tasks").text
    assert bob.call("GET", "/api/v1/tasks").json()["items"] == []

    # pages and page actions
    assert alice.call("GET", f"/tasks/{theirs}/timeline").status_code == 200
    assert theirs in alice.call("GET", "/projects/demo").text
    assert theirs not in bob.call("GET", "/projects/demo").text
    assert 'href="/projects/demo"' in alice.call("GET", "/").text
    assert 'href="/projects/demo"' not in bob.call("GET", "/").text
    started = bob.action("/projects", {"id": "bobs-start"})  # the landing page's form
    assert started.status_code == 200 and started.url.endswith("/projects/bobs-start")
    assert 'href="/projects/bobs-start"' in bob.call("GET", "/").text
    assert 'href="/projects/bobs-start"' not in alice.call("GET", "/").text
    for method, path in page_routes(theirs):
        response = bob.action(path) if method == "POST" else bob.call(method, path)
        assert response.status_code == 404, (method, path, response.status_code)

    # websockets: refused before the upgrade for the other workspace
    own = alice.websocket(theirs)
    assert json.loads(own.recv())["t"] == "reset"
    own.close()
    with pytest.raises(websocket.WebSocketBadStatusException) as refused:
        bob.websocket(theirs)
    assert refused.value.status_code == 404

    # streams: each sees its own new task; not one frame of the other's arrives
    streams = {
        (who.name, path): who.stream(path)
        for who in (alice, bob)
        for path in ("/api/v1/projects/demo/tasks/stream", "/projects/demo/stream")
    }
    alice_next = alice.create()
    for (name, _), stream in streams.items():
        if name == "alice":
            stream.until(lambda event, data: alice_next in json.dumps(data))
    bob_own = bob.create()
    seen_by_bob = []
    for (name, _), stream in streams.items():
        if name == "bob":
            seen_by_bob += stream.until(lambda event, data: bob_own in json.dumps(data))
    assert not [
        frame
        for frame in seen_by_bob
        if theirs in json.dumps(frame) or alice_next in json.dumps(frame)
    ]
    for stream in streams.values():
        stream.close()
    gevent.sleep(0)
