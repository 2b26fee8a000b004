"""Retention: purge throughput and reaper sweep time on a large table (seed 001 / issue 6).

One benchmark database holds 1,000,000 finished tasks inside retention (30% with a paused
devbox), 1,000 active ones (running, applying, blocked, queued), EXPIRED finished tasks past
retention with 20 events each and no devbox, and PAUSE finished tasks whose devbox was never
paused. Everything runs through the engine's own code: Reaper.sweep() enqueues cleanup jobs,
CleanupWorker.run_once() runs them (devbox calls go to an in-process API that answers at once).
A LISTEN connection drains the NOTIFY channel throughout, as in every engine process.

1. Baseline, same run: plain batched `DELETE FROM deploy_tasks WHERE id = ANY(...)` (the cascade
   included) of BASELINE expired tasks, PURGE_BATCH per statement, no cleanup jobs.
2. Sweeps during a backlog: SWEEPS_WITH_BACKLOG x (timed reaper sweep, then one worker pass).
3. Purge throughput: one reaper sweep starts the drain, the worker purges the rest of the expired
   tasks batch by batch, as it does in production. tasks/s = tasks purged / wall time.
4. The same with DEVBOX_MIX more expired tasks, DEVBOX_PCT% of them with a devbox to delete first
   (reported, no target: a real devbox API costs an HTTP call per devbox).
5. Steady sweeps: STEADY_SWEEPS timed sweeps once nothing is expired or unpaused, right after
   the drain (the purged rows' dead index entries still there), then again after a VACUUM (what
   autovacuum does within a minute with the per-table settings of migrations/0001_initial.sql).

Run: .venv/bin/python -m bench.bench_retention [finished_rows]
Targets: every reaper sweep <= 20 ms; purge >= 10,000 tasks/s with 20 events each.
"""

from bench.common import (  # noqa: I001  (patches first: psycopg must see gevent's select)
    Result,
    fresh_database,
    machine,
    median,
    percentile,
    server_version,
    sized,
)

import sys  # noqa: E402
import time  # noqa: E402

import gevent  # noqa: E402
import psycopg  # noqa: E402

from engine.maintenance.cleanup_worker import CleanupWorker  # noqa: E402
from engine.maintenance.reaper import Reaper  # noqa: E402
from engine.db import NOTIFY_CHANNEL, Database  # noqa: E402
from engine.integrations import Integrations  # noqa: E402
from engine.operations.config import Settings  # noqa: E402
from engine.sql import queries  # noqa: E402

FINISHED = 1_000_000
ACTIVE = sized(1_000, 20)
EXPIRED = sized(36_000, 900)
DEVBOX_MIX = sized(9_000, 300)
BASELINE = sized(6_000, 300)
PAUSE = sized(200, 10)
EVENTS_PER_TASK = 20
#: Share of finished tasks with a devbox (prompt and GitHub sources run in one).
DEVBOX_PCT = 30
SWEEPS_WITH_BACKLOG = sized(30, 2)
STEADY_SWEEPS = sized(200, 5)
SWEEP_TARGET_MS = 20.0
PURGE_TARGET = 10_000.0

# Seeding only (benchmark code, like tests, may hold direct SQL; the engine never does).
SEED_FINISHED = """
INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status, source,
                          created_at, finished_at, devbox_id, devbox_paused_at)
SELECT 'bench', 'p' || (g %% 200), 'bench', 'image', 'direct',
       (ARRAY['completed', 'failed', 'cancelled']::task_status[])[1 + g %% 3],
       jsonb_build_object('kind', 'image', 'image', 'nginx:1.27', 'name', 'web-' || g),
       now() - make_interval(secs => %(age_s)s + g * %(step_s)s) - interval '1 minute',
       now() - make_interval(secs => %(age_s)s + g * %(step_s)s),
       CASE WHEN g %% 100 < %(devbox_pct)s THEN 'box-' || %(tag)s || '-' || g END,
       CASE WHEN g %% 100 < %(devbox_pct)s AND %(paused)s THEN now() END
FROM generate_series(1, %(n)s) g
"""
SEED_ACTIVE = """
INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status, source,
                          lease_owner, lease_epoch, lease_expires_at, lease_claimed_at)
SELECT 'bench', 'p' || (g %% 200), 'bench', 'image', 'direct', s.status,
       '{"kind": "image", "image": "nginx:1.27", "name": "live"}',
       CASE WHEN s.status IN ('running', 'applying') THEN 'bench-owner' END, 1,
       CASE WHEN s.status IN ('running', 'applying') THEN now() + interval '1 hour' END,
       CASE WHEN s.status IN ('running', 'applying') THEN now() END
FROM generate_series(1, %(n)s) g,
     LATERAL (SELECT (ARRAY['running', 'running', 'applying', 'blocked', 'queued']::task_status[])
                     [1 + g %% 5] AS status) s
"""
SEED_EVENTS = """
INSERT INTO deploy_task_events (task_id, kind, payload)
SELECT t.id, 'step', '{"step": "apply", "state": "done"}'
FROM deploy_tasks t, generate_series(1, %(events)s)
WHERE t.finished_at < now() - interval '30 days'
"""
BASELINE_IDS = """
SELECT id FROM deploy_tasks
WHERE status IN ('completed', 'failed', 'cancelled') AND finished_at < now() - interval '30 days'
ORDER BY finished_at LIMIT %(n)s
"""
BASELINE_DELETE = "DELETE FROM deploy_tasks WHERE id = ANY(%(ids)s::uuid[])"


class InstantDevbox:
    """A devbox API that answers at once: the benchmark measures the engine, not HTTP."""

    def __init__(self):
        self.paused = 0
        self.deleted = 0

    def create(self, *, workspace, task_id, abort):
        return f"box-{task_id}"

    def pause(self, devbox_id, *, workspace, abort):
        self.paused += 1

    def delete(self, devbox_id, *, workspace, abort):
        self.deleted += 1


def _listen(url: str, stop: list, ready: list) -> int:
    seen = 0
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        ready.append(True)
        while not stop:
            for _ in conn.notifies(timeout=0.2):
                seen += 1
    return seen


def seed(url: str, finished: int) -> float:
    started = time.perf_counter()
    day = 86400
    with psycopg.connect(url, autocommit=True) as conn:
        # Inside retention: spread over the last 29 days.
        conn.execute(
            SEED_FINISHED,
            {
                "n": finished,
                "age_s": 3600,
                "step_s": 29 * day / finished,
                "devbox_pct": DEVBOX_PCT,
                "paused": True,
                "tag": "kept",
            },
        )
        # Past retention: 31 to 60 days ago, no devbox.
        conn.execute(
            SEED_FINISHED,
            {
                "n": EXPIRED,
                "age_s": 31 * day,
                "step_s": 29 * day / EXPIRED,
                "devbox_pct": 0,
                "paused": True,
                "tag": "old",
            },
        )
        # Finished minutes ago; their runner died before it paused their devbox.
        conn.execute(
            SEED_FINISHED,
            {
                "n": PAUSE,
                "age_s": 600,
                "step_s": 1,
                "devbox_pct": 100,
                "paused": False,
                "tag": "orphan",
            },
        )
        conn.execute(SEED_ACTIVE, {"n": ACTIVE})
        conn.execute(SEED_EVENTS, {"events": EVENTS_PER_TASK})
        conn.execute("VACUUM ANALYZE")
    return time.perf_counter() - started


def seed_devbox_mix(url: str) -> None:
    """DEVBOX_MIX more tasks past retention, DEVBOX_PCT% with a (paused) devbox, 20 events each."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            SEED_FINISHED,
            {
                "n": DEVBOX_MIX,
                "age_s": 31 * 86400,
                "step_s": 1,
                "devbox_pct": DEVBOX_PCT,
                "paused": True,
                "tag": "mix",
            },
        )
        conn.execute(SEED_EVENTS, {"events": EVENTS_PER_TASK})
        conn.execute("ANALYZE deploy_tasks")


def drain(db: Database, reaper: Reaper, worker: CleanupWorker) -> tuple[int, float, list[float]]:
    """The reaper starts a purge drain, the worker finishes it: (tasks purged, seconds, pass ms)."""
    left = count(
        db, "SELECT count(*) AS n FROM deploy_tasks WHERE finished_at < now() - interval '30 days'"
    )
    passes = []
    started = time.perf_counter()
    reaper.sweep()
    while True:
        pass_started = time.perf_counter()
        busy = worker.run_once()
        passes.append((time.perf_counter() - pass_started) * 1000)
        if not busy:
            break
    elapsed = time.perf_counter() - started
    assert (
        count(
            db,
            "SELECT count(*) AS n FROM deploy_tasks WHERE finished_at < now() - interval '30 days'",
        )
        == 0
    )
    return left, elapsed, passes


def explained(url: str, name: str, **params) -> tuple[float, int]:
    """(server execution ms, shared buffers touched) of one engine statement, rolled back: the
    load-independent cost of what a sweep asks of PostgreSQL."""
    with psycopg.connect(url) as conn:
        plan = conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries[name], params
        ).fetchone()[0][0]
        conn.rollback()
    top = plan["Plan"]
    return plan["Execution Time"], top.get("Shared Hit Blocks", 0) + top.get(
        "Shared Read Blocks", 0
    )


def enqueue_costs(url: str, settings: Settings) -> dict[str, tuple[float, int]]:
    """The reaper's two cleanup sweeps, as the reaper calls them."""
    from engine.cleanup.jobs import (
        DEVBOX_PAUSE_BATCH,
        DEVBOX_PAUSE_GRACE_S,
        FAILED_JOB_COOLDOWN_S,
        PURGE_KICK,
    )

    return {
        "pause devboxes": explained(
            url,
            "cleanup_job_enqueue_devbox_pauses",
            now=None,
            limit=DEVBOX_PAUSE_BATCH,
            grace_s=DEVBOX_PAUSE_GRACE_S,
            cooldown_s=FAILED_JOB_COOLDOWN_S,
        ),
        "purge": explained(
            url,
            "cleanup_job_enqueue_purges",
            now=None,
            retention_s=settings.retention_days * 86400,
            limit=min(PURGE_KICK, settings.purge_batch),
            cooldown_s=FAILED_JOB_COOLDOWN_S,
        ),
    }


def steady_sweeps(reaper: Reaper) -> list[float]:
    times = []
    for _ in range(STEADY_SWEEPS):
        started = time.perf_counter()
        resolved = reaper.sweep()
        times.append((time.perf_counter() - started) * 1000)
        assert sum(resolved.values()) == 0, resolved
    return times


def baseline(db: Database, batch: int) -> float:
    """Plain batched deletes of BASELINE expired tasks (cascade included): tasks/s."""
    deleted = 0
    started = time.perf_counter()
    with db.pool.connection() as conn:
        while deleted < BASELINE:
            ids = [
                r["id"] for r in conn.execute(BASELINE_IDS, {"n": min(batch, BASELINE - deleted)})
            ]
            conn.execute(BASELINE_DELETE, {"ids": ids})
            deleted += len(ids)
    return deleted / (time.perf_counter() - started)


def count(db: Database, sql: str) -> int:
    with db.pool.connection() as conn:
        return conn.execute(sql).fetchone()["n"]


def main(finished: int = FINISHED) -> Result:
    result = Result(
        "Retention: purge throughput and reaper sweeps on a large table",
        "python -m bench.bench_retention",
    )
    with fresh_database() as url:
        seed_s = seed(url, finished)
        # The seeded active tasks must stay live however long a loaded machine takes.
        settings = Settings(database_url=url, queued_start_deadline_s=86400.0)
        db = Database(url, max_size=12)
        db.open()
        devbox = InstantDevbox()
        integrations = Integrations(cluster=None, cluster_label="bench", devbox=devbox)
        reaper = Reaper(db, settings)
        stop: list = []
        ready: list = []
        listener = gevent.spawn(_listen, url, stop, ready)
        while not ready:
            gevent.sleep(0.01)
        try:
            expired_before = count(
                db,
                "SELECT count(*) AS n FROM deploy_tasks "
                "WHERE finished_at < now() - interval '30 days'",
            )
            baseline_rate = baseline(db, settings.purge_batch)

            # 2. Sweeps while a backlog of expired and unpaused tasks exists.
            backlog_costs = enqueue_costs(url, settings)
            backlog_ms = []
            for _ in range(SWEEPS_WITH_BACKLOG):
                started = time.perf_counter()
                reaper.sweep()
                backlog_ms.append((time.perf_counter() - started) * 1000)
                CleanupWorker(db, settings, integrations, "bench").run_once()

            # 3. Purge throughput: the reaper starts the drain, the worker finishes it.
            left, purge_s, passes = drain(
                db, reaper, CleanupWorker(db, settings, integrations, "bench")
            )
            purge_rate = left / purge_s
            # 4. The same with devboxes to delete first.
            seed_devbox_mix(url)
            mixed, mixed_s, _ = drain(
                db, reaper, CleanupWorker(db, settings, integrations, "bench")
            )

            # 5. Steady state: nothing expired, nothing left to pause; before and after vacuum.
            unvacuumed_ms = steady_sweeps(reaper)
            with psycopg.connect(url, autocommit=True) as conn:
                conn.execute("VACUUM (ANALYZE) deploy_tasks, deploy_task_events, cleanup_jobs")
            steady_ms = steady_sweeps(reaper)
            steady_costs = enqueue_costs(url, settings)
            rows = count(db, "SELECT count(*) AS n FROM deploy_tasks")
            events = count(db, "SELECT count(*) AS n FROM deploy_task_events")
            version = server_version(url)
        finally:
            stop.append(True)
            notified = listener.get(timeout=10)
            db.close()

    every = backlog_ms + unvacuumed_ms + steady_ms
    result.add("plain batched DELETE (baseline, no jobs)", baseline_rate, "tasks/s")
    result.add(
        f"purge through cleanup jobs ({left:,} tasks, {EVENTS_PER_TASK} events each, no devbox)",
        purge_rate,
        "tasks/s",
    )
    result.add("ratio purge/baseline", purge_rate / baseline_rate, "x")
    result.add(
        f"purge, {mixed:,} tasks of which {DEVBOX_PCT}% with a devbox (API stub)",
        mixed / mixed_s,
        "tasks/s",
    )
    result.add("worker pass (one batch, no devbox), median", median(passes), "ms")
    result.add("worker pass (one batch, no devbox), max", max(passes), "ms")
    result.add("reaper sweep with a backlog, median", median(backlog_ms), "ms")
    result.add("reaper sweep with a backlog, max", max(backlog_ms), "ms")
    result.add("reaper sweep steady right after the drain, median", median(unvacuumed_ms), "ms")
    result.add("reaper sweep steady right after the drain, max", max(unvacuumed_ms), "ms")
    result.add("reaper sweep steady, median", median(steady_ms), "ms")
    result.add("reaper sweep steady, p99", percentile(steady_ms, 99), "ms")
    result.add("reaper sweep steady, max", max(steady_ms), "ms")
    for phase, costs in (("with a backlog", backlog_costs), ("steady", steady_costs)):
        for sweep, (ms, buffers) in costs.items():
            result.add(
                f"server side of the '{sweep}' sweep {phase}: time / buffers",
                ms,
                f"ms / {buffers} buffers",
            )
    result.target(
        f"every reaper sweep <= {SWEEP_TARGET_MS:g} ms (max of {len(every)}: {max(every):.1f} ms)",
        max(every) <= SWEEP_TARGET_MS,
    )
    result.target(
        f"purge >= {PURGE_TARGET:,.0f} tasks/s with {EVENTS_PER_TASK} events each "
        f"(measured {purge_rate:,.0f})",
        purge_rate >= PURGE_TARGET,
    )
    facts = machine()
    result.notes += [
        f"table: {finished:,} finished tasks inside retention + {ACTIVE:,} active + "
        f"{expired_before:,} expired ({EVENTS_PER_TASK} events each) + {PAUSE} with an unpaused "
        f"devbox; after the run {rows:,} rows and {events:,} events remain; seeded in "
        f"{seed_s:.0f} s",
        f"PURGE_BATCH {settings.purge_batch}; {len(passes)} worker passes; "
        f"{devbox.paused} devboxes paused and {devbox.deleted} deleted through jobs; the "
        f"listener drained {notified:,} notifications",
        f"PostgreSQL {version}; {facts['cpu']}; load average at the end {facts['load']}",
    ]
    return result


if __name__ == "__main__":
    print(main(int(sys.argv[1]) if len(sys.argv) > 1 else FINISHED).markdown())
    sys.exit(0)
