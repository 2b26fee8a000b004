"""psycopg must be cooperative under gevent, or one slow query freezes every greenlet in a process.

psycopg picks its wait function when it is imported, so the entry point has to patch first. These
tests run two `pg_sleep(0.5)` at once and fail if they take as long as running them one after the
other: in a fresh interpreter that imports the real entry point (`app`), and through the running
app's own pool. A control run imports psycopg before patching and must serialize; it shows the
measurement can tell the two apart on this machine.
"""

import json
import subprocess
import sys
import time

import gevent
import psycopg

from tests.helpers import ROOT, wait_for

SLEEP_S = 2.0
#: Two overlapped sleeps take ~2 s; serialized ones take at least 4 s (pg_sleep is wall-clock time,
#: so a loaded machine adds only its scheduling delay): the mechanism, with room to spare.
OVERLAPPED_BELOW_S = 3.5

#: Runs in a fresh interpreter; prints {"elapsed": seconds}. `{prelude}` decides the import order.
SCRIPT = """
{prelude}
import json, sys, time
import gevent
from engine.db import Database

db = Database(sys.argv[1], max_size=4)
db.open()

def query(sql):
    with db.pool.connection() as conn:
        conn.execute(sql)

# Grow the pool to two connections first, so the measurement is the queries alone.
gevent.joinall([gevent.spawn(query, "SELECT pg_sleep(0.05)") for _ in range(2)], raise_error=True)
started = time.monotonic()
gevent.joinall([gevent.spawn(query, "SELECT pg_sleep({sleep})") for _ in range(2)],
               raise_error=True)
print(json.dumps({{"elapsed": time.monotonic() - started}}))
db.close()
"""

#: The real entry point: importing it monkey-patches before anything imports psycopg.
ENTRY_POINT_FIRST = "import app"
#: The mistake STACK_NOTES warns about: psycopg imported before gevent patches.
PSYCOPG_FIRST = "import psycopg\nfrom gevent import monkey\nmonkey.patch_all()"


def _two_sleeps_in_fresh_interpreter(prelude: str, database_url: str) -> float:
    script = SCRIPT.format(prelude=prelude, sleep=SLEEP_S)
    done = subprocess.run(
        [sys.executable, "-c", script, database_url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])["elapsed"]


def test_the_entry_point_makes_psycopg_cooperative(database_url):
    elapsed = _two_sleeps_in_fresh_interpreter(ENTRY_POINT_FIRST, database_url)
    assert elapsed < OVERLAPPED_BELOW_S, f"two pg_sleep({SLEEP_S}) serialized: {elapsed:.2f}s"


def test_control_psycopg_imported_before_patching_serializes(database_url):
    elapsed = _two_sleeps_in_fresh_interpreter(PSYCOPG_FIRST, database_url)
    assert elapsed >= 2 * SLEEP_S * 0.95, f"expected serialized sleeps, took {elapsed:.2f}s"


def test_the_running_apps_pool_overlaps_queries(runtime):
    def query(sql):
        with runtime.db.pool.connection() as conn:
            conn.execute(sql)

    gevent.joinall(
        [gevent.spawn(query, "SELECT pg_sleep(0.05)") for _ in range(2)], raise_error=True
    )
    started = time.monotonic()
    gevent.joinall(
        [gevent.spawn(query, f"SELECT pg_sleep({SLEEP_S})") for _ in range(2)], raise_error=True
    )
    elapsed = time.monotonic() - started
    assert elapsed < OVERLAPPED_BELOW_S, f"two pg_sleep({SLEEP_S}) serialized: {elapsed:.2f}s"


def test_a_slow_query_does_not_stall_requests(client, runtime, sql_conn):
    """While one greenlet waits on PostgreSQL, the app still answers a request."""

    def slow():
        with runtime.db.pool.connection() as conn:
            try:
                conn.execute("SELECT pg_sleep(60) /* the slow query */")
            except psycopg.errors.QueryCanceled:
                pass

    sleeper = gevent.spawn(slow)
    # The slow query is running on the server (not merely spawned) before the request is made.
    slow_pid = wait_for(
        lambda: sql_conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database()"
            " AND state = 'active' AND query LIKE %s",
            ("%/* the slow query */%",),
        ).fetchone(),
        30,
        message="the slow query to reach the server",
    )["pid"]
    response = client.get("/api/v1/tasks")  # a request that reads the database too
    # The mechanism: the answer came while the slow query still ran (it has 60 s to go, so no
    # loaded machine's delay can make this pass or fail by timing).
    still_sleeping = not sleeper.ready()
    sql_conn.execute("SELECT pg_cancel_backend(%s)", (slow_pid,))
    sleeper.join(timeout=30)
    assert sleeper.ready()
    assert response.status_code == 200
    assert still_sleeping
    assert response.get_json()["items"] == []
