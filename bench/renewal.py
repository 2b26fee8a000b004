"""(c) One lease-renewal tick for 10,000 held leases: engine.leases.renew_all, one statement.

The table holds the 10,000 leased rows of this process, 10,000 leased rows of another process
(untouched by the tick) and 50,000 finished rows. Baseline, measured in the same run on the same
rows: the same extension as a plain `UPDATE ... WHERE id = ANY(ids)` with no epoch/owner fence
and nothing returned. A last tick runs under EXPLAIN (ANALYZE, BUFFERS, WAL): its WAL records
and buffers show the work done whatever the machine's load (HOT updates write ~1 WAL record per
row and no index entries).

Target: one tick <= 250 ms.
"""

from bench.common import (  # noqa: I001  (patches first)
    Result,
    fresh_database,
    median,
    run_sql,
    sized,
)

import re  # noqa: E402
import time  # noqa: E402

import psycopg  # noqa: E402

from engine.core import leases  # noqa: E402
from engine.db import Database  # noqa: E402
from engine.sql import queries  # noqa: E402

HELD = sized(10_000, 50)
RUNS = sized(7, 1)
TARGET_MS = 250.0
OWNER = "bench-owner"
LEASE_TTL_S = 60.0


def _number(plan: list[str], pattern: str) -> float:
    for line in plan:
        found = re.search(pattern, line)
        if found:
            return float(found.group(1))
    return float("nan")


def _ms(fn) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


def main() -> Result:
    result = Result("(c) lease renewal tick, 10,000 held leases", "python -m bench.renewal")
    with fresh_database() as url:
        db = Database(url, max_size=4)
        db.open()
        try:
            held = {
                r["id"]: 1
                for r in run_sql(
                    db, "bench_task_insert_leased", n=HELD, status="applying", owner=OWNER
                )
            }
            run_sql(db, "bench_task_insert_leased", n=HELD, status="running", owner="another")
            run_sql(db, "bench_task_insert_finished", n=50_000)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM ANALYZE deploy_tasks")
            ids = list(held)

            def tick():
                still = leases.renew_all(db, held, owner=OWNER, lease_ttl_s=LEASE_TTL_S)
                assert len(still) == HELD, f"renewed {len(still)} of {HELD}"

            def plain():
                run_sql(db, "bench_task_extend_leases_plain", task_ids=ids, lease_ttl_s=LEASE_TTL_S)

            tick(), plain()  # warm-up
            ticks, plains = [], []
            for _ in range(RUNS):
                ticks.append(_ms(tick))
                plains.append(_ms(plain))
            # One more tick, instrumented: WAL records and buffers do not depend on machine load.
            with psycopg.connect(url, autocommit=True) as conn:
                plan = [
                    r[0]
                    for r in conn.execute(
                        "EXPLAIN (ANALYZE, BUFFERS, WAL) " + queries["task_renew_leases_if_held"],
                        {
                            "task_ids": ids,
                            "epochs": [1] * len(ids),
                            "owner": OWNER,
                            "lease_ttl_s": LEASE_TTL_S,
                            "now": None,
                        },
                    ).fetchall()
                ]
            wal_records = _number(plan, r"WAL: records=(\d+)")
            buffers = _number(plan, r"Buffers: shared hit=(\d+)")
            server_ms = _number(plan, r"Execution Time: ([\d.]+)")
        finally:
            db.close()
    tick_ms = median(ticks)
    result.add("renew_all tick (10,000 leases)", tick_ms, "ms")
    result.add("baseline plain UPDATE of the same leases", median(plains), "ms")
    ratios = [t / p for t, p in zip(ticks, plains, strict=True)]
    result.add("ratio tick / plain", median(ratios), "x")
    result.add("slowest tick", max(ticks), "ms")
    result.add("instrumented tick: WAL records", wal_records, "")
    result.add("instrumented tick: shared buffers touched", buffers, "")
    result.add("instrumented tick: server execution time", server_ms, "ms")
    result.target(f"tick <= {TARGET_MS:g} ms (measured {tick_ms:.0f} ms)", tick_ms <= TARGET_MS)
    result.notes.append(
        f"{RUNS} ticks (median), alternating with the baseline; 70,000 rows in "
        f"the table, 20,000 of them leased"
    )
    return result


if __name__ == "__main__":
    print(main().markdown())
