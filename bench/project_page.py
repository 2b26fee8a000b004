"""The project page with a busy project: server time and query count of GET /projects/<id>.

`python -m bench.project_page [N ...]` seeds N tasks (default 50 and 500) of one project in a
fresh database and renders the page through the app (Flask's test client: no network), timing
each render and counting the named queries it ran; then times the project stream's bootstrap
(the live dock and canvas the page opens right after).
"""

from bench.common import (  # noqa: I001  (patches first)
    Result,
    fresh_database,
    median,
    percentile,
    run_sql,
    sized,
)

import sys  # noqa: E402
import time  # noqa: E402

from app import create_app  # noqa: E402

ROUNDS = sized(15, 2)
TARGET_MS = 1000.0


def measure(n: int, result: Result) -> None:
    with fresh_database() as url:
        app = create_app({"database_url": url, "overrides": {"start_runtime": False}})
        runtime = app.extensions["engine"]
        try:
            run_sql(runtime.db, "bench_task_insert_project_board", n=n, project="busy")
            client = app.test_client()
            times = []
            for _ in range(ROUNDS + 1):
                before = runtime.db.statements.total()
                start = time.perf_counter()
                response = client.get("/projects/busy")
                times.append((time.perf_counter() - start) * 1000)
                assert response.status_code == 200, response.status_code
            times = times[1:]  # the first render compiles the templates
            size = len(response.data)
            # The named queries the last render ran (the process runs nothing else here).
            queries = runtime.db.statements.total() - before
            streams = [stream_bootstrap_ms(client) for _ in range(5)]
        finally:
            runtime.shutdown()
            runtime.db.close()
    result.add(f"{n} tasks: page time median", median(times), "ms")
    result.add(f"{n} tasks: page time p95", percentile(times, 95), "ms")
    result.add(f"{n} tasks: queries per page", queries, "")
    result.add(f"{n} tasks: page size", size / 1024, "KiB")
    result.add(f"{n} tasks: live stream bootstrap median", median(streams), "ms")
    result.target(f"{n} tasks render under {TARGET_MS:.0f} ms (median)", median(times) < TARGET_MS)


def stream_bootstrap_ms(client) -> float:
    """Time until the project stream has sent its whole bootstrap (the cards come last)."""
    start = time.perf_counter()
    response = client.get("/projects/busy/stream", buffered=False)
    try:
        for chunk in response.response:
            if b'id="cards"' in chunk:
                return (time.perf_counter() - start) * 1000
    finally:
        response.close()
    raise AssertionError("the stream ended before its bootstrap")


def main(sizes=(50, 500)) -> Result:
    result = Result("Project page with a busy project", "python -m bench.project_page")
    for n in sizes:
        measure(n, result)
    return result


if __name__ == "__main__":
    print(main([int(a) for a in sys.argv[1:]] or (50, 500)).markdown())
