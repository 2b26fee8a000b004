"""The two ways a caller is known (`AUTH_MODE`, blueprints/auth/gate.py chooses one): `dev`, one
local user; `oidc`, a bearer JWT or the browser session set by the sign-in, and the sign-in itself
(Authorization Code + PKCE through Authlib, the return address kept to this site's own pages)."""

import dataclasses
import logging
import re
import time
from urllib.parse import unquote_plus

import requests
from flask import Flask, current_app, redirect, render_template, request, session, url_for

from blueprints.auth.oidc import (
    DEFAULT_ANSWER_LIMIT,
    BearerVerifier,
    ConfigurationError,
    InvalidToken,
    RefusalLog,
    discover,
    identity_from_claims,
)
from engine.integrations.base import IntegrationError
from engine.integrations.upstream import bound
from engine.lifecycle import sessions
from engine.lifecycle.identity import Identity
from engine.operations.config import Settings

log = logging.getLogger(__name__)

DEV_IDENTITY = Identity(
    user="dev", workspace="default", display="dev user", workspaces=("default",)
)
SCOPES = "openid profile email"
#: A session signed in "in the future" by more than this is refused (clock skew between hosts).
SESSION_SKEW_S = 60
#: Where a sign-in may come back to: a path (and query) of this site, nothing else.
SAME_ORIGIN_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
MAX_NEXT_CHARS = 2048
#: The query parameters a page reads (blueprints/pages/project_page.py, app_page.py): the only
#: ones a return address keeps. Any other may be a credential (`access_token`, `id_token`,
#: `code`, a signed link's `token`), and a return address travels in the /login redirect's
#: Location, the session cookie and the issuer's logs.
RETURN_QUERY_PARAMS = frozenset({"task", "deploy", "template", "before", "cursor", "limit"})
#: Sign-ins started and not finished that the session cookie keeps (Authlib's state entries,
#: one per /login): a few tabs; older ones are dropped so the cookie stays small.
MAX_PENDING_SIGN_INS = 3


class Unauthenticated(Exception):
    """No acceptable identity on this request."""


class WorkspaceNotAllowed(Exception):
    """X-Workspace names a workspace the token does not list."""


def safe_next(target) -> str:
    """A same-origin path to return to after sign-in, keeping only the query parameters a page
    reads (RETURN_QUERY_PARAMS); anything else is the home page.

    Only the characters of a URL path and query (RFC 3986), starting with one "/" not followed
    by another or a backslash: browsers drop tabs and newlines and read "\\" as "/", so
    "/<tab>/evil.example" and "/\\evil.example" would mean another site, and a newline could
    not go into a Location header at all."""
    if (
        isinstance(target, str)
        and len(target) <= MAX_NEXT_CHARS
        and SAME_ORIGIN_PATH.fullmatch(target)
    ):
        path, _, query = target.partition("?")
        kept = [
            p for p in query.split("&") if unquote_plus(p.partition("=")[0]) in RETURN_QUERY_PARAMS
        ]
        return f"{path}?{'&'.join(kept)}" if kept else path
    return url_for("pages.index")


def forget_oldest_sign_ins(kept, *, keep: int) -> None:
    """Drop all but the `keep` newest pending sign-ins (Authlib's `_state_*` entries, each with
    its expiry) from the session."""
    pending = sorted(
        (key for key in kept if key.startswith("_state_")),
        key=lambda key: (kept[key] or {}).get("exp", 0) if isinstance(kept[key], dict) else 0,
    )
    for key in pending[: max(0, len(pending) - keep)]:
        kept.pop(key, None)


def _db():
    return current_app.extensions["engine"].db


class DevAuth:
    name = "dev"

    def init_app(self, app: Flask) -> None:
        pass

    def session_check(self):
        return None

    def sign_out(self) -> None:
        pass

    def identify(self) -> Identity:
        return DEV_IDENTITY

    def login(self):
        return redirect(safe_next(request.args.get("next")))

    def callback(self):
        return redirect(url_for("pages.index"))


class OidcAuth:
    """Bearer tokens and browser sign-in against one OpenID Connect issuer."""

    name = "oidc"

    def __init__(self, settings: Settings):
        for name in ("oidc_issuer", "oidc_client_id", "secret_key"):
            if not getattr(settings, name):
                raise ConfigurationError(f"AUTH_MODE=oidc needs {name.upper()}")
        self.settings = settings
        self.audience = settings.oidc_audience or settings.oidc_client_id
        self.answer_limit = dataclasses.replace(
            DEFAULT_ANSWER_LIMIT,
            max_bytes=settings.oidc_answer_max_bytes,
            max_s=settings.oidc_answer_max_s,
        )
        self.metadata = discover(settings.oidc_issuer, self.answer_limit)
        self.verifier = BearerVerifier(
            settings.oidc_issuer, self.metadata["jwks_uri"], self.audience, self.answer_limit
        )
        self.refusals = RefusalLog()
        self.client = None

    def init_app(self, app: Flask) -> None:
        from authlib.integrations.flask_client import OAuth
        from authlib.integrations.requests_client import OAuth2Session

        metadata = {
            key: self.metadata[key]
            for key in (
                "issuer",
                "authorization_endpoint",
                "token_endpoint",
                "jwks_uri",
                "id_token_signing_alg_values_supported",
                "token_endpoint_auth_methods_supported",
                "code_challenge_methods_supported",
            )
            if key in self.metadata
        }
        # The discovery document checked by discover(); Authlib is not told to fetch its own.
        self.client = OAuth(app).register(
            "issuer",
            client_id=self.settings.oidc_client_id,
            client_secret=self.settings.oidc_client_secret,
            client_kwargs={"scope": SCOPES, "code_challenge_method": "S256"},
            **metadata,
        )
        # Authlib's token and key-set requests read their answers through the same bounds.
        self.client.client_cls = lambda **kwargs: bound(OAuth2Session(**kwargs), self.answer_limit)

    def identify(self) -> Identity:
        header = request.headers.get("Authorization")
        if header is not None:
            return self.bearer_identity(header)
        return self.session_identity()

    def bearer_identity(self, header: str) -> Identity:
        scheme, _, token = header.partition(" ")
        try:
            if scheme.lower() != "bearer" or not token.strip():
                raise InvalidToken("authorization scheme", repr(scheme[:20]))
            identity = identity_from_claims(
                self.verifier.claims(token.strip()),
                self.settings.tenant_claim,
                self.settings.user_claim,
            )
        except InvalidToken as exc:
            self.refusals.refused(exc.kind, str(exc))
            raise Unauthenticated() from None
        wanted = request.headers.get("X-Workspace")
        if wanted:
            if wanted not in identity.workspaces:
                raise WorkspaceNotAllowed()
            identity = dataclasses.replace(identity, workspace=wanted)
        return identity

    def session_identity(self) -> Identity:
        user, signed_in_at, session_id = session.get("uid"), session.get("at"), session.get("sid")
        if not (user and isinstance(signed_in_at, (int, float)) and isinstance(session_id, str)):
            raise Unauthenticated()  # (a cookie from before session ids: sign in again)
        age = time.time() - signed_in_at
        if age > self.settings.session_lifetime_s or age < -SESSION_SKEW_S:
            session.clear()
            raise Unauthenticated()
        # Signed out on any process of any host (a copied cookie included): one key probe.
        if sessions.is_revoked(_db(), session_id):
            session.clear()
            raise Unauthenticated()
        workspaces = tuple(session.get("wss") or ())
        if session.get("ws") not in workspaces:
            raise Unauthenticated()
        return Identity(
            user=user,
            workspace=session["ws"],
            display=session.get("name") or user,
            workspaces=workspaces,
        )

    def session_check(self):
        """For a long-lived stream of this request: a function telling whether its browser
        session is still signed in (None for a bearer token: nothing to re-check)."""
        if "Authorization" in request.headers:
            return None
        session_id, signed_in_at = session.get("sid"), session.get("at")
        lifetime_s, db = self.settings.session_lifetime_s, _db()
        return lambda: (
            time.time() - signed_in_at <= lifetime_s and not sessions.is_revoked(db, session_id)
        )

    def sign_out(self) -> None:
        """End this browser session on the server, so any copy of its cookie is refused too."""
        session_id, signed_in_at = session.get("sid"), session.get("at")
        if isinstance(session_id, str) and isinstance(signed_in_at, (int, float)):
            sessions.revoke(
                _db(), session_id, expires_at=signed_in_at + self.settings.session_lifetime_s
            )

    def login(self):
        forget_oldest_sign_ins(session, keep=MAX_PENDING_SIGN_INS - 1)
        session["next"] = safe_next(request.args.get("next"))
        return self.client.authorize_redirect(url_for("auth.callback", _external=True))

    def callback(self):
        from authlib.integrations.base_client import OAuthError
        from joserfc.errors import JoseError

        try:
            token = self.client.authorize_access_token(leeway=60)
            if not token.get("userinfo"):
                raise InvalidToken("no ID token in the token response")
            identity = identity_from_claims(
                dict(token["userinfo"]), self.settings.tenant_claim, self.settings.user_claim
            )
        except (
            OAuthError,
            JoseError,
            InvalidToken,
            requests.RequestException,
            IntegrationError,  # the issuer's answer was too large or unreadable
        ) as exc:
            log.warning("sign-in refused: %s: %.200s", type(exc).__name__, exc)
            return render_template("signed_out.html", failed=True), 401
        back = safe_next(session.get("next"))
        session.clear()  # a fresh session: nothing from before sign-in carries over
        session.update(
            uid=identity.user,
            name=identity.display,
            wss=list(identity.workspaces),
            ws=identity.workspace,
            at=int(time.time()),
            sid=sessions.new_session_id(),
        )
        return redirect(back)
