"""Hostile upstreams over real HTTP, against a real server process (`python app.py`): the cluster
a kubeconfig names, the devbox API, the gateway and the OpenID Connect issuer answer with 64 MiB,
a 16 KiB gzip body inflating to 16 MiB, a 1 MiB one inflating to 1 GiB, one huge JSON string and
a drip. Each request or run fails cleanly (`upstream_answer_too_large` where a cap was hit), the
process's peak RSS stays within 50 MB of its warmed-up size, and `/healthz`, polled by another
process all along, answers within 100 ms."""

import base64
import re
import subprocess
import sys
import time
import tracemalloc
from contextlib import contextmanager
from pathlib import Path

import gevent
import jwt
import pytest
import requests
import yaml

from blueprints.auth.oidc import ConfigurationError, discover
from engine.integrations.upstream import AnswerLimit
from tests.contract.conftest import kubeconfig_for
from tests.helpers import IMAGE_SOURCE, poll_status
from tests.hostile_http import (
    GIB,
    KIB,
    MIB,
    Answer,
    HostileServer,
    drip,
    gzip_json,
    gzipped,
    json_answer,
    plain,
)
from tests.issuer import new_key

GROWTH_MAX = 50 * MIB
HEALTHZ_MAX_S = 0.1
#: A server that grows past this is killed at once (a regression must not take the machine).
GUARD = 500 * MIB
#: The caps the server runs with: the byte caps are the defaults, the time caps short.
TIME_CAP_S = 2
ENV = {
    "CLUSTER_BACKEND": "kubernetes",
    "KUBE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "KUBE_ALLOW_HTTP": "true",
    "KUBE_MAX_RETRIES": "0",
    "KUBE_REQUEST_TIMEOUT_S": "10",
    "KUBE_ANSWER_MAX_S": str(TIME_CAP_S),
    "DEVBOX_SIGNING_KEY": "devbox-signing-key-for-the-hostile-tests",
    "DEVBOX_TIMEOUT_S": "10",
    "DEVBOX_ANSWER_MAX_S": str(TIME_CAP_S),
    "GATEWAY_MODEL": "hostile",
    "GATEWAY_RETRIES": "0",
    "GATEWAY_IDLE_TIMEOUT_S": "10",
    "GATEWAY_ANSWER_MAX_S": str(TIME_CAP_S),
    "OIDC_ANSWER_MAX_S": str(TIME_CAP_S),
    "ACCESS_LOG": "",
}
#: Polls /healthz every 20 ms until told to stop, printing each answer's latency at once.
POLLER = """
import http.client, select, sys, time
while not select.select([sys.stdin], [], [], 0.02)[0]:
    started = time.monotonic()
    connection = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]), timeout=30)
    connection.request("GET", "/healthz")
    assert connection.getresponse().status == 200
    connection.close()
    print(time.monotonic() - started, flush=True)
"""


def sse(*lines: bytes) -> Answer:
    return Answer(headers=(("Content-Type", "text/event-stream"),), body=lambda: list(lines))


#: The hostile answers every integration gets, by name.
def hostile_answers(key: str) -> dict:
    return {
        "64MiB": plain(64 * MIB, key, length=None),
        "gzip-16MiB": gzipped(gzip_json(16 * MIB, key), length=None),
        "gzip-1GiB": gzipped(gzip_json(GIB, key), length=None),
        "drip": drip(first=b'{"%s": "' % key.encode()),
    }


class Watched:
    """A server process whose peak RSS (VmHWM, reset per scenario) and /healthz latency are
    measured while a scenario runs."""

    def __init__(self, server):
        self.server = server
        self.status = Path(f"/proc/{server.proc.pid}/status")
        self.baseline = 0
        self.results: list[tuple[str, int, float, int]] = []

    def kib(self, field: str) -> int:
        return int(re.search(rf"{field}:\s+(\d+) kB", self.status.read_text()).group(1)) * KIB

    def settle(self) -> None:
        """Take the warmed-up size as the baseline."""
        self.baseline = self.kib("VmRSS")

    @contextmanager
    def scenario(self, name: str):
        Path(f"/proc/{self.server.proc.pid}/clear_refs").write_text("5")  # VmHWM := VmRSS
        poller = subprocess.Popen(
            [sys.executable, "-c", POLLER, str(self.server.port)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        guard = gevent.spawn(self._guard)
        latencies = [float(poller.stdout.readline())]  # polling before the scenario begins
        try:
            yield
            latencies.append(float(poller.stdout.readline()))  # and after it ended
        finally:
            guard.kill()
            out, _ = poller.communicate(b"stop", timeout=60)
        latencies += [float(line) for line in out.split()]
        growth = self.kib("VmHWM") - self.baseline
        self.results.append((name, growth, max(latencies), len(latencies)))
        print(f"{name}: peak growth {growth / MIB:.1f} MiB, /healthz worst", end=" ")
        print(f"{max(latencies) * 1000:.0f} ms ({len(latencies)} polls)")

    def _guard(self):
        while True:
            if self.kib("VmRSS") - self.baseline > GUARD:
                self.server.proc.kill()
                return
            gevent.sleep(0.01)

    def assert_bounded(self):
        over = [r for r in self.results if r[1] > GROWTH_MAX or r[2] > HEALTHZ_MAX_S]
        assert not over, over


@pytest.fixture
def hostile():
    server = HostileServer()
    yield server
    server.stop()


def browser(server) -> tuple[requests.Session, str]:
    """A session signed in as the dev user, and its CSRF token."""
    session = requests.Session()
    page = session.get(server.base + "/projects/demo", timeout=30)
    return session, re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)


def kubeconfig_header(url: str) -> dict:
    document = yaml.safe_dump(kubeconfig_for(url))
    return {"X-Kubeconfig": base64.b64encode(document.encode()).decode()}


def check_access(session, csrf, server, hostile) -> dict:
    response = session.post(
        server.base + "/cluster-access/check",
        headers={**kubeconfig_header(hostile.url), "X-CSRF-Token": csrf},
        json={"projectId": "demo"},
        timeout=60,
    )
    assert response.status_code == 200, response.text[:300]
    return response.json()


def run(server, hostile, source: dict) -> dict:
    """A task of `source` (with a kubeconfig for the hostile cluster), once it has ended."""
    response = requests.post(
        server.base + "/api/v1/tasks",
        headers=kubeconfig_header(hostile.url),
        json={"projectId": "demo", "source": source},
        timeout=30,
    )
    assert response.status_code == 201, response.text[:300]
    task = response.json()["id"]

    def read():
        return requests.get(f"{server.base}/api/v1/tasks/{task}", timeout=30).json()

    return poll_status(read, ("completed", "failed", "cancelled"), timeout=60, interval=0.1)


PROMPT = {"kind": "prompt", "prompt": "deploy a web server"}
DEVBOX_CREATE = "POST /v1/namespaces/default/devboxes"
CHAT = "POST /v1/chat/completions"
TOO_LARGE = "upstream_answer_too_large"


def test_every_integration_stays_bounded_against_hostile_answers(start_server, hostile):
    server = start_server(
        "app",
        env={**ENV, "DEVBOX_URL": hostile.url, "GATEWAY_URL": hostile.url + "/v1"},
    )
    watched = Watched(server)
    session, csrf = browser(server)
    hostile.route("POST /v1/namespaces/default/devboxes/*", Answer(204, body=lambda: []))
    # Warm up every path once on well-formed answers (imports, pools, first allocations).
    hostile.route("GET /version", json_answer({"gitVersion": "v1.31.2"}))
    check_access(session, csrf, server, hostile)
    hostile.route(DEVBOX_CREATE, json_answer({"id": "box-1"}, status=201))
    hostile.route(CHAT, json_answer({"error": {"message": "no"}}, status=400))
    assert run(server, hostile, PROMPT)["failure"]["reason"] == "gateway_error"
    watched.settle()

    # The cluster, through the access check (the path) and through a run.
    for name, answer in hostile_answers("gitVersion").items():
        hostile.route("GET /version", answer)
        with watched.scenario(f"kube check {name}"):
            access = check_access(session, csrf, server, hostile)["access"]
        assert access["cause"] == TOO_LARGE, access
        assert "larger than 2 MiB" in access["problems"][0] or "after 2 s" in access["problems"][0]
    hostile.route("GET /version", plain(2 * MIB - 4 * KIB))  # one huge string, under the cap
    with watched.scenario("kube check huge string"):
        access = check_access(session, csrf, server, hostile)["access"]
    assert access["reachable"] is True and access["version"].startswith("vvv")
    for name, answer in hostile_answers("kind").items():
        hostile.route("GET /apis/apps/v1", answer)
        with watched.scenario(f"kube run {name}"):
            task = run(server, hostile, IMAGE_SOURCE)
        assert (task["status"], task["failure"]["reason"]) == ("failed", TOO_LARGE), task

    # The devbox API.
    for name, answer in hostile_answers("id").items():
        hostile.route(DEVBOX_CREATE, answer)
        with watched.scenario(f"devbox {name}"):
            task = run(server, hostile, PROMPT)
        assert (task["status"], task["failure"]["reason"]) == ("failed", TOO_LARGE), task
    hostile.route(DEVBOX_CREATE, plain(MIB - 4 * KIB, "note", status=201))
    with watched.scenario("devbox huge string"):
        task = run(server, hostile, PROMPT)
    assert task["status"] == "failed", task  # an answer without an id: a clean failure

    # The gateway: streamed, and an error answer.
    hostile.route(DEVBOX_CREATE, json_answer({"id": "box-1"}, status=201))
    event = b'data: {"choices": [{"delta": {"content": "'
    streams = {
        "64MiB of events": sse(*[b": " + b"k" * (64 * KIB - 3) + b"\n"] * 1024),
        "64MiB line": Answer(body=lambda: plain(64 * MIB).body()),
        "gzip-16MiB": gzipped(gzip_json(16 * MIB), length=None),
        "gzip-1GiB": gzipped(gzip_json(GIB), length=None),
        "drip": drip(first=b": ", piece=b"k\n", interval_s=0.2),
        "64MiB error answer": Answer(500, body=lambda: plain(64 * MIB).body()),
    }
    for name, answer in streams.items():
        hostile.route(CHAT, answer)
        with watched.scenario(f"gateway {name}"):
            task = run(server, hostile, PROMPT)
        assert (task["status"], task["failure"]["reason"]) == ("failed", TOO_LARGE), task
    huge = b'data: {"id": "' + b"v" * (MIB - 100) + b'", "choices": []}\n\n'
    hostile.route(
        CHAT, sse(huge, event + b'", "finish_reason": "stop"}}]}\n\n', b"data: [DONE]\n\n")
    )
    with watched.scenario("gateway huge string"):
        task = run(server, hostile, PROMPT)
    assert (task["status"], task["failure"]["reason"]) == ("failed", "malformed_answer"), task

    watched.assert_bounded()


def test_the_issuer_stays_bounded_against_hostile_answers(start_server, hostile):
    issuer = hostile.url
    hostile.route(
        "GET /.well-known/openid-configuration",
        json_answer(
            {
                "issuer": issuer,
                "jwks_uri": issuer + "/jwks",
                "authorization_endpoint": issuer + "/authorize",
                "token_endpoint": issuer + "/token",
            }
        ),
    )
    server = start_server(
        "app",
        env={
            **ENV,
            "AUTH_MODE": "oidc",
            "OIDC_ISSUER": issuer,
            "OIDC_CLIENT_ID": "engine",
            "SECRET_KEY": "s" * 48,
        },
    )
    watched = Watched(server)
    token = jwt.encode(
        {"sub": "u", "iss": issuer, "aud": "engine", "exp": time.time() + 600},
        new_key("RS256"),
        algorithm="RS256",
        headers={"kid": "k1"},
    )

    def bearer():
        response = requests.get(
            server.base + "/api/v1/whoami", headers={"Authorization": f"Bearer {token}"}, timeout=30
        )
        return response.status_code, response.json().get("code")

    def sign_in():
        browser = requests.Session()
        login = browser.get(server.base + "/login", allow_redirects=False, timeout=30)
        state = re.search(r"state=([^&]+)", login.headers["Location"]).group(1)
        callback = browser.get(f"{server.base}/auth/callback?code=c&state={state}", timeout=30)
        return callback.status_code

    hostile.route("POST /token", json_answer({"error": "invalid_grant"}, status=400))
    assert sign_in() == 401  # warm up (a bearer refusal would take the one log line of its kind)
    watched.settle()

    answers = {**hostile_answers("keys"), "huge string": plain(256 * KIB - 4 * KIB, "note")}
    for name, answer in answers.items():
        hostile.route("GET /jwks", answer)
        with watched.scenario(f"key set {name}"):
            assert bearer() == (401, "unauthenticated")
        hostile.route("POST /token", answer)
        with watched.scenario(f"token {name}"):
            assert sign_in() == 401
    watched.assert_bounded()
    # Refused for the cap: each sign-in says so; bearer refusals of one kind are logged once a
    # minute, so the first says it and every scenario fetched the key set again.
    log = server.output()
    assert log.count("refused: UpstreamAnswerTooLarge: the answer was") == 4, log[-3000:]
    assert re.search(r"bearer token refused: key: .*OIDC_ANSWER_MAX_BYTES", log), log[-3000:]
    assert len([r for r in hostile.requests if r.path == "/jwks"]) == len(answers)


@pytest.mark.parametrize("name", ["64MiB", "gzip-1GiB", "drip"])
def test_a_hostile_discovery_document_stops_boot_with_the_cap_named(hostile, name):
    hostile.route("GET /.well-known/openid-configuration", hostile_answers("issuer")[name])
    limit = AnswerLimit(256 * KIB, 1.0, "OIDC_ANSWER_MAX_BYTES", "OIDC_ANSWER_MAX_S")

    tracemalloc.start()
    try:
        with pytest.raises(ConfigurationError, match="OIDC_ANSWER_MAX_(BYTES|S)"):
            discover(hostile.url, limit)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * MIB
