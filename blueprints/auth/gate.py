"""Who is asking: the one identity seam of every route.

For every blueprint (and any new endpoint):
- `current_identity()` is the caller: an Identity whose `workspace` is the workspace every query
  is scoped by. Call it; never read identity from anywhere else. Client-supplied identity headers
  (X-User-Id, X-Forwarded-User, X-Namespace, ...) are never read.
- `init_app()` installs a gate before EVERY request, so a new route is protected without doing
  anything; the few public ones are PUBLIC_ENDPOINTS. When the gate refuses, the view never runs:
  /api/... and /mcp (and any request that sent a bearer token) get 401 JSON
  {"code": "unauthenticated"}
  with WWW-Authenticate; htmx requests, event streams and websocket handshakes get a bare 401
  (the page shows "signed out" with a link); a page is redirected to /login.

Modes (`AUTH_MODE`):
- `dev`: one local user `dev` in workspace `default`, loopback only unless
  DEV_AUTH_ALLOW_NETWORK=true.
- `oidc`: a bearer JWT (blueprints/oidc.py; a bad one is refused, never a fall back to the
  cookie) or the browser session set by the sign-in (Authorization Code + PKCE, state and nonce,
  ID token verified, all by Authlib). The session holds only the user, their workspaces from the
  signed claims, the chosen workspace and when they signed in (absolute lifetime), besides the
  CSRF token. A bearer caller picks among the token's workspaces with `X-Workspace`; a browser
  with the top bar's picker.
"""

import dataclasses
import logging
import re
import time
from collections.abc import Callable
from urllib.parse import unquote_plus

import gevent
import requests
from flask import (
    Blueprint,
    Flask,
    current_app,
    g,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)

from blueprints.auth import csrf
from blueprints.auth.oidc import (
    DEFAULT_ANSWER_LIMIT,
    BearerVerifier,
    ConfigurationError,
    InvalidToken,
    RefusalLog,
    discover,
    identity_from_claims,
    is_loopback_host,
)
from engine.integrations.base import IntegrationError
from engine.integrations.upstream import bound
from engine.lifecycle import sessions
from engine.lifecycle.identity import Identity
from engine.operations.config import Settings

log = logging.getLogger(__name__)

AUTH_MODES = {"dev", "oidc"}
DEV_IDENTITY = Identity(
    user="dev", workspace="default", display="dev user", workspaces=("default",)
)
#: Reachable without a sign-in: the sign-in itself, sign-out (a session that just expired can
#: still end cleanly; it stays CSRF-checked), the probes, the metrics scrape (its own token).
PUBLIC_ENDPOINTS = {
    "auth.login",
    "auth.callback",
    "auth.logout",
    "auth.signed_out",
    "healthz",
    "readyz",
    "metrics",
    "static",
}
#: Paths of machine clients: refused with JSON and WWW-Authenticate, never a sign-in page.
MACHINE_PATHS = ("/api/", "/mcp")
SCOPES = "openid profile email"
#: A session signed in "in the future" by more than this is refused (clock skew between hosts).
SESSION_SKEW_S = 60
#: Where a sign-in may come back to: a path (and query) of this site, nothing else.
SAME_ORIGIN_PATH = re.compile(r"/(?![/\\])[A-Za-z0-9\-._~!$&'()*+,;=:@/?%]*")
MAX_NEXT_CHARS = 2048
#: The query parameters a page reads (blueprints/pages.py, app_pages.py): the only ones a return
#: address keeps. Any other may be a credential (`access_token`, `id_token`, `code`, a signed
#: link's `token`), and a return address travels in the /login redirect's Location, the session
#: cookie and the issuer's logs.
RETURN_QUERY_PARAMS = frozenset({"task", "deploy", "template", "before", "cursor", "limit"})
#: Sign-ins started and not finished that the session cookie keeps (Authlib's state entries,
#: one per /login): a few tabs; older ones are dropped so the cookie stays small.
MAX_PENDING_SIGN_INS = 3

bp = Blueprint("auth", __name__)
csrf.protect(bp)


class Unauthenticated(Exception):
    """No acceptable identity on this request."""


class WorkspaceNotAllowed(Exception):
    """X-Workspace names a workspace the token does not list."""


def current_identity() -> Identity:
    """The caller's identity (set by the gate before the view runs)."""
    if "identity" not in g:
        # Only reachable outside a gated request (a test calling a view helper directly).
        g.identity = current_app.extensions["auth"].identify()
    return g.identity


def configure(settings: Settings) -> "DevAuth | OidcAuth":
    """The auth mode the settings describe; ConfigurationError (one line) when unsafe or
    incomplete."""
    if settings.auth_mode == "dev":
        if not is_loopback_host(settings.host) and not settings.dev_auth_allow_network:
            raise ConfigurationError(
                f"AUTH_MODE=dev gives everyone one shared user, so it serves loopback only: HOST="
                f"{settings.host} needs AUTH_MODE=oidc (or DEV_AUTH_ALLOW_NETWORK=true)"
            )
        return DevAuth()
    if settings.auth_mode == "oidc":
        return OidcAuth(settings)
    raise ConfigurationError(
        f"AUTH_MODE must be one of {sorted(AUTH_MODES)}, not {settings.auth_mode!r}"
    )


def init_app(app: Flask, mode: "DevAuth | OidcAuth") -> None:
    """Gate every request, add the sign-in routes, expose the identity to templates."""
    app.extensions["auth"] = mode
    mode.init_app(app)
    app.before_request(gate)
    app.register_blueprint(bp)
    app.jinja_env.globals["signed_in"] = lambda: g.get("identity")
    app.jinja_env.globals["auth_mode"] = mode.name


def gate():
    """Refuse a request without an acceptable identity before its view runs."""
    if request.endpoint in PUBLIC_ENDPOINTS:
        return None
    try:
        g.identity = current_app.extensions["auth"].identify()
    except Unauthenticated:
        return refusal()
    except WorkspaceNotAllowed:
        return jsonify(
            code="workspace_not_allowed",
            message="X-Workspace names a workspace your token does not list",
        ), 403
    return None


def refusal():
    """The 401 (or sign-in redirect) this kind of request gets."""
    # Machine clients (the API, the MCP endpoint) get the JSON 401 and its bearer challenge.
    if request.path.startswith(MACHINE_PATHS) or "Authorization" in request.headers:
        response = jsonify(code="unauthenticated", message="sign in, or send a valid bearer token")
        response.status_code = 401
        response.headers["WWW-Authenticate"] = 'Bearer error="invalid_token"'
        return response
    if (
        request.method != "GET"
        or request.headers.get("HX-Request")
        or request.headers.get("Upgrade", "").lower() == "websocket"
        or "text/event-stream" in request.headers.get("Accept", "")
    ):
        return render_template("signed_out.html", fragment=True), 401
    wanted = request.full_path if request.query_string else request.path
    return redirect(url_for("auth.login", next=safe_next(wanted)))


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


def watch_session(on_end: Callable[[], None]) -> Callable[[], None]:
    """Keep a long-lived stream (SSE, websocket) of this request to its sign-in: every
    SESSION_RECHECK_S, re-check the browser session and call `on_end()` once it was signed out
    or has expired (or cannot be checked). Call inside the request; returns the function that
    stops watching, for the stream's own end. Bearer tokens and dev mode: nothing to watch."""
    alive = current_app.extensions["auth"].session_check()
    if alive is None:
        return lambda: None
    interval_s = current_app.extensions["engine"].settings.session_recheck_s

    def watch():
        while True:
            gevent.sleep(interval_s)
            try:
                if alive():
                    continue
            except Exception as exc:  # the database unreachable: fail closed, the viewer retries
                log.info("a stream's session could not be re-checked (%s)", type(exc).__name__)
            on_end()
            return

    watcher = gevent.spawn(watch)
    return lambda: watcher.kill(block=False)


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


@bp.get("/login")
def login():
    """Start the sign-in (oidc: off to the issuer; dev: straight back)."""
    return current_app.extensions["auth"].login()


@bp.get("/auth/callback")
def callback():
    """The issuer's answer: verify it, then keep the identity in the session."""
    return current_app.extensions["auth"].callback()


@bp.post("/logout")
def logout():
    """End the sign-in everywhere (CSRF-checked, so another site cannot sign a user out)."""
    current_app.extensions["auth"].sign_out()
    session.clear()
    return redirect(url_for("auth.signed_out"), code=303)


@bp.get("/signed-out")
def signed_out():
    return render_template("signed_out.html")


@bp.post("/workspace")
def choose_workspace():
    """Switch the browser's workspace to another one its signed claims list."""
    wanted = request.form.get("workspace", "")
    if current_app.extensions["auth"].name != "oidc" or wanted not in current_identity().workspaces:
        return render_template(
            "error.html",
            code="workspace_not_allowed",
            message="That workspace is not one of yours.",
        ), 403
    session["ws"] = wanted
    return redirect(url_for("pages.index"), code=303)


@bp.get("/api/v1/whoami")
def whoami():
    """The caller's identity (the page also asks it to tell "signed out" from "offline")."""
    identity = current_identity()
    return jsonify(
        user=identity.user,
        display=identity.display,
        workspace=identity.workspace,
        workspaces=list(identity.workspaces),
    )
