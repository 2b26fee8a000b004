"""Where a guarded transition's time goes: the transition against variants that each drop a part.

Not a target of its own: run it when (a) misses, to see which part costs what. Variants run
interleaved in small blocks so a machine shared with other work slows them all alike.

  plain            UPDATE deploy_tasks SET status = ... WHERE id = ...       (the baseline)
  plain+notify     the same UPDATE plus the engine's pg_notify, in one statement
  cas-only         task_transition's guarded UPDATE alone: no event, no NOTIFY (the floor of a
                   guarded write: what no change to the event or the notification can go below)
  cte-no-notify    the engine's task_transition with its NOTIFY removed
  transition       engine.core.transitions.transition (CAS + event + notify), returning what a mover
                   reads back (task_transition_moved: 10 columns)
  whole-row        the same returning the whole task row (26 columns: a claim, a cancel)

The raw variants return the same 10 columns as `transition`.

Client CPU per call is measured with process_time (this process only), so the rest of each
call is server work, the commit's WAL flush and scheduling.
"""

from bench.common import fresh_database, median, run_sql, sized  # noqa: I001  (patches first)

import time  # noqa: E402

import gevent  # noqa: E402

from engine.db import Database, _adapt, write_key  # noqa: E402
from engine.sql import queries  # noqa: E402
from bench.transitions import OWNER, fail_as_runner, runner_fails  # noqa: E402
from engine.core.transitions import statement_params  # noqa: E402

ROWS = sized(1200, 40)
BLOCK = sized(50, 20)
PLAIN = "UPDATE deploy_tasks SET status = %(to)s::task_status WHERE id = %(task_id)s"
PLAIN_NOTIFY = """WITH moved AS (
    UPDATE deploy_tasks SET status = %(to)s::task_status WHERE id = %(task_id)s
    RETURNING id, workspace, project_id
)
SELECT pg_notify('deploy_tasks', json_build_object(
    'workspace', workspace, 'project', project_id, 'task', id)::text) FROM moved"""
#: Where task_transition_moved's last SELECT (the returned rows and the NOTIFY) begins.
NOTIFYING_SELECT = "\nSELECT m."


def _cut(sql: str, *, event: bool) -> str | None:
    """task_transition_moved without its NOTIFY (and without its event unless `event`); None if
    the statement no longer has the shape this cuts along."""
    head, found, tail = sql.rpartition(NOTIFYING_SELECT)
    columns, found_case, _ = tail.partition(", CASE WHEN %(notify)s::bool")
    if not (found and found_case):
        return None
    if not event:
        head, found, _ = head.rpartition("), recorded AS (")
        if not found:
            return None
        head += ")\n"
    return f"{head}{NOTIFYING_SELECT}{columns} FROM moved m;"


def variants(db: Database) -> dict:
    no_notify = _cut(queries["task_transition_moved"], event=True)
    cas_only = _cut(queries["task_transition_moved"], event=False)

    def raw(sql, params):
        with db.pool.connection() as conn:
            cur = conn.execute(sql, _adapt(params))
            return cur.fetchall() if cur.pgresult.nfields else None

    def cte_params(task_id):
        # Passed as the engine passes them (engine/core/transitions.py): array literals.
        return statement_params(runner_fails(task_id), notify=True, move_key=write_key())

    found = {
        "plain": lambda i: raw(PLAIN, {"task_id": i, "to": "failed"}),
        "plain+notify": lambda i: raw(PLAIN_NOTIFY, {"task_id": i, "to": "failed"}),
        "transition": lambda i: fail_as_runner(db, i),
        "whole-row": lambda i: fail_as_runner(db, i, whole_rows=True),
    }
    if cas_only:
        found["cas-only"] = lambda i: raw(cas_only, cte_params(i))
    if no_notify:
        found["cte-no-notify"] = lambda i: raw(no_notify, cte_params(i))
    return found


def measure(db: Database, workers: int) -> dict[str, dict[str, float]]:
    """Per variant: rows/s and client CPU per row, interleaved block by block."""
    fns = variants(db)
    ids = {
        name: [
            r["id"]
            for r in run_sql(db, "bench_task_insert_leased", n=ROWS, status="applying", owner=OWNER)
        ]
        for name in fns
    }
    wall = dict.fromkeys(fns, 0.0)
    cpu = dict.fromkeys(fns, 0.0)
    for start in range(0, ROWS, BLOCK):
        for name, fn in fns.items():
            block = ids[name][start : start + BLOCK]
            slices = [block[w::workers] for w in range(workers)]
            t0, c0 = time.perf_counter(), time.process_time()
            gevent.joinall(
                [gevent.spawn(lambda s=s, fn=fn: [fn(i) for i in s]) for s in slices],
                raise_error=True,
            )
            wall[name] += time.perf_counter() - t0
            cpu[name] += time.process_time() - c0
    return {name: {"rate": ROWS / wall[name], "cpu_us": cpu[name] / ROWS * 1e6} for name in fns}


def main() -> str:
    lines = [
        "| clients | variant | rows/s | x plain | client CPU/row |",
        "| --- | --- | --- | --- | --- |",
    ]
    with fresh_database() as url:
        db = Database(url, max_size=10)
        db.open()
        try:
            run_sql(db, "bench_task_insert_finished", n=20_000)
            measure(db, 1)  # warm-up
            for workers in (1, 8):
                runs = [measure(db, workers) for _ in range(3)]
                names = runs[0].keys()
                plain = median([r["plain"]["rate"] for r in runs])
                for name in names:
                    rate = median([r[name]["rate"] for r in runs])
                    cpu = median([r[name]["cpu_us"] for r in runs])
                    lines.append(
                        f"| {workers} | {name} | {rate:,.0f} | {rate / plain:.2f} | {cpu:.0f} µs |"
                    )
        finally:
            db.close()
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main())
