"""AUTH_MODE=oidc, browser side, through the Flask test client against a test issuer serving a
real JWKS and token endpoint over HTTP: the Authorization Code + PKCE flow (Authlib), what the
session cookie holds, its absolute lifetime, the workspace picker, CSRF-checked sign-out, and
what an anonymous request of each kind gets. (tests/e2e/test_sign_in.py runs the same flow in
Chromium against a real OIDC provider.)"""

import base64
import hashlib
import re
from urllib.parse import parse_qs, urlsplit

import pytest

from tests.helpers import oidc_settings
from tests.issuer import AUDIENCE, new_key

SESSION_KEYS = {"uid", "name", "wss", "ws", "at", "sid"}


@pytest.fixture
def oidc_app(make_app, issuer):
    return make_app(**oidc_settings(issuer.url), session_lifetime_s=3600.0)


@pytest.fixture
def browser(oidc_app):
    return oidc_app.test_client()


def start_sign_in(browser, issuer, next_path="/projects/shop") -> dict:
    """GET /login: the redirect to the issuer, as its query parameters."""
    response = browser.get("/login", query_string={"next": next_path})
    assert response.status_code == 302
    location = urlsplit(response.headers["Location"])
    assert f"{location.scheme}://{location.netloc}{location.path}" == issuer.url + "/authorize"
    return {key: values[0] for key, values in parse_qs(location.query).items()}


def finish_sign_in(browser, issuer, query: dict, **claims):
    """The issuer sends the browser back with a code; its token endpoint answers an ID token."""
    issuer.id_token_claims = {**issuer.claims(nonce=query["nonce"]), **claims}
    return browser.get("/auth/callback", query_string={"code": "the-code", "state": query["state"]})


def sign_in(browser, issuer, **claims):
    return finish_sign_in(browser, issuer, start_sign_in(browser, issuer), **claims)


def session_contents(app, browser) -> dict:
    cookie = browser.get_cookie(app.config["SESSION_COOKIE_NAME"])
    return app.session_interface.get_signing_serializer(app).loads(cookie.value)


def csrf_of(browser) -> str:
    page = browser.get("/projects/shop")
    return re.search(r'name="csrf-token" content="([^"]+)"', page.text).group(1)


def test_sign_in_is_authorization_code_with_pkce_state_and_nonce(oidc_app, browser, issuer):
    query = start_sign_in(browser, issuer)
    assert query["response_type"] == "code" and query["client_id"] == AUDIENCE
    assert query["redirect_uri"] == "http://localhost/auth/callback"
    assert set(query["scope"].split()) >= {"openid", "profile", "email"}
    assert query["code_challenge_method"] == "S256" and query["state"] and query["nonce"]

    back = finish_sign_in(
        browser, issuer, query, namespace=["team-a", "team-b"], preferred_username="Alice"
    )
    assert (back.status_code, back.headers["Location"]) == (302, "/projects/shop")
    [exchange] = issuer.token_requests
    verifier = exchange["code_verifier"][0]
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    assert challenge.rstrip(b"=").decode() == query["code_challenge"]

    kept = session_contents(oidc_app, browser)
    assert set(kept) == SESSION_KEYS, kept  # identity and workspace only: no tokens, no claims
    assert (kept["uid"], kept["name"], kept["wss"], kept["ws"]) == (
        "alice",
        "Alice",
        ["team-a", "team-b"],
        "team-a",
    )
    assert browser.get("/api/v1/whoami").get_json()["workspace"] == "team-a"
    page = browser.get("/projects/shop")
    assert page.status_code == 200 and "data-user>Alice<" in page.text


@pytest.mark.parametrize(
    "case",
    [
        "forged state",
        "wrong nonce",
        "wrong issuer",
        "wrong audience",
        "another issuer's key",
        "unknown kid",
        "no workspace",
        "expired",
        "provider error",
    ],
)
def test_a_bad_answer_from_the_issuer_signs_nobody_in(oidc_app, browser, issuer, case):
    query = start_sign_in(browser, issuer)
    if case == "forged state":
        query["state"] = "forged"
    if case in ("another issuer's key", "unknown kid"):
        issuer.id_token_key = new_key("RS256")
        issuer.id_token_kid = "rs256-1" if case == "another issuer's key" else "rs256-9"
    claims = {
        "wrong nonce": {"nonce": "replayed"},
        "wrong issuer": {"iss": "https://evil.example"},
        "wrong audience": {"aud": "another-client"},
        "no workspace": {"namespace": []},
        "expired": {"exp": issuer.claims()["iat"] - 600},
    }.get(case, {})
    if case == "provider error":
        back = browser.get(
            "/auth/callback", query_string={"error": "access_denied", "state": query["state"]}
        )
    else:
        back = finish_sign_in(browser, issuer, query, **claims)
    assert back.status_code == 401, back.text
    assert "Sign-in did not work" in back.text
    assert "uid" not in session_contents(oidc_app, browser)
    assert browser.get("/api/v1/whoami").status_code == 401


def test_the_control_sign_in_for_the_bad_answers_works(browser, issuer):
    assert sign_in(browser, issuer).status_code == 302
    assert browser.get("/api/v1/whoami").status_code == 200


def test_a_sign_in_ends_after_its_absolute_lifetime(oidc_app, browser, issuer):
    sign_in(browser, issuer)
    assert browser.get("/projects/shop").status_code == 200
    with browser.session_transaction() as kept:
        kept["at"] -= 3600 + 1
    assert browser.get("/api/v1/whoami").status_code == 401
    anonymous = browser.get("/projects/shop")
    assert (anonymous.status_code, anonymous.headers["Location"]) == (
        302,
        "/login?next=/projects/shop",
    )


def test_the_picker_chooses_among_the_signed_workspaces_never_adds_one(browser, issuer):
    sign_in(browser, issuer, namespace=["team-a", "team-b"])
    token = csrf_of(browser)
    assert browser.post("/workspace", data={"workspace": "team-b"}).status_code == 403  # no CSRF
    refused = browser.post("/workspace", data={"workspace": "team-z", "csrf_token": token})
    assert refused.status_code == 403
    assert browser.get("/api/v1/whoami").get_json()["workspace"] == "team-a"
    chosen = browser.post("/workspace", data={"workspace": "team-b", "csrf_token": token})
    assert chosen.status_code == 303
    assert browser.get("/api/v1/whoami").get_json()["workspace"] == "team-b"
    # identity headers do not move a browser either
    assert browser.get(
        "/api/v1/whoami", headers={"X-Namespace": "team-a", "X-User-Id": "root"}
    ).get_json() == {
        "user": "alice",
        "display": "alice",
        "workspace": "team-b",
        "workspaces": ["team-a", "team-b"],
    }


def test_sign_out_needs_the_csrf_token(browser, issuer):
    sign_in(browser, issuer)
    assert browser.post("/logout").status_code == 403
    assert browser.get("/api/v1/whoami").status_code == 200
    out = browser.post("/logout", data={"csrf_token": csrf_of(browser)})
    assert (out.status_code, out.headers["Location"]) == (303, "/signed-out")
    assert browser.get("/api/v1/whoami").status_code == 401
    assert "Signed out" in browser.get("/signed-out").text


def test_next_never_leaves_the_site(browser, issuer):
    for target in ("//evil.example/x", "https://evil.example/", "/\\evil.example"):
        query = start_sign_in(browser, issuer, next_path=target)
        back = finish_sign_in(browser, issuer, query)
        assert back.headers["Location"] == "/", target


def test_what_an_anonymous_request_of_each_kind_gets(browser):
    page = browser.get("/projects/shop?task=1")
    assert (page.status_code, page.headers["Location"]) == (
        302,
        "/login?next=/projects/shop?task%3D1",
    )
    htmx = browser.post("/projects/shop/tasks", headers={"HX-Request": "true"})
    assert htmx.status_code == 401 and "Signed out" in htmx.text
    stream = browser.get("/projects/shop/stream", headers={"Accept": "text/event-stream"})
    assert stream.status_code == 401
    handshake = browser.get(
        "/ws/tasks/6f1b1c1e-0000-4000-8000-000000000000/timeline",
        headers={
            "Upgrade": "websocket",
            "Connection": "Upgrade",
            "Sec-WebSocket-Version": "13",
            "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
            "Origin": "http://localhost",
        },
    )
    assert handshake.status_code == 401
    api = browser.get("/api/v1/tasks")
    assert (api.status_code, api.get_json()["code"]) == (401, "unauthenticated")
    assert api.headers["WWW-Authenticate"] == 'Bearer error="invalid_token"'
    # the control: what must stay reachable without a sign-in
    assert browser.get("/healthz").status_code == 200
    assert browser.get("/static/js/main.js").status_code == 200
    assert browser.get("/signed-out").status_code == 200


def test_an_expired_sign_in_can_still_sign_out(browser, issuer):
    sign_in(browser, issuer)
    token = csrf_of(browser)
    with browser.session_transaction() as kept:
        kept["at"] -= 3600 + 1
    out = browser.post("/logout", data={"csrf_token": token})
    assert (out.status_code, out.headers["Location"]) == (303, "/signed-out")
