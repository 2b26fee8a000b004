"""gunicorn settings for production: gevent workers, graceful drain of the engine on SIGTERM.

Never use --preload: the app would import psycopg in the master before gevent patches.
"""

import gc
import os
import shutil
import signal
import tempfile
from pathlib import Path

import gevent
from gunicorn.glogging import Logger

from engine.operations import logs
from engine.operations.config import ConfigurationError, Settings

try:  # checked in the master, so a bad value stops the boot before any worker starts
    settings = Settings.from_env()
except ConfigurationError as exc:
    raise SystemExit(f"configuration error: {exc}")

bind = [f"{settings.host}:{settings.port}"]
if settings.metrics_port:
    # /metrics answers only on this listener (blueprints/ops.py checks the port).
    bind.append(f"{settings.host}:{settings.metrics_port}")
# The same lines as `python app.py` (LOG_FORMAT, LOG_LEVEL), gunicorn's own included.
logconfig_dict = logs.logging_config(settings.log_format, settings.log_level)
workers = settings.web_concurrency
worker_class = "gevent"
worker_connections = settings.worker_connections
# The engine's drain (DRAIN_WAIT_S + SHUTDOWN_GRACE_S, checked at boot) ends inside it; keep it
# below Kubernetes' terminationGracePeriodSeconds minus the preStop pause (tests/unit/
# test_deploy_files.py reads the three files).
graceful_timeout = settings.graceful_timeout
timeout = 60
control_socket_disable = True
accesslog = settings.access_log or None


class AccessLogWhenAsked(Logger):
    """Access lines only when ACCESS_LOG is set. gunicorn builds every request's line whenever a
    logging config is given (ours always is), which cost 2-3% of a worker under load for lines
    nobody asked for (BENCHMARKS.md, "Where a worker's time goes")."""

    def access(self, resp, req, environ, request_time):
        if self.cfg.accesslog:
            super().access(resp, req, environ, request_time)


logger_class = AccessLogWhenAsked


_created: list[Path] = []


def on_starting(server):
    """Before any worker: a clean metrics directory, so every worker's numbers add up and no
    dead process from an earlier run is counted (prometheus-client multiprocess mode)."""
    configured = settings.prometheus_multiproc_dir
    if configured:
        path = Path(configured)
        path.mkdir(parents=True, exist_ok=True)
        for stale in path.glob("*.db"):
            stale.unlink()
    else:
        path = Path(tempfile.mkdtemp(prefix="deploy-engine-metrics-"))
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(path)
        _created.append(path)
    server.log.info("metrics directory %s", path)


def on_exit(server):
    """Remove the metrics directory this master created for itself."""
    for path in _created:
        shutil.rmtree(path, ignore_errors=True)


def child_exit(server, worker):
    """A dead worker's live gauges (leases held, viewers) stop counting."""
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)


def _engine(worker):
    return worker.wsgi.extensions["engine"]


#: How an operator ends a worker's drain at once (the arbiter turns SIGINT and SIGQUIT into
#: SIGQUIT to its workers; a second SIGTERM sent to the worker itself does it too).
STOP_NOW_HINT = "SIGINT or SIGQUIT to the master stops now"


def post_worker_init(worker):
    """SIGTERM sets alive=False only; also start the engine's drain at once (its streams close
    when it ends). A second SIGTERM to the worker ends the drain's wait.

    Then freeze what the loaded app holds (modules, templates, routes: most of the heap, alive as
    long as the worker): a full collection no longer scans it. Scanning it paused the worker for
    50-80 ms at a time under load, every request in flight with it (BENCHMARKS.md).
    """
    original = worker.handle_exit
    signals = []

    def handle_exit(sig, frame):
        original(sig, frame)
        runtime = _engine(worker)
        signals.append(sig)
        if len(signals) == 1:
            gevent.spawn(runtime.shutdown, stop_now_hint=STOP_NOW_HINT)
        else:
            gevent.spawn(runtime.stop_now)

    worker.handle_exit = handle_exit
    signal.signal(signal.SIGTERM, handle_exit)
    gc.collect()
    gc.freeze()


def worker_int(worker):
    """SIGINT or SIGQUIT (gunicorn's quick shutdown, also during a graceful one): no drain wait;
    abort the runs and record them before the worker exits (the arbiter kills it 2 s later)."""
    if getattr(worker, "wsgi", None) is not None:
        _engine(worker).stop_now()
        _engine(worker).shutdown()


def worker_exit(server, worker):
    """Fallback: the drain is idempotent. Then close the pool before the interpreter tears down."""
    if getattr(worker, "wsgi", None) is not None:
        _engine(worker).shutdown()
        _engine(worker).db.close()
