"""Prometheus metrics (prometheus-client).

Instruments defined here are updated in-process where the work happens. Under gunicorn
(PROMETHEUS_MULTIPROC_DIR set by gunicorn.conf.py before any worker starts) every worker writes
its numbers to that directory and a scrape of any worker adds them up; under `python app.py` and
in tests the default single-process registry is used. What the database already knows (tasks by
status, cleanup jobs, failure streaks) is read at scrape time by `DatabaseCollector`, once per
scrape, by whichever process answers.

Label values are bounded: statuses, verdicts, sweep and integration names, subject kinds. Never a
task id, a workspace or anything a user typed.
"""

import functools
import time
from contextlib import contextmanager

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily

from engine.operations import config
from engine.operations.streaks import subject_kind

PREFIX = "deploy"
#: Wider than the default buckets: a deployment takes seconds to many minutes.
TASK_DURATION_BUCKETS = (1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, float("inf"))
FAST_BUCKETS = (
    0.001,
    0.0025,
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1,
    2.5,
    5,
    10,
    float("inf"),
)

TRANSITIONS = Counter(f"{PREFIX}_task_transitions", "Status transitions, by verdict.", ["verdict"])
TASK_DURATION = Histogram(
    f"{PREFIX}_task_duration_seconds",
    "From create to a terminal status, by outcome.",
    ["outcome"],
    buckets=TASK_DURATION_BUCKETS,
)
ACTION_DURATION = Histogram(
    f"{PREFIX}_action_duration_seconds",
    "Create and cancel requests, from any surface (API, pages, tools).",
    ["action"],
    buckets=FAST_BUCKETS,
)
RENEWAL_DURATION = Histogram(
    f"{PREFIX}_lease_renewal_duration_seconds", "One lease renewal tick.", buckets=FAST_BUCKETS
)
RUN_ABORTS = Counter(
    f"{PREFIX}_run_aborts",
    "Runs this process stopped by an abort, by reason (cancel, lease_lost, shutdown).",
    ["reason"],
)
RUNS_REFUSED = Counter(
    f"{PREFIX}_runs_refused",
    "Creates and input resumes refused with 503 because the process ran MAX_RUNS_PER_PROCESS.",
)
LEASES_HELD = Gauge(
    f"{PREFIX}_leases_held", "Leases held by live processes.", multiprocess_mode="livesum"
)
SWEEP_DURATION = Histogram(
    f"{PREFIX}_reaper_sweep_duration_seconds",
    "One reaper sweep (`all` is the whole pass).",
    ["sweep"],
    buckets=FAST_BUCKETS,
)
NOTIFY_LAG = Histogram(
    f"{PREFIX}_notify_lag_seconds",
    "From pg_notify to this process's listener (probe notifications).",
    buckets=FAST_BUCKETS,
)
STREAM_VIEWERS = Gauge(
    f"{PREFIX}_stream_viewers", "Open SSE and websocket viewers.", multiprocess_mode="livesum"
)
INTEGRATION_DURATION = Histogram(
    f"{PREFIX}_integration_call_duration_seconds",
    "Integration calls, by integration and operation.",
    ["integration", "operation"],
    buckets=FAST_BUCKETS,
)
INTEGRATION_ERRORS = Counter(
    f"{PREFIX}_integration_call_errors",
    "Failed integration calls, by integration and operation.",
    ["integration", "operation"],
)


@contextmanager
def timed(histogram, **labels):
    """Observe the duration of the block (also when it raises)."""
    start = time.perf_counter()
    try:
        yield
    finally:
        (histogram.labels(**labels) if labels else histogram).observe(time.perf_counter() - start)


def timing(histogram, **labels):
    """Decorator: observe every call's duration."""

    def decorate(fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with timed(histogram, **labels):
                return fn(*args, **kwargs)

        return wrapper

    return decorate


def record_transitions(rows: list[dict], verdicts: dict[str, str], to: str, terminal: bool) -> None:
    """Count the verdicts of moved rows; for a terminal move, each task's create-to-end time."""
    for row in rows:
        TRANSITIONS.labels(verdict=verdicts.get(str(row.get("previous_status")), "unknown")).inc()
        if terminal and row.get("finished_at") and row.get("created_at"):
            TASK_DURATION.labels(outcome=to).observe(
                max(0.0, (row["finished_at"] - row["created_at"]).total_seconds())
            )


class DatabaseCollector:
    """Gauges read from the database at scrape time: tasks, cleanup jobs, failure streaks."""

    def __init__(self, db):
        self.db = db

    def collect(self):
        tasks = GaugeMetricFamily(
            f"{PREFIX}_tasks",
            "Active tasks, by status and source kind.",
            labels=["status", "source_kind"],
        )
        for row in self.db.all("task_count_active_by_status"):
            tasks.add_metric([row["status"], row["source_kind"]], row["n"])
        yield tasks
        jobs = GaugeMetricFamily(
            f"{PREFIX}_cleanup_jobs",
            "Cleanup jobs, by trigger and state.",
            labels=["trigger", "state"],
        )
        attempts = GaugeMetricFamily(
            f"{PREFIX}_cleanup_job_attempts",
            "Attempts made by the cleanup jobs of a trigger and state.",
            labels=["trigger", "state"],
        )
        for row in self.db.all("cleanup_job_count_by_state"):
            jobs.add_metric([row["trigger"], row["state"]], row["n"])
            attempts.add_metric([row["trigger"], row["state"]], row["attempts"])
        yield jobs
        yield attempts
        streaks = GaugeMetricFamily(
            f"{PREFIX}_failure_streaks",
            "Current failure streaks, by subject kind.",
            labels=["subject"],
        )
        longest = GaugeMetricFamily(
            f"{PREFIX}_failure_streak_consecutive_failures",
            "The longest current streak's count, by subject kind.",
            labels=["subject"],
        )
        oldest = GaugeMetricFamily(
            f"{PREFIX}_failure_streak_age_seconds",
            "The oldest current streak's age, by subject kind.",
            labels=["subject"],
        )
        by_kind: dict[str, list] = {}
        for row in self.db.all("streak_list", now=None):
            entry = by_kind.setdefault(subject_kind(row["subject"]), [0, 0, 0.0])
            entry[0] += 1
            entry[1] = max(entry[1], row["consecutive_failures"])
            entry[2] = max(entry[2], row["age"].total_seconds())
        for kind, (n, most, age_s) in sorted(by_kind.items()):
            streaks.add_metric([kind], n)
            longest.add_metric([kind], most)
            oldest.add_metric([kind], age_s)
        yield streaks
        yield longest
        yield oldest


def multiprocess_dir() -> str | None:
    # Read at call time: gunicorn's master exports the directory it made to its workers.
    return config.read("prometheus_multiproc_dir") or None


def exposition(db) -> tuple[bytes, str]:
    """The text exposition of every metric (all workers' numbers under gunicorn)."""
    registry = CollectorRegistry()
    if multiprocess_dir():
        from prometheus_client import multiprocess

        multiprocess.MultiProcessCollector(registry)
    else:
        from prometheus_client import REGISTRY

        registry = _Merged(REGISTRY, registry)
    registry.register(DatabaseCollector(db))
    return generate_latest(registry), CONTENT_TYPE_LATEST


class _Merged(CollectorRegistry):
    """The process-wide default registry plus per-scrape collectors (single-process mode)."""

    def __init__(self, default: CollectorRegistry, extra: CollectorRegistry):
        super().__init__(auto_describe=False)
        self._default = default
        self._extra = extra

    def register(self, collector) -> None:
        self._extra.register(collector)

    def collect(self):
        yield from self._default.collect()
        yield from self._extra.collect()
