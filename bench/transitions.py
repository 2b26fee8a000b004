"""(a) Guarded transitions vs a plain single-row UPDATE, same pool, same row count.

A guarded transition (engine.transitions.transition) is one CTE: lock the row, CAS on status and
the lease fence, write the verdict event, pg_notify. The baseline changes the same status of the
same number of rows with `UPDATE deploy_tasks SET status = ... WHERE id = ...`, alternating with
the transitions in blocks of 100 rows. A LISTEN connection drains the channel throughout, as every
engine process has one.

Target: transitions/s >= 0.7x plain UPDATEs/s, measured in the same run.
"""

from bench.common import Result, fresh_database, median, run_sql  # noqa: I001  (patches first)

import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

from engine.db import NOTIFY_CHANNEL, Database  # noqa: E402
from engine.status import Status  # noqa: E402
from engine.transitions import Guard, transition  # noqa: E402

ROWS = 2000
#: Rows per alternation between the two.
BLOCK = 100
RUNS = 5
CONCURRENCY = (1, 8)
TARGET_RATIO = 0.7
OWNER = "bench-owner"


def _listen(db: Database, stop: list) -> int:
    seen = 0
    with db.dedicated_connection() as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        while not stop:
            for _ in conn.notifies(timeout=0.2):
                seen += 1
    return seen


def _run_block(workers: int, ids: list, one) -> float:
    """Seconds to run `one(id)` over `ids`, split across `workers` greenlets."""
    slices = [ids[i::workers] for i in range(workers)]

    def work(chunk):
        for task_id in chunk:
            one(task_id)

    started = time.perf_counter()
    gevent.joinall([gevent.spawn(work, chunk) for chunk in slices], raise_error=True)
    return time.perf_counter() - started


def measure(db: Database, workers: int) -> tuple[float, float]:
    """(guarded transitions/s, plain UPDATEs/s) for one run on fresh rows.

    The two alternate block by block, so a machine shared with other work slows both alike.
    """
    guarded_ids = [
        r["id"]
        for r in run_sql(db, "bench_task_insert_leased", n=ROWS, status="applying", owner=OWNER)
    ]
    plain_ids = [
        r["id"]
        for r in run_sql(db, "bench_task_insert_leased", n=ROWS, status="applying", owner=OWNER)
    ]
    fence = Guard(expect_epoch=1, expect_owner=OWNER)

    def guarded(task_id):
        moved = transition(
            db, task_id, Status.FAILED, guard=fence, reason="bench", message="bench", actor="bench"
        )
        assert moved, "the guarded transition did not move the row"

    def plain(task_id):
        run_sql(db, "bench_task_set_status_plain", task_id=task_id, to="failed")

    plain_s = guarded_s = 0.0
    for start in range(0, ROWS, BLOCK):
        plain_s += _run_block(workers, plain_ids[start : start + BLOCK], plain)
        guarded_s += _run_block(workers, guarded_ids[start : start + BLOCK], guarded)
    return ROWS / guarded_s, ROWS / plain_s


def main() -> Result:
    result = Result("(a) guarded transitions vs plain UPDATE", "python -m bench.transitions")
    with fresh_database() as url:
        db = Database(url, max_size=max(CONCURRENCY) + 2)
        db.open()
        stop: list = []
        listener = gevent.spawn(_listen, db, stop)
        run_sql(db, "bench_task_insert_finished", n=20_000)
        try:
            measure(db, 2)  # warm-up: prepared statements, caches
            for workers in CONCURRENCY:
                runs = [measure(db, workers) for _ in range(RUNS)]
                guarded = median([g for g, _ in runs])
                plain = median([p for _, p in runs])
                ratio = median([g / p for g, p in runs])
                result.add(f"plain UPDATE, {workers} client(s)", plain, "rows/s")
                result.add(f"guarded transition, {workers} client(s)", guarded, "rows/s")
                result.add(f"ratio guarded/plain, {workers} client(s)", ratio, "x")
                result.target(
                    f"ratio >= {TARGET_RATIO} with {workers} client(s) (measured {ratio:.2f}x)",
                    ratio >= TARGET_RATIO,
                )
        finally:
            stop.append(True)
            notified = listener.get(timeout=10)
            db.close()
    result.notes.append(
        f"{ROWS} rows per phase, {RUNS} runs per concurrency (median of each), "
        f"20,000 finished rows in the table; one LISTEN connection drained "
        f"{notified:,} notifications"
    )
    return result


if __name__ == "__main__":
    print(main().markdown())
    sys.exit(0)
