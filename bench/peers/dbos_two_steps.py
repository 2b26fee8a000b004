"""Peer of bench/e2e_throughput.py: DBOS durable workflows of two steps, started to done.

Runs in the peers' venv (bench/requirements-peers.txt), never the app's:
`python dbos_two_steps.py setup URL` creates the system tables, then
`python dbos_two_steps.py URL WORKFLOWS RUNS CLIENTS` prints one JSON line. CLIENTS threads
start the workflows (DBOS.start_workflow: recorded, then run in the background); a run lasts
from its first workflow recorded until its last finished (workflow_status times).
"""

import json
import sys
from concurrent.futures import ThreadPoolExecutor
from importlib.metadata import version

import psycopg
from dbos import DBOS

#: From the first workflow recorded until the last one finished (the database's clock, in ms).
SPAN = """
SELECT max(updated_at) - min(created_at) FROM dbos.workflow_status WHERE workflow_uuid = ANY(%s)
"""


@DBOS.step()
def first(i: int) -> int:
    return i


@DBOS.step()
def second(i: int) -> int:
    return i + 1


@DBOS.workflow()
def two_steps(i: int) -> int:
    return second(first(i))


def one_run(url: str, workflows: int, clients: int, offset: int) -> float:
    with ThreadPoolExecutor(clients) as pool:
        handles = list(
            pool.map(lambda i: DBOS.start_workflow(two_steps, i), range(offset, offset + workflows))
        )
    for i, handle in enumerate(handles):
        assert handle.get_result() == offset + i + 1
    ids = [handle.get_workflow_id() for handle in handles]
    with psycopg.connect(url, autocommit=True) as conn:
        span_ms = conn.execute(SPAN, (ids,)).fetchone()[0]
    return workflows / (float(span_ms) / 1000)


def launch(url: str) -> None:
    DBOS(config={"name": "bench-peer", "system_database_url": url, "log_level": "WARNING"})
    DBOS.launch()


def main(url: str, workflows: int, runs: int, clients: int) -> dict:
    launch(url)
    try:
        rates = [one_run(url, workflows, clients, i * workflows) for i in range(runs)]
    finally:
        DBOS.destroy()
    return {
        "peer": f"DBOS {version('dbos')}",
        "unit": "two-step workflows",
        "rates": rates,
        "jobs": workflows * runs,
        "own_statements": runs,
        "setup": f"1 process, {clients} threads starting workflows",
    }


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        # The first launch creates DBOS's system tables.
        launch(sys.argv[2])
        DBOS.destroy()
        sys.exit(0)
    url, workflows, runs, clients = sys.argv[1], *map(int, sys.argv[2:5])
    print(json.dumps(main(url, workflows, runs, clients)))
