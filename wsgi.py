"""gunicorn entry: `gunicorn -c gunicorn.conf.py wsgi:app`. Patch first, then build the app."""
from gevent import monkey

monkey.patch_all()

from app import create_app  # noqa: E402

app = create_app()
