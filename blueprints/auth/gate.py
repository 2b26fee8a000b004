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
- `oidc`: a bearer JWT (blueprints/auth/oidc.py; a bad one is refused, never a fall back to the
  cookie) or the browser session set by the sign-in (Authorization Code + PKCE, state and nonce,
  ID token verified, all by Authlib). The session holds only the user, their workspaces from the
  signed claims, the chosen workspace and when they signed in (absolute lifetime), besides the
  CSRF token. A bearer caller picks among the token's workspaces with `X-Workspace`; a browser
  with the top bar's picker.
"""

import logging
from collections.abc import Callable

import gevent
from flask import Flask, current_app, g, jsonify, redirect, render_template, request, url_for

from blueprints.auth.modes import (
    DevAuth,
    OidcAuth,
    Unauthenticated,
    WorkspaceNotAllowed,
    safe_next,
)
from blueprints.auth.oidc import ConfigurationError, is_loopback_host
from engine.lifecycle.identity import Identity
from engine.operations.config import Settings

log = logging.getLogger(__name__)

AUTH_MODES = {"dev", "oidc"}
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
    """Gate every request and expose the identity to templates (the sign-in routes are
    blueprints/auth/sign_in.py's, registered beside it)."""
    app.extensions["auth"] = mode
    mode.init_app(app)
    app.before_request(gate)
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
