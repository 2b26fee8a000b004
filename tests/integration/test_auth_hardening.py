"""AUTH_MODE=oidc, the second hardening pass: where a sign-in may send the browser back to, what a
client can make the text log say, how much the bearer-refusal log may write and remember, pending
sign-ins in the cookie, server-side sign-out, numeric date claims and MCP session expiry.

`next` and the callback's parameters are input surfaces: Hypothesis drives them with arbitrary
text (derandomized, bounded), the issue's requests are written out too.
"""

import base64
import json
import logging
import re
import time
from urllib.parse import parse_qs, quote, unquote_plus, urlsplit

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blueprints.auth.modes import MAX_PENDING_SIGN_INS, RETURN_QUERY_PARAMS
from blueprints.auth.oidc import REFUSAL_LOG_MAX_LINES, REFUSAL_LOG_MAX_REASONS, RefusalLog
from engine.operations.logs import JsonFormatter, TextFormatter
from tests.helpers import oidc_settings

PROPERTY = settings(
    max_examples=60,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
#: The issue's `next` values and their relatives: each one must come back as "/".
FOREIGN = [
    "/%09/evil.example",
    "/%0A/x",
    "/%0D%0ALocation:%20https://evil.example",
    "//x",
    "/\\x",
    "/%5Cx",
    "https://x",
    "http:/x",
    "javascript:alert(1)",
    "%2F%2Fevil.example",
    "/%E2%80%A8/x",
    " /x",
    "",
]


@pytest.fixture
def oidc_app(make_app, issuer):
    return make_app(**oidc_settings(issuer.url), session_lifetime_s=3600.0)


@pytest.fixture
def browser(oidc_app):
    return oidc_app.test_client()


def start(browser, raw_query: str):
    response = browser.get("/login?" + raw_query)
    assert response.status_code == 302, response.text
    location = urlsplit(response.headers["Location"])
    return {k: v[0] for k, v in parse_qs(location.query).items()}


def finish(browser, issuer, query: dict):
    issuer.id_token_claims = issuer.claims(nonce=query["nonce"])
    return browser.get("/auth/callback", query_string={"code": "c", "state": query["state"]})


def stays_on_this_site(location: str) -> bool:
    """What a browser reads as a path of the same origin (it drops tabs and newlines, reads
    a backslash as a slash, and takes "//host" or "scheme:" as another site)."""
    parts = urlsplit(location)
    return (
        location.startswith("/")
        and not location.startswith(("//", "/\\"))
        and not parts.scheme
        and not parts.netloc
        and all(c.isprintable() and not c.isspace() for c in location)
    )


def session_of(app, browser) -> dict:
    cookie = browser.get_cookie(app.config["SESSION_COOKIE_NAME"])
    return app.session_interface.get_signing_serializer(app).loads(cookie.value)


# -- next ------------------------------------------------------------------------------------


@pytest.mark.parametrize("target", FOREIGN)
def test_a_foreign_next_comes_back_home_never_a_500(browser, issuer, target):
    back = finish(browser, issuer, start(browser, "next=" + target))
    assert (back.status_code, back.headers["Location"]) == (302, "/"), target


def test_a_path_of_this_site_is_kept(browser, issuer):
    back = finish(browser, issuer, start(browser, "next=" + quote("/projects/shop?task=1")))
    assert back.headers["Location"] == "/projects/shop?task=1"


@PROPERTY
@given(
    prefix=st.sampled_from(["", "/", "//", "/\\", "/\t/", "\\\\", "https://", "/%0A", "/%2509"]),
    text=st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
)
def test_any_next_is_kept_as_a_same_origin_path_or_replaced(oidc_app, browser, prefix, text):
    target = prefix + text
    response = browser.get("/login", query_string={"next": target})
    assert response.status_code == 302
    kept = session_of(oidc_app, browser)["next"]
    assert stays_on_this_site(kept), (target, kept)
    if kept != "/":  # the target's path, with the page parameters among its own, or nothing
        path, _, query = kept.partition("?")
        pieces = [p for p in query.split("&") if p]
        assert path == target.partition("?")[0], (target, kept)
        assert set(pieces) <= set(target.partition("?")[2].split("&")), (target, kept)
        assert all(unquote_plus(p.partition("=")[0]) in RETURN_QUERY_PARAMS for p in pieces)


#: Query parameters that carry credentials somewhere (OAuth, OIDC, signed links).
CREDENTIAL_PARAMS = ["access_token", "id_token", "refresh_token", "code", "state", "token"]
JWT = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ2aWN0aW0ifQ.c2lnbmF0dXJl"


def test_a_credential_in_the_query_reaches_neither_the_login_redirect_nor_the_session(
    oidc_app, browser, issuer
):
    """A signed-out visit to /?access_token=<jwt> was sent to /login?next=/?access_token%3D<jwt>,
    and the token kept in the session cookie."""
    home = browser.get(f"/?access_token={JWT}")
    page = browser.get(f"/projects/shop?task=1&id_token={JWT}&deploy=image&code=c&token={JWT}")

    for response in (home, page):
        assert response.status_code == 302 and JWT not in response.headers["Location"]
    login = urlsplit(home.headers["Location"])
    assert (login.path, parse_qs(login.query)) == ("/login", {"next": ["/"]})
    # Positive control: the parameters the page reads are kept, in order.
    kept = parse_qs(urlsplit(page.headers["Location"]).query)["next"]
    assert kept == ["/projects/shop?task=1&deploy=image"]
    query = start(browser, "next=" + quote(f"/projects/shop?task=1&access_token={JWT}"))
    assert session_of(oidc_app, browser)["next"] == "/projects/shop?task=1"
    assert JWT not in json.dumps(session_of(oidc_app, browser))
    assert finish(browser, issuer, query).headers["Location"] == "/projects/shop?task=1"


@PROPERTY
@given(
    params=st.lists(
        st.tuples(
            st.sampled_from(sorted(RETURN_QUERY_PARAMS) + CREDENTIAL_PARAMS),
            st.text("abcXYZ019-._~%2F", max_size=12),
        ),
        max_size=6,
    )
)
def test_a_return_address_keeps_the_page_parameters_and_no_other(oidc_app, browser, params):
    target = "/projects/shop?" + "&".join(f"{name}={value}" for name, value in params)
    browser.get("/login", query_string={"next": target})
    page = [f"{name}={value}" for name, value in params if name in RETURN_QUERY_PARAMS]
    expected = "/projects/shop" + ("?" + "&".join(page) if page else "")
    assert session_of(oidc_app, browser)["next"] == expected


@PROPERTY
@given(
    error=st.text(st.characters(blacklist_categories=("Cs",)), max_size=30),
    description=st.text(st.characters(blacklist_categories=("Cs",)), max_size=60),
    state=st.text(st.characters(blacklist_categories=("Cs",)), max_size=20),
)
def test_any_callback_answer_is_a_4xx_never_a_500(browser, error, description, state):
    response = browser.get(
        "/auth/callback",
        query_string={"error": error, "error_description": description, "state": state},
    )
    assert 400 <= response.status_code < 500, response.status_code


# -- log injection ---------------------------------------------------------------------------


def test_a_client_cannot_forge_a_text_log_line(browser, issuer, caplog):
    caplog.set_level(logging.INFO)
    forged = "2026-01-01 00:00:00,000 ERROR engine.streaks: integration:cluster failed"
    start(browser, "next=/")
    browser.get(
        "/auth/callback?error=access_denied&error_description=x%0A"
        + quote(forged)
        + "%0D%E2%80%A8%C2%85y"
    )
    refused = [r for r in caplog.records if "sign-in refused" in r.getMessage()]
    assert refused and "\n" in refused[0].getMessage()  # control: the record carries the newline
    for record in caplog.records:
        for line in (TextFormatter().format(record), JsonFormatter().format(record)):
            assert len(line.splitlines()) == 1, line
    text = TextFormatter().format(refused[0])
    assert "x\\n2026-01-01" in text and "\\r\\u2028\\x85y" in text


def test_a_traceback_quoting_a_client_value_stays_under_its_record():
    try:
        raise ValueError("bad\n2026-01-01 00:00:00,000 ERROR forged")
    except ValueError:
        record = logging.LogRecord("t", logging.ERROR, __file__, 1, "failed: %s", ("a\nb",), None)
        import sys

        record.exc_info = sys.exc_info()
    lines = TextFormatter().format(record).split("\n")
    assert lines[0].endswith("ERROR t: failed: a\\nb")
    assert all(line.startswith("    ") for line in lines[1:])  # only the first at column 0


# -- the bearer-refusal log ------------------------------------------------------------------


def unsigned_token(header: dict, claims: dict) -> str:
    """A JWT with any header at all (PyJWT will not sign with an unknown `alg`)."""

    def part(value: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(value).encode()).rstrip(b"=").decode()

    return f"{part(header)}.{part(claims)}.c2ln"


def test_refusals_flooded_with_distinct_reasons_write_few_lines(make_app, issuer, caplog):
    caplog.set_level(logging.WARNING, logger="blueprints.auth.oidc")
    client = make_app(**oidc_settings(issuer.url)).test_client()
    for i in range(40):
        token = unsigned_token({"alg": f"X{i}", "kid": "rs256-1"}, issuer.claims())
        client.get("/api/v1/tasks", headers={"Authorization": f"Bearer {token}"})
        client.get("/api/v1/tasks", headers={"Authorization": f"Scheme{i} abc"})
    lines = [r for r in caplog.records if "bearer token refused" in r.getMessage()]
    assert 1 <= len(lines) <= 2, [r.getMessage() for r in lines]  # one per kind of reason
    refusals = client.application.extensions["auth"].refusals
    assert len(refusals.last) <= 2


def test_the_refusal_log_is_bounded_in_memory_and_in_rate(caplog):
    caplog.set_level(logging.WARNING, logger="blueprints.auth.oidc")
    log = RefusalLog()
    for i in range(1000):
        log.refused(f"reason-{i}", "detail")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == REFUSAL_LOG_MAX_LINES
    assert len(log.last) <= REFUSAL_LOG_MAX_REASONS
    assert log.suppressed == 1000 - REFUSAL_LOG_MAX_LINES  # counted, reported on the next line
    log._window_start -= log.interval_s  # a minute later
    log.refused("reason-x", "detail")
    more = f"({1000 - REFUSAL_LOG_MAX_LINES} more refusals not logged)"
    assert more in caplog.records[-1].getMessage()


# -- pending sign-ins ------------------------------------------------------------------------


def test_each_login_keeps_at_most_a_few_pending_sign_ins_in_the_cookie(oidc_app, browser, issuer):
    queries = [start(browser, "next=/") for _ in range(20)]
    kept = session_of(oidc_app, browser)
    assert len([k for k in kept if k.startswith("_state_")]) == MAX_PENDING_SIGN_INS
    assert len(browser.get_cookie(oidc_app.config["SESSION_COOKIE_NAME"]).value) < 4096
    # The newest ones still complete; the oldest were forgotten.
    assert finish(browser, issuer, queries[0]).status_code == 401
    assert finish(browser, issuer, queries[-1]).status_code == 302


# -- server-side sign-out --------------------------------------------------------------------


def test_a_copied_cookie_is_refused_after_sign_out(oidc_app, browser, issuer, sql_conn):
    finish(browser, issuer, start(browser, "next=/"))
    name = oidc_app.config["SESSION_COOKIE_NAME"]
    copied = browser.get_cookie(name).value
    token = re.search(r'name="csrf-token" content="([^"]+)"', browser.get("/").text).group(1)
    assert browser.post("/logout", data={"csrf_token": token}).status_code == 303

    thief = oidc_app.test_client()
    thief.set_cookie(name, copied)
    assert thief.get("/api/v1/whoami").status_code == 401
    assert sql_conn.execute("SELECT count(*) AS n FROM session_revocations").fetchone()["n"] == 1


def test_a_cookie_without_a_session_id_is_refused(oidc_app, browser, issuer):
    finish(browser, issuer, start(browser, "next=/"))
    assert browser.get("/api/v1/whoami").status_code == 200  # control
    with browser.session_transaction() as kept:
        del kept["sid"]
    assert browser.get("/api/v1/whoami").status_code == 401


def test_a_browser_request_checks_the_revocation_once_and_a_bearer_never(oidc_app, browser, issuer):
    db = oidc_app.extensions["engine"].db
    finish(browser, issuer, start(browser, "next=/"))
    before = db.statements["session_revocation_exists"]
    browser.get("/api/v1/whoami")
    assert db.statements["session_revocation_exists"] == before + 1
    oidc_app.test_client().get("/api/v1/whoami", headers=issuer.bearer())
    assert db.statements["session_revocation_exists"] == before + 1


# -- numeric claims --------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["exp", "nbf", "iat"])
def test_a_date_claim_given_as_a_numeric_string_is_refused(make_app, issuer, claim):
    client = make_app(**oidc_settings(issuer.url)).test_client()
    now = int(time.time())
    value = {"exp": now + 300, "nbf": now - 10, "iat": now}[claim]
    good = issuer.bearer(**{claim: value})
    assert client.get("/api/v1/whoami", headers=good).status_code == 200  # control
    as_text = issuer.bearer(**{claim: str(value)})
    response = client.get("/api/v1/whoami", headers=as_text)
    assert (response.status_code, response.get_json()["code"]) == (401, "unauthenticated")


def test_an_id_token_with_a_string_exp_signs_nobody_in(oidc_app, browser, issuer):
    query = start(browser, "next=/")
    issuer.id_token_claims = {
        **issuer.claims(nonce=query["nonce"]),
        "exp": str(int(time.time()) + 300),
    }
    back = browser.get("/auth/callback", query_string={"code": "c", "state": query["state"]})
    assert back.status_code == 401
    assert browser.get("/api/v1/whoami").status_code == 401


# -- MCP session expiry ----------------------------------------------------------------------


def test_an_mcp_session_ends_on_delete_and_when_idle(make_app, sql_conn):
    app = make_app(mcp_session_idle_s=60.0)
    client = app.test_client()
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {}}
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}

    def start() -> dict:
        started = client.post("/mcp", json=init, headers=headers)
        version = started.get_json()["result"]["protocolVersion"]
        return {
            **headers,
            "Mcp-Session-Id": started.headers["Mcp-Session-Id"],
            "MCP-Protocol-Version": version,
        }

    first, second = start(), start()
    assert first["Mcp-Session-Id"] != second["Mcp-Session-Id"]  # one session per initialize
    assert client.post("/mcp", json=ping, headers=first).status_code == 200  # the control

    # DELETE ends that session only; a second DELETE finds nothing to end.
    assert client.delete("/mcp", headers=first).status_code == 204
    assert client.post("/mcp", json=ping, headers=first).status_code == 404
    assert client.delete("/mcp", headers=first).status_code == 404
    assert client.post("/mcp", json=ping, headers=second).status_code == 200

    # A session unused for longer than MCP_SESSION_IDLE_S has ended (its last request 61 s ago).
    sql_conn.execute(
        "UPDATE mcp_sessions SET last_seen = now() - interval '61 seconds' WHERE session_id = %s",
        (second["Mcp-Session-Id"],),
    )
    idle = client.post("/mcp", json=ping, headers=second)
    assert idle.status_code == 404
    assert "initialize again" in idle.get_json()["error"]["message"]
