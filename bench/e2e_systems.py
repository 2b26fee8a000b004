"""The systems bench/e2e_throughput.py measures, started on a stage (bench/e2e_servers.py): ours
and the same-work peers (bench/peers/), each on a fresh database of its own, every process on
the systems' CPUs when the stage pins them."""

from bench.common import fresh_database  # noqa: I001  (patches first)

import os  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import uuid  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import psutil  # noqa: E402
import psycopg  # noqa: E402
from psycopg import sql  # noqa: E402

from bench import peers  # noqa: E402
from bench.common import with_db  # noqa: E402
from bench.e2e_servers import HARNESS, Pinning, Postgres, taskset  # noqa: E402
from tests.helpers import ServerProcess, free_port  # noqa: E402

#: Backpressure off: a limit no run reaches.
UNLIMITED = "1000000"
#: Our MAX_RUNS_PER_PROCESS in the rounds and the overload's "on" run (unset: the default).
MAX_RUNS = os.environ.get("BENCH_E2E_MAX_RUNS")
LIMIT_ENV = {"MAX_RUNS_PER_PROCESS": MAX_RUNS} if MAX_RUNS else {}
SERVICE_ENV = {
    "AUTH_MODE": "dev",
    "WEB_CONCURRENCY": "2",
    "SANDBOX_APPLY_DELAY_S": "0",
    "SANDBOX_READY_DELAY_S": "0",
    "READINESS_POLL_S": "0.05",
    "ACCESS_LOG": "",
    "PYTHONUNBUFFERED": "1",
}


@dataclass(frozen=True)
class System:
    name: str
    create_path: str
    #: The run's rows: created and finished (epoch seconds, the database's clock), completed.
    rows_sql: str
    #: How many of the run's deployments are not finished yet.
    open_sql: str


OURS_TERMINAL = "('completed', 'failed', 'cancelled')"
SYSTEM_DEFS = {
    "ours": System(
        "ours",
        "/api/v1/tasks",
        HARNESS + "SELECT extract(epoch FROM created_at), extract(epoch FROM finished_at), "
        "status::text = 'completed' FROM deploy_tasks WHERE project_id = %s",
        HARNESS + "SELECT count(*) FROM deploy_tasks WHERE project_id = %s "
        f"AND status::text NOT IN {OURS_TERMINAL}",
    ),
    **{
        peer: System(
            peer,
            "/deployments",
            HARNESS + "SELECT extract(epoch FROM created_at), extract(epoch FROM finished_at), "
            "status = 'completed' FROM deployments WHERE project_id = %s",
            HARNESS + "SELECT count(*) FROM deployments WHERE project_id = %s "
            "AND finished_at IS NULL",
        )
        for peer in peers.NAMES
    },
}


@dataclass
class Running:
    """A started system: where it answers and the processes whose CPU is its own."""

    base: str
    url: str
    roots: list[subprocess.Popen]
    #: Celery's broker, whose CPU is counted apart.
    redis: psutil.Process | None = None

    def processes(self) -> list[psutil.Process]:
        out = []
        for root in self.roots:
            try:
                proc = psutil.Process(root.pid)
                out += [proc, *proc.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return out


@dataclass
class Stage:
    """Where the systems run: the PostgreSQL server, Celery's broker, the CPUs."""

    postgres: Postgres
    pinning: Pinning | None
    redis_url: str = ""
    redis: psutil.Process | None = None


def _stop(proc: subprocess.Popen) -> None:
    """SIGTERM (the graceful drain), then SIGKILL of its process group after 30 s."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


@contextmanager
def database(admin: str, system: str):
    """A fresh database with the system's schema; its URL. Dropped afterwards."""
    if system == "ours":
        with fresh_database(admin) as url:
            yield url
        return
    name = f"bench_peer_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    url = with_db(admin, name)
    try:
        peers.setup(system, url)
        yield url
    finally:
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@contextmanager
def running(system: str, url: str, stage: Stage, log_dir: Path, env: dict | None = None):
    """The system serving `url`'s database until the block ends."""
    port = free_port()
    log_dir.mkdir(parents=True, exist_ok=True)
    if system == "ours":
        env = {
            **os.environ,
            **SERVICE_ENV,
            **LIMIT_ENV,
            **(env or {}),
            "DATABASE_URL": url,
            "HOST": "127.0.0.1",
            "PORT": str(port),
            "DATA_DIR": str(log_dir / "data"),
        }
        argv = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
        server = ServerProcess(taskset(argv, stage.pinning), env, port, log_dir / "gunicorn.log")
        try:
            server.wait_healthy(120)
            yield Running(server.base, url, [server.proc])
        finally:
            _stop(server.proc)
            server.stop()
        return
    web, worker_argv = peers.commands(system)
    env = peers.environment(system, url, port, stage.redis_url)
    web = [*web[:1], "--chdir", str(peers.HERE), *web[1:]]
    server = ServerProcess(taskset(web, stage.pinning), env, port, log_dir / f"{system}-web.log")
    with open(log_dir / f"{system}-worker.log", "wb") as worker_log:
        worker = subprocess.Popen(
            taskset(worker_argv, stage.pinning),
            cwd=peers.HERE,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            server.wait_healthy(120)
            redis = stage.redis if system == "celery" else None
            yield Running(server.base, url, [server.proc, worker], redis)
        finally:
            _stop(worker)
            _stop(server.proc)
            server.stop()
