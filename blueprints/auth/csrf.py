"""CSRF protection for the hypermedia routes, and the app's secret key.

A random token lives in the signed session cookie; pages render it into `hx-headers`, so every
htmx request carries it as X-CSRF-Token (plain forms as the `csrf_token` field). Unsafe methods on
a protected blueprint without a matching token are 403. The JSON API needs no token: it only
accepts `application/json` bodies, which a cross-site form cannot send without a CORS preflight.

The secret key signs the session cookie, so every process serving one site must share it:
SECRET_KEY from the environment, else a key generated once and kept in DATA_DIR/secret_key (all
gunicorn workers of one host read the same file; several hosts must set SECRET_KEY).
"""

import hmac
import logging
import os
import secrets
from pathlib import Path

import gevent
from flask import Blueprint, Flask, request, session

from blueprints.errors import CrossSiteRequest

log = logging.getLogger(__name__)

HEADER = "X-CSRF-Token"
FORM_FIELD = "csrf_token"
SESSION_KEY = "csrf"
SECRET_KEY_FILE = "secret_key"
UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}


def load_secret_key(data_dir: Path, configured: str | None = None) -> str:
    """SECRET_KEY, or the key kept under data_dir (created on first use, readable by us only)."""
    if configured:
        return configured
    path = Path(data_dir) / SECRET_KEY_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass  # another worker (or an earlier run) made it; everyone shares that one
    else:
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        log.info("generated a secret key in %s (set SECRET_KEY to share one across hosts)", path)
    for _ in range(50):  # a concurrent creator may not have written it yet
        key = path.read_text().strip()
        if key:
            return key
        gevent.sleep(0.02)
    raise RuntimeError(f"{path} is empty; delete it or set SECRET_KEY")


def init_app(app: Flask, data_dir: Path, secret_key: str | None = None) -> None:
    """Set the secret key; expose `csrf_token()` to templates. (The cookie's flags are set with
    the other edge rules in blueprints/auth/edge.py.)"""
    app.secret_key = load_secret_key(data_dir, secret_key)
    app.jinja_env.globals["csrf_token"] = token


def token() -> str:
    """This browser's CSRF token (minted into its session on first use)."""
    if SESSION_KEY not in session:
        session[SESSION_KEY] = secrets.token_urlsafe(32)
    return session[SESSION_KEY]


def protect(bp: Blueprint) -> None:
    """Reject unsafe requests to `bp` that do not carry this session's token (403)."""

    @bp.before_request
    def check_csrf_token():
        if request.method not in UNSAFE_METHODS:
            return None
        expected = session.get(SESSION_KEY)
        sent = request.headers.get(HEADER) or request.form.get(FORM_FIELD)
        if not expected or not sent or not _same(expected, sent):
            # A missing or wrong token is what a cross-site request looks like: the same 403 and
            # stable code the edge gives (JSON on JSON routes, the error box on pages).
            raise CrossSiteRequest("missing or wrong CSRF token; reload the page")
        return None


def _same(expected: str, sent: str) -> bool:
    """Constant-time comparison of any two texts (compare_digest raises TypeError on a non-ASCII
    str, and the sent token is whatever the client chose)."""
    return hmac.compare_digest(expected.encode(), sent.encode("utf-8", "surrogatepass"))
