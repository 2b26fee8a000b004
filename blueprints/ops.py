"""The operator's side over HTTP: health probes, Prometheus metrics, failure streaks.

- GET /healthz: the process is alive (no database call). GET /readyz: ready for traffic, else
  503 with the reason (draining, database unreachable, listener not connected).
- GET /metrics: Prometheus text format; behind METRICS_TOKEN and/or only on METRICS_PORT.
- GET /api/v1/admin/streaks (JSON) and GET /health (page): what is failing right now.
None of them is logged per request. Every response carries X-Request-Id.
"""

import hmac

from flask import Blueprint, Flask, current_app, g, jsonify, render_template, request
from werkzeug.exceptions import NotFound, Unauthorized

from blueprints.auth.gate import current_identity
from engine.errors import OperatorOnly
from engine.lifecycle import operator as operations
from engine.operations import logs, metrics

bp = Blueprint("ops", __name__)


def runtime():
    return current_app.extensions["engine"]


def require_operator() -> None:
    """The one check in front of every operator route: any caller in dev mode, else a user
    listed in ADMIN_USERS."""
    settings = runtime().settings
    if settings.auth_mode == "dev":
        return
    admins = {u.strip() for u in settings.admin_users.split(",") if u.strip()}
    if current_identity().user not in admins:
        raise OperatorOnly()


def healthz():
    """The process is alive (never touches the database)."""
    engine = runtime()
    return jsonify({"ok": True, "owner": engine.owner, "running": len(engine.runs)})


def readyz():
    """Ready for traffic: database reachable, listener connected, not draining."""
    reason = runtime().unready_reason()
    if reason is not None:
        return jsonify({"ready": False, "reason": reason}), 503
    return jsonify({"ready": True})


def scrape():
    """Every metric in the Prometheus text format (all workers' numbers under gunicorn)."""
    settings = runtime().settings
    if settings.metrics_port and request.environ.get("SERVER_PORT") != str(settings.metrics_port):
        raise NotFound()
    if settings.metrics_token:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {settings.metrics_token}".encode()):
            raise Unauthorized("a metrics token is required")
    body, content_type = metrics.exposition(runtime().db)
    return body, 200, {"Content-Type": content_type}


@bp.get("/api/v1/admin/streaks")
def admin_streaks():
    """What keeps failing right now, the longest-running first."""
    require_operator()
    return jsonify({"items": operations.list_streaks(runtime())})


@bp.get("/health")
def health_page():
    """The operator's Health page: readiness and the current failure streaks."""
    require_operator()
    return render_template(
        "health.html",
        reason=runtime().unready_reason(),
        streaks=operations.list_streaks(runtime()),
        owner=runtime().owner,
    )


def init_app(app: Flask) -> None:
    """Register the routes and the request-id / context hooks."""
    # Probes and the scrape are app-level endpoints ("healthz", "readyz", "metrics") so that an
    # auth gate can list them as public by those plain names.
    app.add_url_rule("/healthz", "healthz", healthz, methods=["GET"])
    app.add_url_rule("/readyz", "readyz", readyz, methods=["GET"])
    app.add_url_rule("/metrics", "metrics", scrape, methods=["GET"])
    app.register_blueprint(bp)

    @app.before_request
    def request_context():
        g.request_id = logs.request_id_from(request.headers.get("X-Request-Id"))
        g.request_id_token = logs.REQUEST_ID.set(g.request_id)

    @app.after_request
    def request_id_header(response):
        request_id = g.get("request_id")
        if request_id:
            response.headers["X-Request-Id"] = request_id
        return response

    @app.teardown_request
    def forget_request_id(exc):
        token = g.pop("request_id_token", None)
        if token is not None:
            logs.REQUEST_ID.reset(token)
