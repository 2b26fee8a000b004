"""AUTH_MODE=oidc, API side: bearer JWTs verified against a test issuer's real JWKS over HTTP.

Every refused token gets the very same 401 (body and WWW-Authenticate); each case is checked
against a positive control signed by the same issuer.
"""

import base64
import hashlib
import hmac
import json
import logging
import subprocess
import sys
import time

import jwt
import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import padding

from blueprints.auth.oidc import BearerVerifier, ConfigurationError, InvalidToken
from tests.helpers import IMAGE_SOURCE, ROOT, oidc_settings, wait_for
from tests.issuer import AUDIENCE, TokenIssuer, new_key, public_jwk

UNAUTHENTICATED = {"code": "unauthenticated", "message": "sign in, or send a valid bearer token"}
CHALLENGE = 'Bearer error="invalid_token"'


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def hand_signed(header: dict, claims: dict, sign) -> str:
    """A token built by hand (attacks PyJWT itself refuses to produce)."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(claims).encode())}"
    return f"{signing_input}.{b64(sign(signing_input.encode()))}"


@pytest.fixture
def second_issuer():
    running = TokenIssuer()
    yield running
    running.stop()


@pytest.fixture
def oidc_client(make_app, issuer):
    return make_app(**oidc_settings(issuer.url)).test_client()


def attacks(issuer: TokenIssuer, other: TokenIssuer) -> dict[str, str]:
    """Every token the server must refuse, by name."""
    now = int(time.time())
    claims = issuer.claims()
    rsa_public_pem = (
        issuer.keys["rs256-1"][1]
        .public_key()
        .public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    attacker_key = other.keys["rs256-1"][1]
    return {
        "alg none": hand_signed(
            {"alg": "none", "kid": "rs256-1", "typ": "JWT"}, claims, lambda _: b""
        ),
        "HS256 signed with the public key": hand_signed(
            {"alg": "HS256", "kid": "rs256-1", "typ": "JWT"},
            claims,
            lambda data: hmac.new(rsa_public_pem, data, hashlib.sha256).digest(),
        ),
        "unknown kid": issuer.token(kid="rs256-2", key=issuer.keys["rs256-1"][1], alg="RS256"),
        "no kid": hand_signed({"alg": "RS256"}, claims, lambda _: b"x" * 256),
        "kid path traversal": issuer.token(
            kid="../../../../dev/null", key=issuer.keys["rs256-1"][1], alg="RS256"
        ),
        "kid with a suffix": issuer.token(
            kid="rs256-1/../rs256-1", key=issuer.keys["rs256-1"][1], alg="RS256"
        ),
        "kid not a string": hand_signed(
            {"alg": "RS256", "kid": ["rs256-1"]},
            claims,
            lambda data: issuer.keys["rs256-1"][1].sign(data, padding.PKCS1v15(), hashes.SHA256()),
        ),
        "kid of another key family (RS256 on the EC key)": issuer.token(
            kid="es256-1", key=issuer.keys["rs256-1"][1], alg="RS256"
        ),
        "wrong iss": issuer.token(iss="https://issuer.example"),
        "issuer prefix": issuer.token(iss=issuer.url + ".evil"),
        "issuer with a trailing slash": issuer.token(iss=issuer.url + "/"),
        "missing iss": issuer.token(claims={k: v for k, v in claims.items() if k != "iss"}),
        "wrong aud": issuer.token(aud="another-service"),
        "missing aud": issuer.token(claims={k: v for k, v in claims.items() if k != "aud"}),
        "expired beyond the leeway": issuer.token(exp=now - 61),
        "missing exp": issuer.token(claims={k: v for k, v in claims.items() if k != "exp"}),
        "nbf in the future": issuer.token(nbf=now + 120),
        "jku pointing elsewhere": jwt.encode(
            claims,
            attacker_key,
            algorithm="RS256",
            headers={"kid": "rs256-1", "jku": other.url + "/jwks"},
        ),
        "x5u pointing elsewhere": jwt.encode(
            claims,
            attacker_key,
            algorithm="RS256",
            headers={"kid": "rs256-1", "x5u": other.url + "/cert.pem"},
        ),
        "embedded jwk": jwt.encode(
            claims,
            attacker_key,
            algorithm="RS256",
            headers={"kid": "rs256-1", "jwk": public_jwk(attacker_key, "rs256-1")},
        ),
        "second issuer's keys": jwt.encode(
            other.claims(iss=issuer.url),
            attacker_key,
            algorithm="RS256",
            headers={"kid": "rs256-1"},
        ),
        "second issuer's token": other.token(),
        "signature of another token": issuer.token().rsplit(".", 1)[0]
        + "."
        + issuer.token(sub="mallory").rsplit(".", 1)[1],
        "no workspace claim": issuer.token(namespace=[]),
        "workspace name that is not a name": issuer.token(namespace=["../etc"]),
        "16 KiB token": issuer.token(padding="x" * 16 * 1024),
        "garbage": "not.a.jwt",
    }


def test_a_valid_token_of_each_algorithm_is_accepted(oidc_client, issuer):
    for kid in ("rs256-1", "es256-1", "eddsa-1"):
        response = oidc_client.get("/api/v1/whoami", headers=issuer.bearer(kid=kid))
        assert response.status_code == 200, (kid, response.get_json())
        assert response.get_json() == {
            "user": "alice",
            "display": "alice",
            "workspace": "team-a",
            "workspaces": ["team-a"],
        }
    # aud may be a list that contains ours; exp within the 60 s leeway still counts
    assert (
        oidc_client.get(
            "/api/v1/whoami",
            headers=issuer.bearer(aud=["other", AUDIENCE], exp=int(time.time()) - 30),
        ).status_code
        == 200
    )


def test_every_attack_gets_the_same_401(oidc_client, issuer, second_issuer):
    assert oidc_client.get("/api/v1/tasks", headers=issuer.bearer()).status_code == 200
    results = {}
    for name, token in attacks(issuer, second_issuer).items():
        response = oidc_client.get("/api/v1/tasks", headers={"Authorization": f"Bearer {token}"})
        results[name] = (
            response.status_code,
            response.get_json(),
            response.headers.get("WWW-Authenticate"),
        )
    wrong = {name: got for name, got in results.items() if got != (401, UNAUTHENTICATED, CHALLENGE)}
    assert not wrong, wrong
    assert second_issuer.jwks_fetches == 0, "a jku/x5u header was followed"


def test_other_schemes_and_no_token(oidc_client, issuer):
    basic = oidc_client.get("/api/v1/tasks", headers={"Authorization": "Basic YWxpY2U6eA=="})
    assert (basic.status_code, basic.get_json()) == (401, UNAUTHENTICATED)
    anonymous = oidc_client.get("/api/v1/tasks")
    assert (anonymous.status_code, anonymous.get_json()) == (401, UNAUTHENTICATED)
    # identity headers a client might send are never read
    forged = oidc_client.get(
        "/api/v1/tasks",
        headers={
            "X-User-Id": "alice",
            "X-Forwarded-User": "alice",
            "X-Namespace": "team-a",
            "X-Workspace": "team-a",
            "X-Auth-Request-User": "alice",
        },
    )
    assert forged.status_code == 401


def test_an_unknown_kid_refreshes_the_key_set_at_most_once_a_minute(oidc_client, issuer):
    assert oidc_client.get("/api/v1/tasks", headers=issuer.bearer()).status_code == 200
    fetched = issuer.jwks_fetches
    assert fetched == 1
    stolen = issuer.keys["rs256-1"][1]
    for attempt in range(5):
        token = issuer.token(kid=f"forged-{attempt}", key=stolen, alg="RS256")
        response = oidc_client.get("/api/v1/tasks", headers={"Authorization": f"Bearer {token}"})
        assert response.status_code == 401
    assert issuer.jwks_fetches == fetched  # within the minute after the last fetch: none


def test_refusals_are_logged_throttled_without_the_token(oidc_client, issuer, caplog):
    caplog.set_level(logging.WARNING, logger="blueprints.auth.oidc")
    token = issuer.token(aud="another-service")
    for _ in range(5):
        assert (
            oidc_client.get(
                "/api/v1/tasks", headers={"Authorization": f"Bearer {token}"}
            ).status_code
            == 401
        )
    refused = [r.getMessage() for r in caplog.records if "bearer token refused" in r.getMessage()]
    assert len(refused) == 1, refused
    assert "InvalidAudienceError" in refused[0]
    assert token not in caplog.text and token.split(".")[2] not in caplog.text


def test_x_workspace_chooses_among_the_tokens_workspaces_never_adds_one(oidc_client, issuer):
    both = issuer.bearer(workspaces=("team-a", "team-b"))
    created = oidc_client.post(
        "/api/v1/tasks",
        headers={**both, "X-Workspace": "team-b"},
        json={"projectId": "demo", "source": IMAGE_SOURCE},
    )
    assert created.status_code == 201, created.get_json()
    task_id = created.get_json()["id"]
    assert (
        oidc_client.get(
            f"/api/v1/tasks/{task_id}", headers={**both, "X-Workspace": "team-b"}
        ).status_code
        == 200
    )
    assert oidc_client.get(f"/api/v1/tasks/{task_id}", headers=both).status_code == 404  # team-a
    added = oidc_client.get("/api/v1/tasks", headers={**both, "X-Workspace": "team-c"})
    assert (added.status_code, added.get_json()["code"]) == (403, "workspace_not_allowed")
    assert (
        oidc_client.get(
            f"/api/v1/tasks/{task_id}",
            headers={**issuer.bearer(workspaces=("team-a",)), "X-Namespace": "team-b"},
        ).status_code
        == 404
    )


def test_a_single_workspace_string_claim_works(oidc_client, issuer):
    response = oidc_client.get(
        "/api/v1/whoami",
        headers=issuer.bearer(
            claims={**issuer.claims(), "namespace": "solo", "preferred_username": "Alice A."}
        ),
    )
    assert response.get_json() == {
        "user": "alice",
        "display": "Alice A.",
        "workspace": "solo",
        "workspaces": ["solo"],
    }


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"oidc_issuer": None}, "AUTH_MODE=oidc needs OIDC_ISSUER"),
        ({"oidc_client_id": None}, "AUTH_MODE=oidc needs OIDC_CLIENT_ID"),
        ({"secret_key": None}, "AUTH_MODE=oidc needs SECRET_KEY"),
        ({"oidc_issuer": "http://issuer.example"}, "must be an https URL"),
        ({"auth_mode": "header"}, "AUTH_MODE must be one of"),
    ],
)
def test_an_unsafe_or_incomplete_oidc_configuration_stops_boot(make_app, issuer, settings, message):
    with pytest.raises(ConfigurationError, match=message):
        make_app(**{**oidc_settings(issuer.url), **settings})


def test_discovery_must_name_exactly_the_configured_issuer(make_app, issuer):
    with pytest.raises(ConfigurationError, match="names issuer"):
        make_app(**oidc_settings(issuer.url.replace("127.0.0.1", "localhost")))
    assert make_app(**oidc_settings(issuer.url))  # the control: the exact issuer boots


def test_dev_mode_refuses_a_network_host_unless_allowed(make_app):
    with pytest.raises(ConfigurationError, match="HOST=0.0.0.0 needs AUTH_MODE=oidc"):
        make_app(host="0.0.0.0")
    assert make_app(host="0.0.0.0", dev_auth_allow_network=True)
    assert make_app(host="::1")


def test_a_refused_configuration_is_one_line_from_the_server(tmp_path):
    env = {"PATH": "/usr/bin:/bin", "HOST": "0.0.0.0", "DATA_DIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "app.py"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "configuration error: AUTH_MODE=dev gives everyone one shared user, so it serves "
        "loopback only: HOST=0.0.0.0 needs AUTH_MODE=oidc (or DEV_AUTH_ALLOW_NETWORK=true)"
    ]


def test_a_rotated_key_is_picked_up_by_one_refresh_once_the_cooldown_allows(issuer):
    """Directly on the verifier: within the cooldown a new kid is refused without a fetch; once
    the cooldown has passed (set to zero here rather than waiting a minute) one fetch finds it."""
    verifier = BearerVerifier(issuer.url, issuer.url + "/jwks", AUDIENCE)
    assert verifier.claims(issuer.token())["sub"] == "alice"
    assert issuer.jwks_fetches == 1
    issuer.keys["rs256-2"] = ("RS256", new_key("RS256"))  # the issuer rotates
    rotated = issuer.token(kid="rs256-2")
    with pytest.raises(InvalidToken):
        verifier.claims(rotated)
    assert issuer.jwks_fetches == 1
    verifier.keys.cooldown_duration = 0
    assert verifier.claims(rotated)["sub"] == "alice"
    assert issuer.jwks_fetches == 2


def test_probes_and_the_metrics_scrape_are_outside_the_gate(make_app, issuer):
    client = make_app(**oidc_settings(issuer.url), metrics_token="scrape-token-1234").test_client()
    # Positive control: the same app refuses an anonymous API call.
    assert client.get("/api/v1/tasks").status_code == 401
    assert client.get("/healthz").status_code == 200
    # Ready once the listener has connected (it connects in the background after boot).
    wait_for(lambda: client.get("/readyz").status_code == 200, message="/readyz answering 200")
    # The scrape answers to its own token, not to a sign-in or a bearer JWT.
    assert (
        client.get("/metrics", headers={"Authorization": "Bearer scrape-token-1234"}).status_code
        == 200
    )
    assert client.get("/metrics").status_code == 401
    assert client.get("/metrics", headers=issuer.bearer()).status_code == 401
