"""(b) HTTP create -> `running`: latency of POST /api/v1/tasks until the 201 naming `running`.

In-process WSGI through Flask's test client (no sockets, no HTTP parsing: the app, the engine
and PostgreSQL only), with a fake cluster whose apply waits an hour, so every created run stays in
flight (its runner greenlet parked inside apply, as a slow cluster would hold it) and runs never
finish during the measurement. The runners' own first writes (timeline, artifacts, the move to
applying) interleave with the next requests, as they would in production.

Baseline, measured in the same run on the same app, alternating request by request with the
creates: GET /api/v1/tasks/<id> (one indexed read).
Targets: create p50 <= 3 ms and p99 <= 10 ms.
"""

from bench.common import (  # noqa: I001  (patches first)
    Result,
    fresh_database,
    median,
    percentile,
    sized,
)

import time  # noqa: E402

from gevent.event import Event  # noqa: E402

from engine.integrations import Integrations  # noqa: E402
from tests.fakes import FakeCluster  # noqa: E402

RUNS = sized(5, 1)
REQUESTS = sized(300, 20)
WARMUP = sized(50, 5)
#: Creates per run counted for statements and CPU (no reads in between).
COUNTED = sized(100, 10)
TARGET_P50_MS = 3.0
TARGET_P99_MS = 10.0
SOURCE = {"kind": "image", "image": "nginx:1.27", "name": "web", "port": 80}
#: Background loops off: the measurement is the request path and the runners it launches.
SETTINGS = dict(
    lease_renew_interval_s=3600.0,
    reaper_interval_s=3600.0,
    readiness_poll_s=1.0,
    shutdown_grace_s=1.0,
    drain_wait_s=0.0,  # the parked runs never finish: the shutdown aborts them at once
    db_pool_size=20,
    # Runs pile up in flight here (each parked in the fake cluster): no backpressure in the way.
    max_runs_per_process=1_000_000,
)


def _timed(call, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def measure(cluster_factory, runs: int) -> dict[str, list[float]]:
    """Per run: create p50/p99 and the baseline read p50, on a fresh app and database."""
    from app import create_app

    out: dict[str, list[float]] = {"p50": [], "p99": [], "read_p50": [], "ratio": []}
    with fresh_database() as url:
        app = create_app(
            {
                "database_url": url,
                **SETTINGS,
                "overrides": {
                    "integrations": Integrations(cluster=cluster_factory, cluster_label="fake")
                },
            }
        )
        client = app.test_client()
        runtime = app.extensions["engine"]

        def create():
            response = client.post("/api/v1/tasks", json={"projectId": "bench", "source": SOURCE})
            assert response.status_code == 201, response.get_json()
            assert response.get_json()["status"] == "running", response.get_json()
            return response.get_json()["id"]

        try:
            some_id = create()

            def read():
                assert client.get(f"/api/v1/tasks/{some_id}").status_code == 200

            _timed(create, WARMUP)
            _timed(read, WARMUP)
            for _ in range(runs):
                # Creates only, for the statement and CPU counts.
                before = runtime.db.pool.get_stats().get("requests_num", 0)
                cpu_before = time.process_time()
                _timed(create, COUNTED)
                out.setdefault("cpu_ms", []).append(
                    (time.process_time() - cpu_before) * 1000 / COUNTED
                )
                out.setdefault("statements", []).append(
                    (runtime.db.pool.get_stats().get("requests_num", 0) - before) / COUNTED
                )
                # Latencies: a read, then a create, alternately, so both see the same machine.
                reads, creates = [], []
                for _ in range(REQUESTS):
                    reads += _timed(read, 1)
                    creates += _timed(create, 1)
                out["p50"].append(percentile(creates, 50))
                out["p99"].append(percentile(creates, 99))
                out["read_p50"].append(percentile(reads, 50))
                out["ratio"].append(out["p50"][-1] / out["read_p50"][-1])
            out["in_flight"] = [len(runtime.runs)]
        finally:
            runtime.shutdown()
            runtime.db.close()
    return out


def main() -> Result:
    result = Result("(b) HTTP create -> running latency", "python -m bench.create_latency")
    cluster = FakeCluster(apply_delay_s=3600)
    measured = measure(lambda kubeconfig: cluster, RUNS)
    # Explanatory only: the same requests with each runner parked before its first write (its
    # cluster connection never comes up), which isolates the request path from the runners' work.
    never = Event()

    def parked(kubeconfig):
        never.wait()
        return cluster

    alone = measure(parked, 3)
    never.set()

    p50, p99 = median(measured["p50"]), median(measured["p99"])
    result.add("create p50", p50, "ms")
    result.add("create p99", p99, "ms")
    result.add("baseline GET snapshot p50", median(measured["read_p50"]), "ms")
    result.add("ratio create p50 / GET p50", median(measured["ratio"]), "x")
    result.add(
        "pool statements per create (request + its runner until apply)",
        median(measured["statements"]),
        "",
    )
    result.add(
        "CPU of this process per create (request + its runner until apply)",
        median(measured["cpu_ms"]),
        "ms",
    )
    result.add("create p50, runners parked before their first write", median(alone["p50"]), "ms")
    result.add("create p99, runners parked before their first write", median(alone["p99"]), "ms")
    result.add("pool statements per create, runners parked", median(alone["statements"]), "")
    result.add("CPU per create, runners parked", median(alone["cpu_ms"]), "ms")
    result.target(f"p50 <= {TARGET_P50_MS:g} ms (measured {p50:.2f} ms)", p50 <= TARGET_P50_MS)
    result.target(f"p99 <= {TARGET_P99_MS:g} ms (measured {p99:.2f} ms)", p99 <= TARGET_P99_MS)
    result.notes.append(
        f"in-process WSGI (Flask test client), sequential requests; {RUNS} runs of {REQUESTS} "
        f"creates after {WARMUP} warm-up (median of the runs' p50 and p99); "
        f"{measured['in_flight'][0]:,} runs were in flight at the end, each parked in the fake "
        f"cluster's apply"
    )
    return result


if __name__ == "__main__":
    print(main().markdown())
