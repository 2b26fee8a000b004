"""gunicorn entry: `gunicorn -c gunicorn.conf.py wsgi:app`. Patch first, then build the app.

Also the app of the operator commands (`flask --app wsgi tasks list`), which boots no engine loops
(app.invoked_as_operator_command).
"""

from gevent import monkey

monkey.patch_all()

import atexit  # noqa: E402

from app import create_app, invoked_as_operator_command  # noqa: E402
from blueprints.auth.oidc import ConfigurationError  # noqa: E402
from engine.operations import logs  # noqa: E402

try:
    logs.configure()
    app = create_app()
except ConfigurationError as exc:
    raise SystemExit(f"configuration error: {exc}")
if invoked_as_operator_command():
    # A command's process ends right after it: close the pool while the gevent hub still runs.
    atexit.register(app.extensions["engine"].db.close)
