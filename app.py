"""The application factory; `python app.py` serves it with gevent's WSGIServer.

gevent must patch before psycopg is imported (psycopg picks its wait function at import time),
so entry points patch first thing; create_app() refuses to run unpatched.
"""

from gevent import monkey

monkey.patch_all()

import dataclasses  # noqa: E402
import logging  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402

from flask import Flask, request  # noqa: E402
from werkzeug.exceptions import HTTPException  # noqa: E402

from blueprints.auth.oidc import ConfigurationError  # noqa: E402
from engine.operations.config import Settings  # noqa: E402

log = logging.getLogger("app")

MAX_BODY_BYTES = 256 * 1024


def create_app(test_config: dict | None = None) -> Flask:
    """Build the app and start this process's engine runtime."""
    if not monkey.is_module_patched("socket"):
        raise RuntimeError("gevent must monkey-patch before the app is created")
    import commands
    from blueprints import errors, ops
    from blueprints.api import openapi_routes, routes, tool_routes
    from blueprints.auth import csrf, edge, gate, sign_in
    from blueprints.mcp import transport
    from blueprints.pages import app_page, cluster_access, project_page
    from blueprints.streams import gateway_stream, project_stream, timeline_websocket
    from engine.db import Database, resolve_database_url
    from engine.errors import DomainError
    from engine.integrations import Integrations
    from engine.integrations.sandbox import SandboxBackend
    from engine.operations import migrations
    from engine.process import EngineRuntime

    settings = Settings.from_env(**(test_config or {}))
    from engine.trust import secrets

    secrets.install_log_scrubber()
    register_own_credentials(settings)
    auth_mode = gate.configure(settings)  # before anything starts: a bad setting stops boot

    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = MAX_BODY_BYTES
    edge.init_app(app, settings)  # Host allow-list, cross-site refusal, headers, cookie flags
    url = resolve_database_url(settings.database_url, settings.data_dir)
    # DDL and its lock go straight to PostgreSQL, never through a transaction pooler.
    direct_url = settings.listen_database_url or url
    app.extensions["database_url"] = direct_url
    operator_command = invoked_as_operator_command()
    if not operator_command:
        migrations.upgrade(direct_url)
    db = Database(
        url,
        max_size=settings.db_pool_size,
        listen_url=settings.listen_database_url,
        pooler=settings.db_pooler,
        link_timeout_s=settings.db_link_timeout_s,
        retry_budget_s=settings.db_retry_budget_s,
    )
    db.open()
    integrations = settings.overrides.get("integrations")
    if integrations is None:
        if settings.cluster_backend == "kubernetes":
            from engine.integrations.kube.backend import KubeBackend

            backend = KubeBackend.from_settings(settings)
        else:
            backend = SandboxBackend(settings)
        integrations = Integrations(cluster=backend.cluster, cluster_label=backend.label)
    if integrations.templates is None:
        from engine.integrations.template_catalog import TemplateCatalog

        integrations = dataclasses.replace(
            integrations, templates=TemplateCatalog(settings.template_catalog_dir)
        )
    if integrations.devbox is None:
        integrations = dataclasses.replace(integrations, devbox=build_devbox(settings))
    if integrations.gateway is None:
        integrations = dataclasses.replace(integrations, gateway=build_gateway(settings))
    runtime = EngineRuntime(db, settings, integrations)
    app.extensions["engine"] = runtime
    if settings.overrides.get("start_runtime", True) and not operator_command:
        runtime.start()
    commands.init_app(app)

    # First: its hooks give every request (and every log line of it) a request id.
    ops.init_app(app)
    app.register_blueprint(routes.bp)
    app.register_blueprint(tool_routes.bp)
    app.register_blueprint(openapi_routes.bp)
    app.register_blueprint(transport.bp)
    app.register_error_handler(DomainError, errors.domain_error)
    app.register_blueprint(project_stream.bp)
    app.register_blueprint(gateway_stream.bp)
    # The UI: server-rendered pages (CSRF-checked htmx writes) and the timeline websocket.
    csrf.init_app(app, settings.data_dir, settings.secret_key)
    secrets.register_server_secret(app.secret_key)  # SECRET_KEY, or the one kept in DATA_DIR
    gate.init_app(app, auth_mode)
    app.register_blueprint(sign_in.bp)
    app.register_blueprint(project_page.bp)
    app.register_blueprint(app_page.bp)
    app.register_blueprint(cluster_access.bp)
    app.register_blueprint(cluster_access.api)
    timeline_websocket.init_app(app, runtime)

    @app.errorhandler(HTTPException)
    def http_error(exc: HTTPException):
        if request.path.startswith("/api/"):
            return errors.http_error(exc)
        return exc

    app.after_request(errors.retry_later)

    @app.after_request
    def served_by(response):
        # Which process answered: lets cross-process tests (and operators) tell workers apart.
        response.headers["X-Served-By"] = runtime.owner
        return response

    return app


def register_own_credentials(settings: Settings) -> None:
    """Scrub this process's own credentials from every message and log line for its whole life:
    the gateway key, the devbox signing key, the OIDC client secret, SECRET_KEY, METRICS_TOKEN
    and the database passwords (decoded and as written in a URL)."""
    from urllib.parse import quote

    from psycopg.conninfo import conninfo_to_dict

    from engine.trust import secrets

    values = [
        settings.gateway_api_key,
        settings.devbox_signing_key,
        settings.oidc_client_secret,
        settings.secret_key,
        settings.metrics_token,
    ]
    for url in (settings.database_url, settings.listen_database_url):
        try:
            password = conninfo_to_dict(url).get("password") if url else None
        except Exception:
            password = None  # a malformed URL fails at connect, with its own message
        if isinstance(password, str) and password:
            values += [password, quote(password, safe="")]
    for value in values:
        secrets.register_server_secret(value)


def invoked_as_operator_command() -> bool:
    """True while `flask --app wsgi <command>` loads the app (not `flask run`).

    An operator command gets the app without its boot work: no migrations (`db upgrade` is the
    command's own job) and no engine runtime claiming tasks or sweeping in a CLI process.
    """
    import click

    ctx = click.get_current_context(silent=True)
    return ctx is not None and ctx.info_name != "run"


def build_devbox(settings: Settings):
    """The devbox API client when DEVBOX_URL is set, else this process's sandbox devboxes."""
    if not settings.devbox_url:
        from engine.integrations.sandbox_ai import SandboxDevbox

        return SandboxDevbox()
    if not settings.devbox_signing_key:
        raise RuntimeError("DEVBOX_URL is set but DEVBOX_SIGNING_KEY is not")
    from engine.integrations.devbox import DEFAULT_ANSWER_LIMIT, DevboxClient

    return DevboxClient(
        settings.devbox_url,
        settings.devbox_signing_key,
        timeout_s=settings.devbox_timeout_s,
        exec_timeout_s=settings.devbox_exec_timeout_s,
        answer_limit=dataclasses.replace(
            DEFAULT_ANSWER_LIMIT,
            max_bytes=settings.devbox_answer_max_bytes,
            max_s=settings.devbox_answer_max_s,
        ),
    )


def build_gateway(settings: Settings):
    """The chat-completions client when GATEWAY_URL is set, else the sandbox gateway."""
    if not settings.gateway_url:
        from engine.integrations.sandbox_ai import SandboxGateway

        return SandboxGateway(chunk_delay_s=settings.sandbox_gateway_delay_s)
    if not settings.gateway_model:
        raise RuntimeError("GATEWAY_URL is set but GATEWAY_MODEL is not")
    from engine.integrations.gateway import (
        DEFAULT_ANSWER_LIMIT,
        DEFAULT_EVENT_LIMIT,
        GatewayClient,
    )

    return GatewayClient(
        settings.gateway_url,
        settings.gateway_model,
        settings.gateway_api_key,
        retries=settings.gateway_retries,
        connect_timeout_s=settings.gateway_connect_timeout_s,
        idle_timeout_s=settings.gateway_idle_timeout_s,
        answer_limit=dataclasses.replace(
            DEFAULT_ANSWER_LIMIT,
            max_bytes=settings.gateway_answer_max_bytes,
            max_s=settings.gateway_answer_max_s,
        ),
        event_limit=dataclasses.replace(
            DEFAULT_EVENT_LIMIT,
            max_bytes=settings.gateway_event_max_bytes,
            max_s=settings.gateway_answer_max_s,
        ),
    )


def serve() -> None:
    """Dev server: one process, embedded PostgreSQL unless DATABASE_URL is set."""
    import gevent
    from gevent.pywsgi import WSGIServer

    from blueprints.auth.framing import StrictFramingHandler
    from engine.operations import logs

    try:
        logs.configure()
        app = create_app()
    except ConfigurationError as exc:
        raise SystemExit(f"configuration error: {exc}")
    settings = app.extensions["engine"].settings
    server = WSGIServer(
        (settings.host, settings.port), app, log=None, handler_class=StrictFramingHandler
    )
    server.init_socket()
    # Accepted sockets inherit it: without it, Nagle + delayed ACK add ~40 ms to small responses.
    server.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    servers = [server]
    if settings.metrics_port:
        # /metrics answers only here (blueprints/ops.py checks the port).
        servers.append(
            WSGIServer(
                (settings.host, settings.metrics_port),
                app,
                log=None,
                handler_class=StrictFramingHandler,
            )
        )
        servers[-1].start()

    runtime = app.extensions["engine"]

    def stop():
        log.info("stopping: draining the engine")
        runtime.shutdown(stop_now_hint="press Ctrl-C again to stop now")
        # The drain closed the streams: what is left are requests about to end.
        for each in servers:
            each.stop(timeout=5)
        runtime.db.close()

    signals = []

    def on_signal():
        # The first signal drains (the server still answers, new work with 503 shutting_down);
        # a second one ends the drain's wait at once.
        signals.append(1)
        gevent.spawn(stop if len(signals) == 1 else runtime.stop_now)

    for sig in (signal.SIGTERM, signal.SIGINT):
        gevent.signal_handler(sig, on_signal)
    log.info("serving on http://%s:%s", settings.host, settings.port)
    server.serve_forever()


if __name__ == "__main__":
    serve()
