"""Signing out ends the session on the server: a copy of the cookie is refused by every process,
and the long-lived streams of that session (SSE, websocket) close, on another process too.

Two real server processes share one database and one SECRET_KEY, as two hosts would; the
browser signs in on one and out on the other.
"""

import re
from urllib.parse import parse_qs, urlsplit

import gevent
import requests
import websocket

from tests.helpers import wait_for
from tests.issuer import AUDIENCE

SECRET_KEY = "two-hosts-share-this-secret-key-" * 2


def oidc_env(issuer) -> dict:
    return {
        "AUTH_MODE": "oidc",
        "OIDC_ISSUER": issuer.url,
        "OIDC_CLIENT_ID": AUDIENCE,
        "OIDC_CLIENT_SECRET": "a-client-secret-for-the-test",
        "SECRET_KEY": SECRET_KEY,
        "SESSION_RECHECK_S": "0.2",
        "SANDBOX_APPLY_DELAY_S": "0.01",
        "SANDBOX_READY_DELAY_S": "0.01",
    }


def sign_in(browser: requests.Session, server, issuer) -> None:
    """The Authorization Code flow on `server`, the issuer's part played by the test issuer."""
    start = browser.get(server.base + "/login?next=/projects/shop", allow_redirects=False)
    assert start.status_code == 302, start.text
    query = {k: v[0] for k, v in parse_qs(urlsplit(start.headers["Location"]).query).items()}
    issuer.id_token_claims = issuer.claims(nonce=query["nonce"])
    back = browser.get(
        server.base + "/auth/callback",
        params={"code": "the-code", "state": query["state"]},
        allow_redirects=False,
    )
    assert (back.status_code, back.headers["Location"]) == (302, "/projects/shop"), back.text


def csrf_token(browser, server) -> str:
    page = browser.get(server.base + "/projects/shop")
    return re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)


class OpenStream:
    """An SSE response read in the background until the server ends it."""

    def __init__(self, browser, url):
        self.response = browser.get(
            url, stream=True, timeout=60, headers={"Accept": "text/event-stream"}
        )
        assert self.response.status_code == 200, self.response.status_code
        self.chunks: list[bytes] = []
        self.greenlet = gevent.spawn(self._read)

    def _read(self):
        try:
            for chunk in self.response.iter_content(chunk_size=None):
                self.chunks.append(chunk)
        except requests.RequestException:
            pass

    @property
    def ended(self) -> bool:
        return self.greenlet.dead


def test_sign_out_on_one_process_ends_the_session_and_its_streams_on_another(
    start_server, issuer, sql_conn
):
    env = oidc_env(issuer)
    one, other = start_server("app", env=env), start_server("app", env=env)
    browser = requests.Session()
    sign_in(browser, one, issuer)
    copied = dict(browser.cookies)  # what a thief (or another tab) kept before the sign-out
    assert browser.get(other.base + "/api/v1/whoami").status_code == 200  # one cookie, any host

    board = OpenStream(browser, other.base + "/api/v1/projects/shop/tasks/stream")
    page = OpenStream(browser, other.base + "/projects/shop/stream")
    wait_for(lambda: board.chunks and page.chunks, message="both streams bootstrapped")
    task = browser.post(
        other.base + "/api/v1/tasks",
        json={"projectId": "shop", "source": {"kind": "image", "image": "nginx", "name": "w"}},
        headers={"Origin": other.base},
    )
    assert task.status_code == 201, task.text
    timeline = websocket.create_connection(
        other.base.replace("http", "ws") + f"/ws/tasks/{task.json()['id']}/timeline",
        origin=other.base,
        cookie="; ".join(f"{k}={v}" for k, v in copied.items()),
        timeout=30,
    )
    assert timeline.recv()  # the socket serves (its reset frame)
    gevent.sleep(0.5)  # a few re-checks pass while signed in: the streams stay open
    assert not board.ended and not page.ended

    out = browser.post(
        one.base + "/logout", data={"csrf_token": csrf_token(browser, one)}, allow_redirects=False
    )
    assert out.status_code == 303
    assert sql_conn.execute("SELECT count(*) AS n FROM session_revocations").fetchone()["n"] == 1

    thief = requests.Session()
    thief.cookies.update(copied)
    for server in (one, other):
        assert thief.get(server.base + "/api/v1/whoami").status_code == 401
        anonymous = thief.get(server.base + "/projects/shop", allow_redirects=False)
        assert anonymous.status_code == 302 and "/login" in anonymous.headers["Location"]
    wait_for(lambda: board.ended and page.ended, timeout=10, message="the SSE streams to close")
    frames = []
    while True:  # the websocket says "bye" (reconnect), then closes; a reconnect is refused
        try:
            frame = timeline.recv()
        except (websocket.WebSocketException, OSError):
            break
        if not frame:
            break
        frames.append(frame)
    assert frames and '"t":"bye"' in frames[-1].replace(" ", ""), frames
    try:
        websocket.create_connection(
            other.base.replace("http", "ws") + f"/ws/tasks/{task.json()['id']}/timeline",
            origin=other.base,
            cookie="; ".join(f"{k}={v}" for k, v in copied.items()),
            timeout=10,
        )
        raise AssertionError("a signed-out session opened a websocket")
    except websocket.WebSocketBadStatusException as refused:
        assert refused.status_code == 401


def test_a_fresh_sign_in_after_a_sign_out_works(start_server, issuer):
    """Positive control: the revocation is of one session, not of the user."""
    server = start_server("app", env=oidc_env(issuer))
    browser = requests.Session()
    sign_in(browser, server, issuer)
    browser.post(server.base + "/logout", data={"csrf_token": csrf_token(browser, server)})
    assert browser.get(server.base + "/api/v1/whoami").status_code == 401
    sign_in(browser, server, issuer)
    assert browser.get(server.base + "/api/v1/whoami").status_code == 200
