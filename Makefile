# The two front-door commands: `make run` and `make test`. Both set everything up first.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test test-scaleout test-ha fuzz setup browser suite-packages bench-packages gunicorn bench clean lock lint format

# Installs come from the lock files only: every package, transitive ones included, pinned and
# checked against its hash (requirements-dev.txt holds the app's lock plus the test tools).
# pip shows each package and a progress bar while it downloads; nothing is installed outside .venv.
$(STAMP): requirements.txt requirements-dev.txt
	@echo "Creating $(VENV) and installing requirements-dev.txt into it (pip, every package pinned and hash-checked)"
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --progress-bar on --upgrade pip
	$(PY) -m pip install --progress-bar on --require-hashes -r requirements-dev.txt
	touch $(STAMP)

setup: $(STAMP)

# Recompile the lock files after editing requirements.in / requirements-dev.in. pip-tools lives
# in the venv only to do this; it is no dependency of the app. On a conflict in a lock file take
# main's version and run this again (never merge hashes by hand).
PIP_COMPILE := $(PY) -m piptools compile --quiet --generate-hashes --allow-unsafe --strip-extras \
	--no-emit-index-url --no-emit-find-links
lock: setup
	$(PY) -m pip install --quiet pip-tools==7.6.2
	$(PIP_COMPILE) -o requirements.txt requirements.in
	$(PIP_COMPILE) -o requirements-dev.txt requirements-dev.in

# The service on its embedded defaults: embedded PostgreSQL, sandbox cluster, dev auth.
# `exec` so Ctrl-C / SIGTERM reach the server itself, which drains before it exits.
run: setup
	exec $(PY) app.py

# The e2e tests drive Debian's chromium through Playwright (pip, requirements-dev.txt) with
# executable_path: no Playwright browser download, ever.
browser:
	@command -v chromium >/dev/null || (echo "Installing Debian's chromium (apt, system-wide) for the browser tests" && \
		apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium)

# The scale-out suite (tests/scaleout) runs its statement pools through Debian's PgBouncer; the HA
# suite (tests/ha) runs etcd and two PostgreSQL 15 nodes under Patroni. Both need root (network
# namespaces) and skip without it. tests/install_suite_packages.sh installs them with every
# service held down and disables the services apt enabled, so nothing is left running or enabled.
SUITE_PACKAGES := pgbouncer patroni etcd-server etcd-client
suite-packages:
	@if [ "$$(id -u)" = 0 ] && ! (command -v pgbouncer && command -v patroni && command -v etcd) >/dev/null; then \
		sh tests/install_suite_packages.sh $(SUITE_PACKAGES); \
	fi

test: setup browser suite-packages lint
	$(PY) -m pytest $(PYTEST_ARGS)

# Lint and format checks (ruff.toml), before any test runs; `make format` applies both.
lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Only the multi-host suite: three hosts in network namespaces over one PostgreSQL.
test-scaleout: setup suite-packages
	$(PY) -m pytest tests/scaleout $(PYTEST_ARGS)

# Only the HA suite: a Patroni primary and replica failing over under load.
test-ha: setup suite-packages
	$(PY) -m pytest tests/ha $(PYTEST_ARGS)
# The contract fuzzing of `make test` (tests/contract/test_api_contract.py), many times larger.
FUZZ_EXAMPLES ?= 200
FUZZ_STEPS ?= 100
fuzz: setup
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) FUZZ_STEPS=$(FUZZ_STEPS) FUZZ_TIMEOUT=3600 \
		$(PY) -m pytest tests/contract/test_api_contract.py -s

# Production shape: gunicorn with gevent workers (set DATABASE_URL for a real server).
gunicorn: setup
	exec $(VENV)/bin/gunicorn -c gunicorn.conf.py wsgi:app

# The end-to-end benchmark (bench/e2e_throughput.py) also runs on Debian's PostgreSQL 15 and
# gives Celery a Redis of its own: both started by the benchmark and stopped after it. Installed
# as the suites' packages are: nothing left running or enabled.
BENCH_PACKAGES := postgresql-15 redis-server
bench-packages:
	@if [ "$$(id -u)" = 0 ] && ! (test -x /usr/lib/postgresql/15/bin/postgres && command -v redis-server) >/dev/null; then \
		sh tests/install_suite_packages.sh $(BENCH_PACKAGES); \
	fi

bench: setup bench-packages
	$(PY) -m bench.run_all

clean:
	rm -rf $(VENV) instance
