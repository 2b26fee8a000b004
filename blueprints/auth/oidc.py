"""OpenID Connect for `AUTH_MODE=oidc`: the issuer's discovery, bearer-token verification, and
signed claims turned into an Identity.

All JOSE work is PyJWT's (PyJWKClient holds the issuer's key set); the browser login is Authlib's
(blueprints/auth/modes.py). The rules, each one fail-closed:
- the issuer is configured, https (plain http only for a loopback host), and its discovery
  document names exactly that issuer; its `jwks_uri` follows the same scheme rule;
- a bearer token is at most 8 KiB, names a `kid` that is in the issuer's set (never "try every
  key"; an unknown kid refreshes the set at most once a minute), is signed with RS256, ES256 or
  EdDSA (the key's own algorithm), carries exactly our `iss`, an `aud` containing our audience,
  and `exp` (with `nbf`, 60 s leeway). `jku`, `x5u` and embedded `jwk` headers are never read;
- the user and the workspaces come only from signed claims (USER_CLAIM, TENANT_CLAIM).

Every answer of the issuer (discovery, the key set, and Authlib's token and key-set requests in
blueprints/auth/modes.py) is read through engine/integrations/upstream.py: at most
OIDC_ANSWER_MAX_BYTES after decompression, within OIDC_ANSWER_MAX_S.
"""

import ipaddress
import logging
import math
import re
import time
from collections import OrderedDict
from urllib.parse import urlsplit

import jwt
import requests

from engine.integrations.base import IntegrationError
from engine.integrations.upstream import AnswerLimit, http_session
from engine.lifecycle.identity import Identity
from engine.operations.config import ConfigurationError  # one boot error for every setting
from engine.trust.untrusted import load_json

log = logging.getLogger(__name__)

#: Asymmetric algorithms only: a shared-secret (HS*) or `none` token is never accepted.
ALGORITHMS = ("RS256", "ES256", "EdDSA")
LEEWAY_S = 60
MAX_TOKEN_BYTES = 8 * 1024
#: An unknown `kid` refreshes the key set at most this often (rotation without a restart,
#: without letting forged kids hammer the issuer).
JWKS_REFRESH_COOLDOWN_S = 60.0
#: The key set is re-read this often even when every kid is known.
JWKS_LIFESPAN_S = 300.0
HTTP_TIMEOUT_S = 10.0
#: The caps on one answer of the issuer (OIDC_ANSWER_MAX_BYTES, OIDC_ANSWER_MAX_S).
DEFAULT_ANSWER_LIMIT = AnswerLimit(
    256 * 1024, HTTP_TIMEOUT_S, "OIDC_ANSWER_MAX_BYTES", "OIDC_ANSWER_MAX_S"
)
#: Workspace names a claim may carry: they appear in URLs, rows and failure-streak subjects.
WORKSPACE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")
#: Reasons for a refused token are logged at most once per interval each (attackers can send
#: many), and at most REFUSAL_LOG_MAX_LINES lines per interval in all.
REFUSAL_LOG_INTERVAL_S = 60.0
REFUSAL_LOG_MAX_LINES = 10
#: Reasons remembered for the throttle (least recently seen forgotten first).
REFUSAL_LOG_MAX_REASONS = 64
#: Registered claims that are NumericDate values (RFC 7519 2): numbers, never strings.
NUMERIC_DATE_CLAIMS = ("exp", "nbf", "iat")


class InvalidToken(Exception):
    """A bearer token we refuse. `kind` is one of a fixed set of reasons (never client text);
    the message is for the log, never for the client."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind


def is_loopback_host(host: str | None) -> bool:
    """`localhost` or a loopback IP address."""
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def require_safe_url(name: str, url: str) -> None:
    """https, or http to a loopback host (a local test issuer); anything else stops boot."""
    parts = urlsplit(url)
    if parts.scheme == "https" and parts.hostname:
        return
    if parts.scheme == "http" and is_loopback_host(parts.hostname):
        return
    raise ConfigurationError(f"{name} must be an https URL (http only for loopback): {url!r}")


def discover(issuer: str, limit: AnswerLimit = DEFAULT_ANSWER_LIMIT) -> dict:
    """The issuer's discovery document, checked to name exactly this issuer and a safe jwks_uri."""
    require_safe_url("OIDC_ISSUER", issuer)
    url = issuer.rstrip("/") + "/.well-known/openid-configuration"
    try:
        with http_session(limit) as http:
            response = http.get(url, timeout=HTTP_TIMEOUT_S, allow_redirects=False)
        response.raise_for_status()
        metadata = load_json(response.content)
    except (requests.RequestException, IntegrationError, ValueError) as exc:
        raise ConfigurationError(f"OIDC discovery failed at {url}: {exc}") from None
    named = metadata.get("issuer") if isinstance(metadata, dict) else None
    if named != issuer:
        raise ConfigurationError(
            f"OIDC discovery at {url} names issuer {named!r}, not OIDC_ISSUER {issuer!r}"
        )
    for key in ("jwks_uri", "authorization_endpoint", "token_endpoint"):
        if not isinstance(metadata.get(key), str):
            raise ConfigurationError(f"OIDC discovery at {url} has no {key}")
        require_safe_url(key, metadata[key])
    return metadata


class RefusalLog:
    """Logs why tokens are refused: each reason at most once per interval, at most `max_lines`
    lines per interval in all, with the count of refusals left unlogged. Its memory is bounded
    (`max_reasons` reasons, least recently seen forgotten first)."""

    def __init__(
        self,
        interval_s: float = REFUSAL_LOG_INTERVAL_S,
        *,
        max_lines: int = REFUSAL_LOG_MAX_LINES,
        max_reasons: int = REFUSAL_LOG_MAX_REASONS,
    ):
        self.interval_s = interval_s
        self.max_lines = max_lines
        self.max_reasons = max_reasons
        #: reason -> when it was last logged
        self.last: OrderedDict[str, float] = OrderedDict()
        #: refusals not logged since the last line
        self.suppressed = 0
        self._window_start = -math.inf
        self._lines_in_window = 0

    def refused(self, kind: str, detail: str) -> None:
        now = time.monotonic()
        if now - self._window_start >= self.interval_s:
            self._window_start, self._lines_in_window = now, 0
        logged_at = self.last.get(kind)
        if logged_at is not None:
            self.last.move_to_end(kind)
        if (
            logged_at is not None and now - logged_at < self.interval_s
        ) or self._lines_in_window >= self.max_lines:
            self.suppressed += 1
            return
        self.last[kind] = now
        self.last.move_to_end(kind)
        while len(self.last) > self.max_reasons:
            self.last.popitem(last=False)
        self._lines_in_window += 1
        more, self.suppressed = self.suppressed, 0
        log.warning(
            "bearer token refused: %s: %.200r%s",
            kind,
            detail,
            f" ({more} more refusals not logged)" if more else "",
        )


class KeySetClient(jwt.PyJWKClient):
    """PyJWT's key-set client, fetching through engine/integrations/upstream.py: its own fetch
    reads the whole answer, whatever its size."""

    def __init__(self, uri: str, limit: AnswerLimit, **kwargs):
        super().__init__(uri, **kwargs)
        self._http = http_session(limit)

    def fetch_data(self):
        """The key set (cached, and the refresh cooldown started), as PyJWKClient.fetch_data."""
        try:
            response = self._http.get(self.uri, timeout=self.timeout, allow_redirects=False)
            response.raise_for_status()
            jwk_set = self._as_jwk_set_payload(load_json(response.content))
        except (requests.RequestException, IntegrationError, ValueError) as exc:
            raise jwt.PyJWKClientConnectionError(f"fetching the key set failed: {exc}") from None
        if self.jwk_set_cache is not None:
            self.jwk_set_cache.put(jwk_set)
        self._last_successful_fetch = time.monotonic()
        return jwk_set


class BearerVerifier:
    """Verifies bearer JWTs against one issuer's key set; returns their claims."""

    def __init__(
        self, issuer: str, jwks_uri: str, audience: str, limit: AnswerLimit = DEFAULT_ANSWER_LIMIT
    ):
        self.issuer, self.audience = issuer, audience
        self.keys = KeySetClient(
            jwks_uri,
            limit,
            lifespan=JWKS_LIFESPAN_S,
            timeout=HTTP_TIMEOUT_S,
            cooldown_duration=JWKS_REFRESH_COOLDOWN_S,
        )

    def claims(self, token: str) -> dict:
        """The verified claims of `token`; InvalidToken (with the reason) otherwise."""
        if len(token) > MAX_TOKEN_BYTES:
            raise InvalidToken("oversized", f"{len(token)} bytes")
        try:
            header = jwt.get_unverified_header(token)
        except jwt.PyJWTError as exc:
            raise InvalidToken("malformed", str(exc)) from None
        kid = header.get("kid")
        if not isinstance(kid, str) or not kid:
            raise InvalidToken("no kid")
        if header.get("alg") not in ALGORITHMS:
            raise InvalidToken("algorithm", repr(header.get("alg")))
        try:
            # Only the key the kid names; PyJWK binds the algorithm to that key, so the header's
            # alg cannot switch an RSA key to another family.
            key = self.keys.get_signing_key(kid)
        except jwt.PyJWTError as exc:  # the client's errors, and a key set that is not one
            raise InvalidToken("key", str(exc)) from None
        try:
            return jwt.decode(
                token,
                key=key,
                algorithms=list(ALGORITHMS),
                audience=self.audience,
                issuer=self.issuer,
                leeway=LEEWAY_S,
                options={"require": ["exp", "iss", "aud"]},
            )
        except jwt.PyJWTError as exc:
            raise InvalidToken(type(exc).__name__, str(exc)) from None
        except (ValueError, TypeError, OverflowError) as exc:  # e.g. an `exp` of Infinity
            raise InvalidToken("claims", type(exc).__name__) from None


def identity_from_claims(claims: dict, tenant_claim: str, user_claim: str) -> Identity:
    """The Identity signed claims describe, in their first workspace; InvalidToken without a user
    or a workspace (a token that states no workspace is refused, never given a default), or with
    a date claim that is not a number (bearer tokens and ID tokens alike)."""
    for name in NUMERIC_DATE_CLAIMS:
        value = claims.get(name)
        if name in claims and (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
        ):
            raise InvalidToken("date claim not a number", name)
    user = claims.get(user_claim)
    if not isinstance(user, str) or not user.strip():
        raise InvalidToken("no user claim", user_claim)
    raw = claims.get(tenant_claim)
    names = [raw] if isinstance(raw, str) else raw if isinstance(raw, list) else []
    workspaces = tuple(
        dict.fromkeys(
            name for name in names if isinstance(name, str) and WORKSPACE_NAME.fullmatch(name)
        )
    )
    if not workspaces:
        raise InvalidToken("no usable workspace", tenant_claim)
    display = next(
        (
            claims[key]
            for key in ("preferred_username", "email")
            if isinstance(claims.get(key), str) and claims[key].strip()
        ),
        user,
    )
    return Identity(user=user, workspace=workspaces[0], display=display, workspaces=workspaces)
