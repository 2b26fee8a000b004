"""(a) Guarded transitions vs a plain single-row UPDATE, same pool, same row count.

A guarded transition (engine.core.transitions.transition) is one CTE: lock the row, CAS on status
and the lease fence, write the verdict event, and notify. It is measured as the engine makes it, in
its two forms:

- a run's own move (its claim and status moves, every transition of a deployment that is not
  cancelled): the statement does not notify; the process's runner notices (engine/core/notices.py)
  announce the moved rows once per tick, and that ticker runs here on the same pool, so its
  statements are paid for within the measured time;
- a move by anyone else (the reaper, a shutdown, a cancel of a queued task): the statement
  notifies itself.

The baseline changes the same status of the same number of rows with
`UPDATE deploy_tasks SET status = ... WHERE id = ...`, alternating with the transitions in blocks
of 100 rows. A LISTEN connection drains the channel throughout, as every engine process has one.

Target: transitions/s >= 0.7x plain UPDATEs/s, measured in the same run.
"""

from bench.common import (  # noqa: I001  (patches first)
    Result,
    fresh_database,
    median,
    run_sql,
    sized,
)

import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402

from engine.operations.config import Settings  # noqa: E402
from engine.db import NOTIFY_CHANNEL, Database  # noqa: E402
from engine.core.notices import RunnerNotices  # noqa: E402
from engine.core.status import Status  # noqa: E402
from engine.core.transitions import Fence, Move, transition  # noqa: E402

ROWS = sized(2000, 40)
#: Rows per alternation between the two.
BLOCK = sized(100, 20)
RUNS = sized(5, 1)
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


def fail_as_runner(db: Database, task_id, **kwargs) -> list[dict]:
    """The runner's move of a leased benchmark row (`bench_task_insert_leased`: epoch 1, OWNER)
    to failed, through the engine's one guarded transition; the moved rows."""
    return transition(db, runner_fails(task_id), **kwargs)


def runner_fails(task_id) -> Move:
    """The runner's move of a leased benchmark row (epoch 1, OWNER) to failed."""
    return Move(
        task_id,
        Status.FAILED,
        fence=Fence(1, OWNER),
        reason="bench",
        message="bench",
        actor="bench",
    )


#: The two forms measured, as the results name them.
RUNNERS_OWN = "a run's own move"
ANYONE_ELSES = "a move by anyone else"


def measure(db: Database, workers: int, notices: RunnerNotices) -> dict[str, float]:
    """Rows/s of the plain UPDATE and of each form of the transition, for one run on fresh rows.

    They alternate block by block, so a machine shared with other work slows all alike.
    """

    def leased_rows():
        return [
            r["id"]
            for r in run_sql(db, "bench_task_insert_leased", n=ROWS, status="applying", owner=OWNER)
        ]

    def guarded(runner_notices):
        def move(task_id):
            assert fail_as_runner(db, task_id, notices=runner_notices), "the row did not move"

        return move

    def plain(task_id):
        run_sql(db, "bench_task_set_status_plain", task_id=task_id, to="failed")

    forms = {"plain": plain, RUNNERS_OWN: guarded(notices), ANYONE_ELSES: guarded(None)}
    ids = {name: leased_rows() for name in forms}
    seconds = dict.fromkeys(forms, 0.0)
    for start in range(0, ROWS, BLOCK):
        for name, one in forms.items():
            seconds[name] += _run_block(workers, ids[name][start : start + BLOCK], one)
    return {name: ROWS / s for name, s in seconds.items()}


def main() -> Result:
    result = Result("(a) guarded transitions vs plain UPDATE", "python -m bench.transitions")
    with fresh_database() as url:
        db = Database(url, max_size=max(CONCURRENCY) + 2)
        db.open()
        stop: list = []
        listener = gevent.spawn(_listen, db, stop)
        notices = RunnerNotices(db, interval_s=Settings().runner_notice_interval_s)
        notices.start()
        run_sql(db, "bench_task_insert_finished", n=20_000)
        try:
            measure(db, 2, notices)  # warm-up: prepared statements, caches
            for workers in CONCURRENCY:
                runs = [measure(db, workers, notices) for _ in range(RUNS)]
                plain = median([r["plain"] for r in runs])
                result.add(f"plain UPDATE, {workers} client(s)", plain, "rows/s")
                for form in (RUNNERS_OWN, ANYONE_ELSES):
                    ratio = median([r[form] / r["plain"] for r in runs])
                    rate = median([r[form] for r in runs])
                    result.add(f"{form}, {workers} client(s)", rate, "rows/s")
                    result.add(f"ratio {form}/plain, {workers} client(s)", ratio, "x")
                    result.target(
                        f"ratio >= {TARGET_RATIO}, {form}, {workers} client(s) "
                        f"(measured {ratio:.2f}x)",
                        ratio >= TARGET_RATIO,
                    )
        finally:
            notices.stop()
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
