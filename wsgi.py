"""gunicorn entry: `gunicorn -c gunicorn.conf.py wsgi:app`. Patch first, then build the app.

Also the app of the operator commands (`flask --app wsgi tasks list`): there the engine runtime's
loops are not started (a command is not a server), the database and the use cases are the same.
"""
from gevent import monkey

monkey.patch_all()

import atexit  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from app import create_app  # noqa: E402
from engine import logs  # noqa: E402

logs.configure()
# Flask's CLI sets this for every command; `flask run` is the only one that serves.
_operator_command = os.environ.get("FLASK_RUN_FROM_CLI") == "true" and "run" not in sys.argv[1:2]
app = create_app({"overrides": {"start_runtime": False}} if _operator_command else None)
if _operator_command:
    atexit.register(app.extensions["engine"].db.close)
