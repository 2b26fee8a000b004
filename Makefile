# The two front-door commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test setup browser gunicorn bench clean

$(STAMP): requirements.txt requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $(STAMP)

setup: $(STAMP)

# The service on its embedded defaults: embedded PostgreSQL, sandbox cluster, dev auth.
# `exec` so Ctrl-C / SIGTERM reach the server itself, which drains before it exits.
run: setup
	exec $(PY) app.py

# The e2e tests drive Debian's chromium through Playwright (pip, requirements-dev.txt) with
# executable_path: no Playwright browser download, ever.
browser:
	command -v chromium >/dev/null || (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

test: setup browser
	$(PY) -m pytest $(PYTEST_ARGS)

# Production shape: gunicorn with gevent workers (set DATABASE_URL for a real server).
gunicorn: setup
	exec $(VENV)/bin/gunicorn -c gunicorn.conf.py wsgi:app

bench: setup
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) instance
