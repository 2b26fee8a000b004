"""Every benchmark still runs: each one at its smallest (BENCH_SMOKE=1: a few rows and requests)
against the test server, as a process of its own, as `make bench` starts it. Their numbers mean
nothing here; what this catches is a benchmark that no longer fits the engine (a statement's new
parameter, a changed signature), which otherwise shows only when someone next measures."""

import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parents[2]

#: (module, its arguments, extra environment); the in-process benchmarks and the ones that start
#: gunicorn workers. bench.bench_cancel runs on its own embedded server, the peers of
#: bench.e2e_throughput in a venv of their own (installed from the network): neither is here.
E2E_SMALLEST = {
    "BENCH_E2E_SYSTEMS": "ours",
    "BENCH_E2E_ROUNDS": "1",
    "BENCH_E2E_SECONDS": "1",
    "BENCH_E2E_CLIENTS": "2",
    "BENCH_E2E_OVERLOAD_SECONDS": "2",
    "BENCH_E2E_WINDOW_SECONDS": "1",
}
PG15 = Path("/usr/lib/postgresql/15/bin/postgres")
BENCHMARKS = [
    ("bench.transitions", [], {}),
    ("bench.create_latency", [], {}),
    ("bench.renewal", [], {}),
    ("bench.project_page", ["5"], {}),
    ("bench.profile_transition", [], {}),
    ("bench.bench_retention", ["200"], {}),
    ("bench.deployment_floor", [], {"BENCH_FLOOR_DEPLOYMENTS": "10"}),
    ("bench.bench_ws_fanout", ["--viewers", "5", "--writes", "3"], {}),
    ("bench.e2e_throughput", [], E2E_SMALLEST),
]


@pytest.mark.parametrize(
    "module, args, env", BENCHMARKS, ids=[module for module, _, _ in BENCHMARKS]
)
def test_the_benchmark_runs(pg_admin_url, module, args, env):
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        env={**os.environ, "BENCH_SMOKE": "1", "BENCH_DATABASE_URL": pg_admin_url, **env},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.strip()  # what it measured


@pytest.mark.skipif(not PG15.exists(), reason="Debian's postgresql-15: `make bench-packages`")
def test_the_end_to_end_benchmark_runs_on_its_own_postgresql_15():
    """Without BENCH_DATABASE_URL it starts Debian's PostgreSQL 15 in a directory of its own,
    reports per statement from pg_stat_statements, and stops and removes that server after."""
    env = {k: v for k, v in os.environ.items() if k != "BENCH_DATABASE_URL"}
    done = subprocess.run(
        [sys.executable, "-m", "bench.e2e_throughput"],
        cwd=ROOT,
        env={**env, **E2E_SMALLEST, "BENCH_SMOKE": "1", "BENCH_E2E_POSTGRES": "debian15"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "#### On PostgreSQL 15." in done.stdout
    assert "| statement | calls per deployment |" in done.stdout
    left = [p.info["cmdline"] for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"]]
    assert not [argv for argv in left if any("bench-pg15-" in arg for arg in argv)]
