"""gunicorn settings of the peers (bench/peers/flask_peer.py): as the service's gunicorn.conf.py,
2 gevent workers, no access log, the loaded app frozen out of the collector's scans."""

import gc
import os

bind = [f"127.0.0.1:{os.environ['PORT']}"]
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gevent"
worker_connections = 1000
timeout = 60
accesslog = None
control_socket_disable = True


def post_worker_init(worker):
    """Collect once and freeze what is loaded, as the service's workers do."""
    gc.collect()
    gc.freeze()
