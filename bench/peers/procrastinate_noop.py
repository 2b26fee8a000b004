"""Peer of bench/e2e_throughput.py: procrastinate no-op jobs, deferred to done, end to end.

Runs in the peers' venv (bench/requirements-peers.txt), never the app's:
`python procrastinate_noop.py setup URL` applies the schema, then
`python procrastinate_noop.py URL JOBS RUNS CLIENTS` prints one JSON line. One worker process
(concurrency CONCURRENCY, LISTEN/NOTIFY on) runs the jobs; this process defers them from CLIENTS
concurrent coroutines; a run lasts from its first job deferred until its last succeeded.
"""

import asyncio
import json
import subprocess
import sys

import procrastinate
import psycopg

CONCURRENCY = 16
#: How often the deferring process looks whether every job is done; the rate itself comes from
#: the jobs' event times (the database's clock), as ours comes from created_at / finished_at.
DONE_POLL_S = 0.1
#: Jobs of one run (their `i` in [from, to)) that succeeded, and the seconds from the first
#: deferred to the last succeeded.
SUCCEEDED = """
SELECT count(*) FILTER (WHERE e.type = 'succeeded'),
       extract(epoch FROM max(e.at) FILTER (WHERE e.type = 'succeeded')
                        - min(e.at) FILTER (WHERE e.type = 'deferred'))
FROM procrastinate_jobs j JOIN procrastinate_events e ON e.job_id = j.id
WHERE (j.args->>'i')::int >= %s AND (j.args->>'i')::int < %s
"""


def make_app(url: str) -> procrastinate.App:
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))

    @app.task(name="noop", queue="bench")
    async def noop(i: int) -> None:
        return None

    return app


def worker(url: str) -> None:
    make_app(url).run_worker(queues=["bench"], concurrency=CONCURRENCY, wait=True)


async def one_run(app, url: str, jobs: int, clients: int, offset: int) -> tuple[float, int]:
    task = app.tasks["noop"]
    remaining = list(range(offset, offset + jobs))

    async def client():
        while remaining:
            await task.defer_async(i=remaining.pop())

    await asyncio.gather(*(client() for _ in range(clients)))
    polls = 0
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        while True:
            polls += 1
            cur = await conn.execute(SUCCEEDED, (offset, offset + jobs))
            done, span_s = await cur.fetchone()
            if done >= jobs:
                return jobs / float(span_s), polls
            await asyncio.sleep(DONE_POLL_S)


async def main(url: str, jobs: int, runs: int, clients: int) -> dict:
    app = make_app(url)
    async with app.open_async():
        proc = subprocess.Popen([sys.executable, __file__, "worker", url])
        try:
            rates, polls = [], 0
            for i in range(runs):
                rate, n = await one_run(app, url, jobs, clients, i * jobs)
                rates.append(rate)
                polls += n
        finally:
            proc.terminate()
            proc.wait(30)
    return {
        "peer": f"procrastinate {procrastinate.__version__}",
        "unit": "no-op jobs",
        "rates": rates,
        "jobs": jobs * runs,
        "own_statements": polls,
        "setup": f"1 worker process (concurrency {CONCURRENCY}), {clients} deferring coroutines",
    }


async def setup(url: str) -> None:
    app = make_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


if __name__ == "__main__":
    if sys.argv[1] == "worker":
        worker(sys.argv[2])
    elif sys.argv[1] == "setup":
        asyncio.run(setup(sys.argv[2]))
    else:
        url, jobs, runs, clients = sys.argv[1], *map(int, sys.argv[2:5])
        print(json.dumps(asyncio.run(main(url, jobs, runs, clients))))
