"""Contract of engine/integrations/devbox.py against a devbox API on loopback: exact paths and
bodies, a workspace-scoped HS256 JWT (the API calls it `namespace`) signed with the configured
key, typed 404s, aborts."""

from gevent import monkey

monkey.patch_all()

import json  # noqa: E402
import time  # noqa: E402
from collections import Counter  # noqa: E402
from dataclasses import dataclass  # noqa: E402

import gevent  # noqa: E402
import jwt  # noqa: E402
import pytest  # noqa: E402
from gevent.pywsgi import WSGIHandler, WSGIServer  # noqa: E402
from hypothesis import example, given  # noqa: E402

from engine.abort import Aborted, AbortSignal  # noqa: E402
from engine.integrations.base import IntegrationError, NotFound  # noqa: E402
from engine.integrations.devbox import DevboxClient, ExecResult  # noqa: E402
from engine.trust.untrusted import unstorable  # noqa: E402
from tests.helpers import free_port, loopback_listener  # noqa: E402
from tests.hostile_json import examples, hostile  # noqa: E402

KEY = "devbox-signing-key-for-contract-tests"


@dataclass
class Seen:
    method: str
    path: str
    authorization: str | None
    body: dict | None


class _RawPathHandler(WSGIHandler):
    """Keeps the path as sent (PATH_INFO is percent-decoded)."""

    def get_environ(self):
        environ = super().get_environ()
        environ["RAW_URI"] = self.path
        return environ


class FakeDevboxApi:
    """A devbox API on 127.0.0.1: scripted (status, body, delay) per "METHOD path"."""

    def __init__(self):
        self.seen: list[Seen] = []
        self.routes: dict[str, tuple[int, dict | None, float]] = {}
        self._server = WSGIServer(
            loopback_listener(), self._app, log=None, handler_class=_RawPathHandler
        )
        self._server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/"

    def route(self, key: str, status: int, body: dict | None = None, delay_s: float = 0.0):
        self.routes[key] = (status, body, delay_s)

    def _app(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw = environ["wsgi.input"].read(length) if length else b""
        # RAW_URI keeps percent-encoding, so the test sees exactly what went on the wire.
        path = environ["RAW_URI"]
        self.seen.append(
            Seen(
                environ["REQUEST_METHOD"],
                path,
                environ.get("HTTP_AUTHORIZATION"),
                json.loads(raw) if raw else None,
            )
        )
        status, body, delay_s = self.routes.get(
            f"{environ['REQUEST_METHOD']} {path}", (404, {"message": "no such devbox"}, 0.0)
        )
        if delay_s:
            gevent.sleep(delay_s)
        start_response(f"{status} Scripted", [("Content-Type", "application/json")])
        if isinstance(body, bytes):
            return [body]  # a raw body, as some other service behind the address would send
        return [json.dumps(body).encode()] if body is not None else []

    def stop(self):
        self._server.stop(timeout=1)


@pytest.fixture
def api():
    server = FakeDevboxApi()
    yield server
    server.stop()


@pytest.fixture
def client(api):
    return DevboxClient(api.url, KEY, timeout_s=2.0, exec_timeout_s=30.0)


def claims_of(seen: Seen) -> dict:
    scheme, _, token = seen.authorization.partition(" ")
    assert scheme == "Bearer"
    return jwt.decode(
        token, KEY, algorithms=["HS256"], audience="devbox-api", issuer="deploy-task-engine"
    )


BASE = "/v1/namespaces/team-a/devboxes"


def test_create_posts_the_task_and_returns_the_id_with_a_workspace_scoped_token(api, client):
    api.route(f"POST {BASE}", 201, {"id": "dbx-1"})
    before = int(time.time())

    assert client.create(workspace="team-a", task_id="t-1", abort=AbortSignal()) == "dbx-1"

    [seen] = api.seen
    assert (seen.method, seen.path, seen.body) == ("POST", BASE, {"taskId": "t-1"})
    claims = claims_of(seen)
    assert claims["namespace"] == "team-a" and claims["sub"] == "namespace:team-a"
    assert before <= claims["iat"] <= claims["exp"] - 300 + 1
    # Signed with the configured key and nothing else.
    token = seen.authorization.split(" ", 1)[1]
    assert jwt.get_unverified_header(token)["alg"] == "HS256"
    with pytest.raises(jwt.InvalidSignatureError):
        jwt.decode(
            token,
            "another-key-just-as-long-as-the-real-one",
            algorithms=["HS256"],
            audience="devbox-api",
        )
    assert KEY not in repr(client)


def test_each_workspace_gets_its_own_token(api, client):
    api.route("POST /v1/namespaces/team-b/devboxes/dbx-9/pause", 204)
    client.pause("dbx-9", workspace="team-b", abort=AbortSignal())
    assert claims_of(api.seen[0])["namespace"] == "team-b"


def test_attach_exec_pause_delete_paths_and_bodies(api, client):
    api.route(f"POST {BASE}/dbx-1/attach", 200, {"id": "dbx-1", "state": "running"})
    api.route(f"POST {BASE}/dbx-1/exec", 200, {"exitCode": 0, "stdout": "ok\n", "stderr": ""})
    api.route(f"POST {BASE}/dbx-1/pause", 204)
    api.route(f"DELETE {BASE}/dbx-1", 200, {})
    abort = AbortSignal()

    client.attach("dbx-1", workspace="team-a", abort=abort)
    result = client.exec(
        "dbx-1",
        ["git", "clone", "--depth", "1", "--", "u", "/w"],
        workspace="team-a",
        abort=abort,
        timeout_s=120,
    )
    client.pause("dbx-1", workspace="team-a", abort=abort)
    client.delete("dbx-1", workspace="team-a", abort=abort)

    assert result == ExecResult(0, "ok\n", "")
    assert [(s.method, s.path, s.body) for s in api.seen] == [
        ("POST", f"{BASE}/dbx-1/attach", {}),
        (
            "POST",
            f"{BASE}/dbx-1/exec",
            {"command": ["git", "clone", "--depth", "1", "--", "u", "/w"], "timeoutSeconds": 120},
        ),
        ("POST", f"{BASE}/dbx-1/pause", {}),
        ("DELETE", f"{BASE}/dbx-1", None),
    ]
    assert all(claims_of(s)["namespace"] == "team-a" for s in api.seen)


def test_a_devbox_id_cannot_escape_its_path_segment(api, client):
    with pytest.raises(NotFound):
        client.pause("../../other", workspace="team-a", abort=AbortSignal())
    assert api.seen[0].path == f"{BASE}/..%2F..%2Fother/pause"


@pytest.mark.parametrize("op", ["attach", "pause", "delete", "exec"])
def test_404_is_the_typed_absence(api, client, op):
    args = (["true"],) if op == "exec" else ()
    with pytest.raises(NotFound):
        getattr(client, op)("gone", *args, workspace="team-a", abort=AbortSignal())


@pytest.mark.parametrize("status", [401, 403, 500, 503])
def test_other_errors_are_integration_errors_not_absence(api, client, status):
    api.route(f"POST {BASE}/dbx-1/pause", status, {"message": "nope"})
    with pytest.raises(IntegrationError) as raised:
        client.pause("dbx-1", workspace="team-a", abort=AbortSignal())
    assert not isinstance(raised.value, NotFound)
    assert str(status) in str(raised.value)


def test_error_text_is_the_structured_message_bounded_never_the_raw_body(api, client):
    api.route(f"POST {BASE}/dbx-1/pause", 500, b"<html>internal console: password hunter2</html>")
    api.route(f"POST {BASE}/dbx-2/pause", 500, {"message": "disk full " + "x" * 1000})

    with pytest.raises(IntegrationError) as raw:
        client.pause("dbx-1", workspace="team-a", abort=AbortSignal())
    with pytest.raises(IntegrationError) as structured:
        client.pause("dbx-2", workspace="team-a", abort=AbortSignal())

    assert "disk full xxx" in str(structured.value)  # positive control
    assert len(str(structured.value)) < 260
    assert "hunter2" not in str(raw.value) and "html" not in str(raw.value)
    assert str(raw.value) == "devbox API error: HTTP 500"


def test_a_malformed_answer_is_an_integration_error(api, client):
    api.route(f"POST {BASE}", 201, {"name": "no id here"})
    api.route(f"POST {BASE}/dbx-1/exec", 200, {"stdout": "no exit code"})
    with pytest.raises(IntegrationError, match="without an id"):
        client.create(workspace="team-a", task_id="t", abort=AbortSignal())
    with pytest.raises(IntegrationError, match="exit code"):
        client.exec("dbx-1", ["ls"], workspace="team-a", abort=AbortSignal())


def test_a_deeply_nested_answer_is_an_integration_error_not_a_crash(api, client):
    # requests' own json() recurses per level: 100,000 brackets raised RecursionError.
    deep = b"[" * 100_000 + b"]" * 100_000
    api.route(f"POST {BASE}", 201, deep)
    api.route(f"POST {BASE}/dbx-1/pause", 500, deep)
    with pytest.raises(IntegrationError, match="not JSON"):
        client.create(workspace="team-a", task_id="t", abort=AbortSignal())
    with pytest.raises(IntegrationError) as refused:
        client.pause("dbx-1", workspace="team-a", abort=AbortSignal())
    assert str(refused.value) == "devbox API error: HTTP 500"


EXEC = {"exitCode": 1, "stdout": "Dockerfile\n", "stderr": "fatal: not found\n"}


def test_any_answer_of_create_or_exec_is_read_or_an_integration_error(api, client):
    seen = Counter()

    @examples(80)
    @given(create=hostile({"id": "dbx-1"}), ran=hostile(EXEC))
    @example(create={"id": ["dbx-1"]}, ran={**EXEC, "exitCode": True, "stderr": "a\x00\ud800"})
    def check(create, ran):
        api.route(f"POST {BASE}", 201, create)
        api.route(f"POST {BASE}/dbx-1/exec", 200, ran)
        abort = AbortSignal()
        try:
            devbox_id = client.create(workspace="team-a", task_id="t", abort=abort)
            assert isinstance(devbox_id, str) and devbox_id
            seen["created"] += 1
        except IntegrationError as exc:
            assert str(exc)
        try:
            result = client.exec("dbx-1", ["ls"], workspace="team-a", abort=abort)
        except IntegrationError as exc:
            assert str(exc)
            seen["refused"] += 1
        else:
            # Output is kept and shown (git's last line): storable, whatever was sent.
            assert isinstance(result.exit_code, int) and not isinstance(result.exit_code, bool)
            assert unstorable(result.stdout) is None and unstorable(result.stderr) is None
            seen["ran"] += 1

    check()
    assert min(seen[o] for o in ("created", "ran", "refused")) >= 5, seen


def test_an_unreachable_api_is_an_integration_error():
    client = DevboxClient(f"http://127.0.0.1:{free_port()}", KEY, timeout_s=1.0)
    with pytest.raises(IntegrationError, match="unreachable"):
        client.pause("dbx-1", workspace="team-a", abort=AbortSignal())


def test_an_abort_ends_a_slow_call_at_once(api, client):
    api.route(f"POST {BASE}/dbx-1/exec", 200, {"exitCode": 0}, delay_s=60.0)
    abort = AbortSignal()
    gevent.spawn_later(0.2, abort.abort, "cancel")
    started = time.monotonic()
    with pytest.raises(Aborted):
        client.exec("dbx-1", ["sleep", "60"], workspace="team-a", abort=abort)
    # The API would only answer after 60 s: only the abort ends the call this soon (a bound
    # generous for a loaded machine).
    assert time.monotonic() - started < 30.0


@pytest.mark.parametrize("key", ["", "too-short-for-hs256"])
def test_a_signing_key_of_at_least_32_bytes_is_required(key):
    with pytest.raises(ValueError, match="DEVBOX_SIGNING_KEY"):
        DevboxClient("http://127.0.0.1:1", key)
