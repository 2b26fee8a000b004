"""(d) End-to-end throughput: ours against same-work peers over HTTP, interleaved over rounds, on
the embedded PostgreSQL and on Debian's PostgreSQL 15.

The real measurement (a quiet machine: nothing else running, no test suite beside it; as root
once, `make bench-packages` installs Debian's postgresql-15 and redis-server):

    .venv/bin/python -m bench.e2e_throughput          # or `make bench`, which records it

Defaults: on each PostgreSQL build in turn (bench/e2e_servers.py: `embedded`, the wheel the
service defaults to, then `debian15`, Debian's PostgreSQL 15 started here in a temporary
directory and removed afterwards), 4 rounds; in each, every system (order rotated per round, so
each order once) at 4 and 16 closed-loop HTTP clients for 20 s each; then ours alone, 16
clients for 60 s, backpressure on and off. Knobs (for a smoke run only; the recorded numbers
use the defaults): BENCH_E2E_POSTGRES (e.g. "debian15"), BENCH_E2E_ROUNDS, BENCH_E2E_SECONDS,
BENCH_E2E_CLIENTS (e.g. "2" or "4,16"), BENCH_E2E_OVERLOAD_SECONDS, BENCH_E2E_WINDOW_SECONDS,
BENCH_E2E_SYSTEMS (e.g. "ours,celery"), BENCH_E2E_MAX_RUNS (our MAX_RUNS_PER_PROCESS),
BENCH_E2E_PIN=0 (no pinning), BENCH_E2E_JSON (a file for every run as JSON). A smoke run that
proves the harness end to end:

    BENCH_E2E_POSTGRES=debian15 BENCH_E2E_ROUNDS=1 BENCH_E2E_SECONDS=3 BENCH_E2E_CLIENTS=2 \\
        BENCH_E2E_OVERLOAD_SECONDS=6 BENCH_E2E_WINDOW_SECONDS=2 \\
        .venv/bin/python -m bench.e2e_throughput

The systems, each on a fresh database per round, one at a time (the others stopped), each behind
gunicorn with 2 gevent workers, no access log and `gc.freeze()` in its workers, each receiving
the same image-deployment JSON body:
- ours: `gunicorn -c gunicorn.conf.py wsgi:app`, AUTH_MODE=dev, the sandbox cluster at zero
  delays (what is measured is the service and PostgreSQL, not the stand-in cluster's sleeps);
  POST /api/v1/tasks; a create answered 503 `overloaded` is retried after its Retry-After.
- Flask + procrastinate, its cross-check (the same work written apart, as little as
  procrastinate's documentation needs) and Flask + Celery (Redis broker, gevent pool):
  bench/peers/, POST /deployments; a row and a job whose worker writes the same durable steps
  as ours (running, four events, completed), each its own transaction. The peers are written
  as their libraries' documentation recommends for throughput (bench/peers/__init__.py lists
  each choice and its source); the two procrastinate peers must agree on their CPU per
  deployment within 10%.

The load generator (this process: the HTTP clients, and the polling for completion) is kept out
of the systems' way by pinning: it runs on the first CPU, and every process of the systems
(gunicorn and its workers, the queue workers, PostgreSQL's postmaster and backends, Redis) on
the others, with `taskset` for the processes started here and the same affinity set on the
PostgreSQL server once it runs. On this 2-core machine the systems so share one core, and a
system's rate is what its CPU per deployment allows on it; the load generator's CPU per
deployment is measured and shown beside. With BENCH_E2E_PIN=0, or a single CPU, nothing is
pinned and the results say so. A server given by BENCH_DATABASE_URL is never pinned.

Per run: sustained deployments/s from the first create to the last completion (the database's
clock: created_at to finished_at of the run's rows); create p50/p99 (the client's, accepted
creates only); create -> completed p50/p99; CPU per deployment of the system's processes (web
and queue workers, Redis) and of PostgreSQL (postmaster, backends and reaped children), from
the first create until the last deployment completed, each run after a CHECKPOINT (what the run
before left dirty is not this run's); pg_stat_statements of the system's database over the run
(calls, time, rows, WAL bytes per statement). Completion is seen by polling one count every
0.2 s. Medians of the rounds, and each round's own ours / peer ratios beside them; the results
name the commit, the harness, the peers' revision and versions, the PostgreSQL build and
version, and the pinning.

Overload: ours, 16 clients for 60 s with backpressure on (MAX_RUNS_PER_PROCESS, the default) and
off; create -> completed p99 of the deployments created in the first and in the last 10 s.
"""

from bench.common import Result, median, percentile  # noqa: I001  (patches first)

import gc  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import uuid  # noqa: E402
from contextlib import ExitStack  # noqa: E402
from pathlib import Path  # noqa: E402

import gevent  # noqa: E402
import psutil  # noqa: E402
import psycopg  # noqa: E402
import requests  # noqa: E402

from bench import e2e_report as report  # noqa: E402
from bench import e2e_servers as servers  # noqa: E402
from bench import peers  # noqa: E402
from bench.e2e_report import RunResult  # noqa: E402
from bench.e2e_servers import cpu_seconds  # noqa: E402
from bench.e2e_systems import SYSTEM_DEFS, UNLIMITED, Running, Stage, System  # noqa: E402
from bench.e2e_systems import database, running  # noqa: E402
from tests.helpers import IMAGE_SOURCE  # noqa: E402

#: A multiple of the systems' count: each order of the rotation as often as the others (the
#: order within a round may matter: BENCHMARKS.md, "Six statements a deployment").
ROUNDS = int(os.environ.get("BENCH_E2E_ROUNDS", "4"))
SECONDS = float(os.environ.get("BENCH_E2E_SECONDS", "20"))
CLIENTS = tuple(int(c) for c in os.environ.get("BENCH_E2E_CLIENTS", "4,16").split(","))
OVERLOAD_S = float(os.environ.get("BENCH_E2E_OVERLOAD_SECONDS", "60"))
WINDOW_S = float(os.environ.get("BENCH_E2E_WINDOW_SECONDS", "10"))
OVERLOAD_CLIENTS = 16
SYSTEMS = tuple(os.environ.get("BENCH_E2E_SYSTEMS", "ours," + ",".join(peers.NAMES)).split(","))
JSON_PATH = os.environ.get("BENCH_E2E_JSON")
#: Issue 48's targets, in every round's own ratio against the fastest and the cheapest peer of
#: that round, and its aims (medians of those ratios).
TARGET_RATE_RATIO, AIM_RATE_RATIO = 1.0, 1.2
TARGET_CPU_RATIO, AIM_CPU_RATIO = 1.0, 0.8
#: Issue 31's latency targets.
TARGET_DONE_OVER_CREATE_P99 = 3.0
TARGET_LAST_OVER_FIRST_P99 = 1.5

#: Before each system's measured runs: its pools, caches and workers warmed.
WARMUP_S = min(3.0, SECONDS)
POLL_S = 0.2
RUN_TIMEOUT_S = 600.0
# -- one run -------------------------------------------------------------------------------------


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


def one_run(system: System, run: Running, stage: Stage, clients: int, seconds: float) -> RunResult:
    admin = stage.postgres.admin
    project = f"r-{uuid.uuid4().hex[:8]}"
    procs = run.processes()
    me = psutil.Process()
    dbid = servers.database_oid(run.url) if stage.postgres.statements else None
    # The server's own processes (checkpointer, WAL writer) count as PostgreSQL's CPU: whatever
    # the run before left dirty is written now, not charged to this run's system.
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
    if dbid:
        servers.reset_statements(admin, dbid)
    cpu0, pg0 = cpu_seconds(procs), servers.postgres_cpu_seconds(admin)
    redis0 = cpu_seconds([run.redis], children=True) if run.redis else 0.0
    load0 = cpu_seconds([me])
    create_ms, refused = load(run.base, system.create_path, clients, seconds, project)
    load1 = cpu_seconds([me])
    rows = wait_finished(system, run, project)
    cpu1, pg1 = cpu_seconds(procs), servers.postgres_cpu_seconds(admin)
    redis1 = cpu_seconds([run.redis], children=True) if run.redis else 0.0
    statements = servers.read_statements(admin, dbid) if dbid else []
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
        load_cpu_ms=(load1 - load0) * 1000 / n,
        statements=statements,
    )


# -- the rounds and the overload -----------------------------------------------------------------


def measure_round(stage: Stage, order: list[str], log_dir: Path) -> list[RunResult]:
    """Every system in `order`, each at every concurrency, on a fresh database of its own."""
    results = []
    for name in order:
        system = SYSTEM_DEFS[name]
        with (
            database(stage.postgres.admin, name) as url,
            running(name, url, stage, log_dir / name) as run,
        ):
            one_run(system, run, stage, max(CLIENTS), WARMUP_S)
            for clients in CLIENTS:
                results.append(one_run(system, run, stage, clients, SECONDS))
                print(report.summary_line(results[-1]), file=sys.stderr, flush=True)
    return results


def window_p99(r: RunResult, which: str) -> float:
    """create -> completed p99 of the deployments created in the run's first or last WINDOW_S."""
    end = max(t for t, _ in r.timeline)
    inside = [
        ms for t, ms in r.timeline if (t < WINDOW_S if which == "first" else t >= end - WINDOW_S)
    ]
    return percentile(inside, 99)


def measure_overload(stage: Stage, log_dir: Path) -> dict[str, RunResult]:
    """Ours at OVERLOAD_CLIENTS for OVERLOAD_S, backpressure on (the default limit) and off."""
    out = {}
    ours = SYSTEM_DEFS["ours"]
    for state, env in (("on", {}), ("off", {"MAX_RUNS_PER_PROCESS": UNLIMITED})):
        with (
            database(stage.postgres.admin, "ours") as url,
            running("ours", url, stage, log_dir / "overload", env) as run,
        ):
            one_run(ours, run, stage, OVERLOAD_CLIENTS, WARMUP_S)
            r = one_run(ours, run, stage, OVERLOAD_CLIENTS, OVERLOAD_S)
        out[state] = r
        print(
            f"  overload, backpressure {state}: {report.summary_line(r).strip()}; done p99 "
            f"first {WINDOW_S:g} s {window_p99(r, 'first'):,.0f} ms, "
            f"last {window_p99(r, 'last'):,.0f} ms",
            file=sys.stderr,
            flush=True,
        )
    return out


def measure(stage: Stage, rounds: int, log_dir: Path) -> tuple[list, dict]:
    """The rounds, then the overload, on one PostgreSQL server."""
    per_round: list[list[RunResult]] = []
    for i in range(rounds):
        order = list(SYSTEMS[i % len(SYSTEMS) :] + SYSTEMS[: i % len(SYSTEMS)])
        print(
            f"{stage.postgres.description}, round {i + 1} of {rounds}: {', '.join(order)}",
            file=sys.stderr,
            flush=True,
        )
        per_round.append(measure_round(stage, order, log_dir))
    overload = measure_overload(stage, log_dir) if "ours" in SYSTEMS and OVERLOAD_S else {}
    return per_round, overload


# -- the results ---------------------------------------------------------------------------------


def add_targets(result: Result, where: str, table: dict, per_round: list) -> None:
    """Issue 48's targets in every round's own ratio, its aims, and issue 31's latency ones."""
    for clients, ratios in report.against_the_best(per_round).items():
        rates, cpus = [r for r, _ in ratios], [c for _, c in ratios]
        result.target(
            f"{where}, {clients} clients: deployments/s >= {TARGET_RATE_RATIO:g}x the round's "
            f"fastest peer in every round (lowest {min(rates):.2f}x)",
            min(rates) >= TARGET_RATE_RATIO,
        )
        result.target(
            f"{where}, {clients} clients: CPU per deployment <= {TARGET_CPU_RATIO:g}x the "
            f"round's cheapest peer in every round (highest {max(cpus):.2f}x)",
            max(cpus) <= TARGET_CPU_RATIO,
        )
        result.target(
            f"{where}, {clients} clients: aim, median rate ratio >= {AIM_RATE_RATIO:g}x and CPU "
            f"ratio <= {AIM_CPU_RATIO:g}x (measured {median(rates):.2f}x, {median(cpus):.2f}x)",
            median(rates) >= AIM_RATE_RATIO and median(cpus) <= AIM_CPU_RATIO,
        )
        theirs = table.get((clients, "procrastinate"))
        if theirs:
            ours = table[(clients, "ours")]["postgres_cpu_ms"]
            result.target(
                f"{where}, {clients} clients: PostgreSQL CPU per deployment <= procrastinate's "
                f"({ours:.2f} vs {theirs['postgres_cpu_ms']:.2f} ms)",
                ours <= theirs["postgres_cpu_ms"],
            )
    for clients, ratios in report.cross_check(per_round).items():
        off = abs(median(ratios) - 1)
        result.target(
            f"{where}, {clients} clients: the two procrastinate peers' CPU per deployment agree "
            f"within {report.CROSS_CHECK_TOLERANCE:.0%} (median {median(ratios):.2f}x)",
            off <= report.CROSS_CHECK_TOLERANCE,
        )
    if (4, "ours") in table:
        ours = table[(4, "ours")]
        ratio = ours["done_p99"] / ours["create_p99"]
        result.target(
            f"{where}, 4 clients: create -> completed p99 <= {TARGET_DONE_OVER_CREATE_P99:g}x "
            f"our create p99 (measured {ratio:.1f}x)",
            ratio <= TARGET_DONE_OVER_CREATE_P99,
        )


def overload_markdown(result: Result, where: str, overload: dict) -> str:
    lines = []
    for which, r in overload.items():
        first, last = window_p99(r, "first"), window_p99(r, "last")
        lines.append(
            f"| {which} | {r.rate:.0f} | {r.deployments:,} | {r.refused:,} "
            f"| {percentile(r.create_ms, 99):.1f} ms | {first:,.0f} ms | {last:,.0f} ms "
            f"| {last / first:.2f}x |"
        )
        if which == "on":
            result.add(
                f"{where}: overload, done p99 last / first {WINDOW_S:g} s", last / first, "x"
            )
            result.target(
                f"{where}, {OVERLOAD_CLIENTS} clients for {OVERLOAD_S:g} s, backpressure on: "
                f"create -> completed p99 in the last {WINDOW_S:g} s <= "
                f"{TARGET_LAST_OVER_FIRST_P99:g}x the first (measured {last / first:.2f}x)",
                last / first <= TARGET_LAST_OVER_FIRST_P99,
            )
    return (
        f"Overload, ours alone: {OVERLOAD_CLIENTS} clients for {OVERLOAD_S:g} s, a refused "
        "create retried after its Retry-After\n\n"
        f"| backpressure | deployments/s | deployments | refused (503) | create p99 "
        f"| done p99, first {WINDOW_S:g} s | done p99, last {WINDOW_S:g} s | last / first |\n"
        "| --- | --- | --- | --- | --- | --- | --- | --- |\n" + "\n".join(lines)
    )


def record_build(result: Result, where: str, per_round: list, overload: dict, label) -> str:
    """One PostgreSQL build's figures and targets into `result`; its markdown section."""
    runs = [r for mine in per_round for r in mine]
    table = report.by_system(runs, CLIENTS, SYSTEMS)
    for (clients, name), t in table.items():
        result.add(f"{where}: {name} deployments/s, {clients} clients", t["rate"], "/s")
        result.add(
            f"{where}: {name} CPU per deployment (all), {clients} clients", t["cpu_ms"], "ms"
        )
    add_targets(result, where, table, per_round)
    part = [f"#### On {where}", report.table_markdown(table, label)]
    paired, checked = report.paired_ratios(per_round), report.cross_check(per_round)
    if paired or checked:
        best = report.against_the_best(per_round)
        part.append(report.paired_markdown(paired, best, checked))
    statements = report.statements_by_system(runs, CLIENTS[0])
    if statements:
        part.append(report.statements_markdown(statements, CLIENTS[0], label))
    if overload:
        part.append(overload_markdown(result, where, overload))
    failed = sum(t["not_completed"] for t in table.values())
    result.notes.append(
        f"{where}: {len(per_round)} round(s), "
        f"{sum(t['deployments'] for t in table.values()):,} deployments, {failed} ended other "
        "than completed"
    )
    return "\n\n".join(part)


def main(rounds: int = ROUNDS) -> Result:
    """The benchmark, this process pinned to the load generator's CPU meanwhile (`make bench`
    runs the other benchmarks in it afterwards, on every CPU again)."""
    pinning = servers.plan_pinning()
    every_cpu = os.sched_getaffinity(0)
    if pinning:
        os.sched_setaffinity(0, pinning.load)
    try:
        return _measure_all(rounds, pinning)
    finally:
        os.sched_setaffinity(0, every_cpu)


def _measure_all(rounds: int, pinning: servers.Pinning | None) -> Result:
    result = Result(
        "(d) end-to-end throughput against same-work peers", "python -m bench.e2e_throughput"
    )
    log_dir = Path(tempfile.mkdtemp(prefix="bench-e2e-"))
    load_before = " ".join(f"{x:.2f}" for x in os.getloadavg())
    versions = peers.versions() if set(SYSTEMS) - {"ours"} else {}
    measured = report.commit()
    sections, builds = [], []
    for server in servers.servers(pinning):
        with ExitStack() as stack:
            postgres = stack.enter_context(server)
            stage = Stage(postgres, pinning)
            if "celery" in SYSTEMS:
                stage.redis_url, stage.redis, redis_version = stack.enter_context(
                    servers.redis(pinning)
                )
            else:
                redis_version = ""
            per_round, overload = measure(stage, rounds, log_dir)
        builds.append({"postgres": postgres.description, "rounds": per_round, "overload": overload})
        label = report.labeller(versions, redis_version)
        sections.append(record_build(result, postgres.description, per_round, overload, label))
    # The systems' logs and data directories stay behind only when the run fails.
    shutil.rmtree(log_dir, ignore_errors=True)
    load_after = " ".join(f"{x:.2f}" for x in os.getloadavg())
    result.notes += [
        f"commit {measured}; harness bench/e2e_throughput.py (this project's); peers revision "
        f"{peers.REVISION} (bench/peers/)"
        + (
            f", procrastinate {versions['procrastinate']}, Celery {versions['celery']}"
            if versions
            else ""
        ),
        pinning.describe()
        if pinning
        else "not pinned: the load generator shares the CPUs with the systems (its CPU per "
        "deployment is shown beside)",
        f"systems interleaved (order rotated per round), {SECONDS:g} s per run at "
        f"{', '.join(map(str, CLIENTS))} closed-loop clients after {WARMUP_S:g} s of warm-up "
        f"(medians of the rounds); load average before {load_before}, after {load_after}",
    ]
    result.extra = "\n\n".join(sections)
    if JSON_PATH:
        meta = {
            "commit": measured,
            "harness": "bench/e2e_throughput.py",
            "peers_revision": peers.REVISION,
            "versions": versions,
            "pinning": pinning.describe() if pinning else "not pinned",
            "seconds": SECONDS,
            "clients": CLIENTS,
        }
        report.to_json(JSON_PATH, meta, builds)
    return result


if __name__ == "__main__":
    print(main().markdown())
