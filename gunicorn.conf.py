"""gunicorn settings for production: gevent workers, graceful drain of the engine on SIGTERM.

Never use --preload: the app would import psycopg in the master before gevent patches.
"""
import os
import signal

import gevent

bind = f"{os.environ.get('HOST', '127.0.0.1')}:{os.environ.get('PORT', '8000')}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gevent"
worker_connections = int(os.environ.get("WORKER_CONNECTIONS", "2000"))
# Keep below Kubernetes' terminationGracePeriodSeconds.
graceful_timeout = int(os.environ.get("GRACEFUL_TIMEOUT", "15"))
timeout = 60
control_socket_disable = True
accesslog = os.environ.get("ACCESS_LOG") or None


def _engine(worker):
    return worker.wsgi.extensions["engine"]


def post_worker_init(worker):
    """SIGTERM sets alive=False only; also drain the engine at once (and close its streams)."""
    original = worker.handle_exit

    def handle_exit(sig, frame):
        original(sig, frame)
        gevent.spawn(_engine(worker).shutdown)

    worker.handle_exit = handle_exit
    signal.signal(signal.SIGTERM, handle_exit)


def worker_exit(server, worker):
    """Fallback: the drain is idempotent. Then close the pool before the interpreter tears down."""
    if getattr(worker, "wsgi", None) is not None:
        _engine(worker).shutdown()
        _engine(worker).db.close()
