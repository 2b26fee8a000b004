"""The browser and network edge: which Host and Origin this server answers, and the headers
every response carries.

- Host allow-list (TRUSTED_HOSTS, default 127.0.0.1, localhost, ::1 and HOST): any other Host is
  a 400 before routing, so a DNS-rebinding page (evil.example resolving to 127.0.0.1) reaches
  nothing.
- Origins: PUBLIC_ORIGIN when set (e.g. https://deploy.example.com), else http://<trusted
  host>:<PORT>. The websocket handshake and every unsafe API request compare against these, never
  against the request's own Host.
- Bodies: every body on every route is held to MAX_CONTENT_LENGTH (413), whatever the route does
  with it and whatever the headers; one whose chunked framing is broken is a 400.
- Unsafe API methods refuse cross-site requests: a foreign Origin, or Sec-Fetch-Site other than
  same-origin/none, is a 403 (a body-less cross-site POST needs no CORS preflight).
- Headers: a Content-Security-Policy without inline script and with frame-ancestors 'none',
  nosniff, Referrer-Policy same-origin; the session cookie SameSite=Lax, Secure when the public
  origin is https.
"""

from urllib.parse import urlsplit

from flask import Flask, current_app, request
from gunicorn.http.errors import ParseException
from werkzeug.exceptions import RequestEntityTooLarge

from blueprints.errors import CrossSiteRequest, UnreadableBody, UntrustedHost

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
#: Sec-Fetch-Site values of a request the site's own pages (or the user) made.
SAME_SITE_FETCHES = {"same-origin", "none"}
DEFAULT_TRUSTED_HOSTS = ("127.0.0.1", "localhost", "::1")
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; "
    "img-src 'self' data:; connect-src 'self'; object-src 'none'; base-uri 'none'; "
    "form-action 'self'; frame-ancestors 'none'"
)


def trusted_hosts(settings) -> frozenset[str]:
    """TRUSTED_HOSTS (comma-separated), else the defaults plus the configured HOST."""
    configured = [h.strip().lower() for h in settings.trusted_hosts.split(",") if h.strip()]
    if configured:
        return frozenset(configured)
    return frozenset({*DEFAULT_TRUSTED_HOSTS, settings.host.lower()} - {"0.0.0.0", "::"})


def public_origins(settings) -> frozenset[str]:
    """The origins this site's pages are served from."""
    if settings.public_origin:
        return frozenset({settings.public_origin.rstrip("/").lower()})
    origins = set()
    for host in trusted_hosts(settings):
        name = f"[{host}]" if ":" in host else host
        origins.add(f"http://{name}:{settings.port}")
        if settings.port == 80:
            origins.add(f"http://{name}")
    return frozenset(origins)


def origin_allowed(origin: str | None) -> bool:
    """Whether an Origin header names this site (None or "null" never does)."""
    if not origin:
        return False
    return origin.rstrip("/").lower() in current_app.config["PUBLIC_ORIGINS"]


def _host_name(host_header: str) -> str:
    parts = urlsplit(f"//{host_header}")
    try:
        return (parts.hostname or "").lower()
    except ValueError:
        return ""


def read_body_within_limit() -> None:
    """RequestEntityTooLarge unless the request's body is within MAX_CONTENT_LENGTH.

    werkzeug applies the limit only when something reads the body, so a route that reads none
    accepted any size (a rollback without an Idempotency-Key took 300 KB; with one, whose
    fingerprint reads the body, it was a 413). Here, for every route: a sized body over the
    limit is refused before a byte of it is read; a chunked one is read now, up to the limit (the
    route reads it again from werkzeug's cache), and refused when it reaches it (werkzeug cuts
    such a body at the limit rather than refusing it). A chunked body the server cannot decode
    is UnreadableBody (gevent's errors arrive as werkzeug's ClientDisconnected, a 400 too).
    """
    limit = request.max_content_length
    if limit is None:
        return
    if request.content_length is not None:
        if request.content_length > limit:
            raise RequestEntityTooLarge()
        return
    if "chunked" not in request.headers.get("Transfer-Encoding", "").lower():
        return
    try:
        data = request.get_data(cache=True)
    except ParseException:  # gunicorn's: a bad chunk-size line, a missing chunk terminator
        raise UnreadableBody() from None
    if len(data) >= limit:
        raise RequestEntityTooLarge()


def init_app(app: Flask, settings) -> None:
    """Install the Host check, the cross-site refusal, the headers and the cookie policy."""
    hosts = trusted_hosts(settings)
    app.config["PUBLIC_ORIGINS"] = public_origins(settings)
    # Assigned, not setdefault: Flask's defaults already hold SESSION_COOKIE_SAMESITE = None.
    app.config["SESSION_COOKIE_SAMESITE"] = "Lax"
    app.config["SESSION_COOKIE_HTTPONLY"] = True
    app.config["SESSION_COOKIE_SECURE"] = settings.public_origin.lower().startswith("https://")

    @app.before_request
    def check_host_and_site():
        host = request.headers.get("Host", "").lower()
        if _host_name(host) not in hosts and host not in hosts:  # "name" or "name:port" entries
            raise UntrustedHost()
        if request.method in UNSAFE_METHODS and request.path.startswith("/api/"):
            fetch_site = request.headers.get("Sec-Fetch-Site")
            origin = request.headers.get("Origin")
            if (fetch_site is not None and fetch_site not in SAME_SITE_FETCHES) or (
                origin is not None and not origin_allowed(origin)
            ):
                raise CrossSiteRequest()
        read_body_within_limit()

    @app.after_request
    def security_headers(response):
        response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["X-Frame-Options"] = "DENY"
        return response
