"""Failure streaks (seed 002): one durable row per failing subject, throttled log lines, ERROR
once a streak is 15 minutes old (clock pinned), one INFO on recovery."""

import logging
from datetime import UTC, datetime, timedelta

from gevent.pywsgi import WSGIServer

from engine.cleanup import jobs as cleanup_jobs
from engine.integrations.devbox import DevboxClient
from engine.maintenance import cleanup_worker as cleanup
from engine.operations.streaks import REPORT_EVERY, Streaks
from tests.helpers import free_port, wait_for

KEY = "devbox-signing-key-for-streak-tests-0123456789"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def streak_lines(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "engine.operations.streaks"]


def streak_rows(sql_conn) -> list[dict]:
    return sql_conn.execute("SELECT * FROM failure_streaks ORDER BY subject").fetchall()


def finished_tasks_with_devboxes(insert_task, n: int) -> None:
    for i in range(n):
        insert_task(
            status="completed",
            devbox_id=f"dbx-{i}",
            finished_at=datetime.now(UTC) - timedelta(hours=1),
        )


def test_a_dead_devbox_url_is_one_streak_row_with_throttled_lines_and_one_recovery(
    make_app, cluster, insert_task, sql_conn, caplog
):
    from engine.integrations import Integrations

    port = free_port()
    devbox = DevboxClient(f"http://127.0.0.1:{port}", KEY, timeout_s=2.0)
    app = make_app(
        cleanup_interval_s=3600.0,
        overrides={
            "integrations": Integrations(
                cluster=lambda kubeconfig: cluster, cluster_label="fake", devbox=devbox
            )
        },
    )
    engine = app.extensions["engine"]
    caplog.set_level(logging.INFO, logger="engine.operations.streaks")
    failures = 2 * REPORT_EVERY + 5  # 125: lines at the 1st, 60th and 120th failure
    finished_tasks_with_devboxes(insert_task, failures)
    wait_for(
        lambda: not cleanup_jobs.enqueue_devbox_pauses(engine.db),
        interval=0,
        message="every devbox pause enqueued",
    )

    def attempted_all() -> bool:
        engine.cleanup.run_once()
        attempted = sql_conn.execute(
            "SELECT count(*) AS n FROM cleanup_jobs WHERE attempts > 0"
        ).fetchone()["n"]
        return attempted >= failures

    # Bounds a failure only (a dead port refuses at once; 125 attempts take a few seconds).
    wait_for(attempted_all, timeout=120, interval=0, message=f"{failures} attempts")

    rows = streak_rows(sql_conn)
    assert [(r["subject"], r["consecutive_failures"]) for r in rows] == [
        ("integration:devbox", failures)
    ]
    assert "ConnectionError" in rows[0]["last_error"] and KEY not in rows[0]["last_error"]
    # Lines at this process's 1st, 60th and 120th failure (each quotes the durable count, which
    # concurrent attempts may have moved on by one or two).
    lines = streak_lines(caplog)
    assert [r.levelno for r in lines] == [logging.WARNING] * 3
    assert all(r.subject == "integration:devbox" for r in lines)
    assert all(
        abs(r.consecutiveFailures - n) < cleanup.JOB_CONCURRENCY
        for r, n in zip(lines, (1, REPORT_EVERY, 2 * REPORT_EVERY), strict=False)
    )

    # The devbox API comes back: the next pause succeeds, the row goes, one INFO says so.
    def devbox_api(environ, start_response):
        start_response("204 No Content", [])
        return []

    server = WSGIServer(("127.0.0.1", port), devbox_api, log=None)
    server.start()
    try:
        caplog.clear()
        sql_conn.execute(
            "UPDATE cleanup_jobs SET next_attempt_at = now() WHERE id = "
            "(SELECT min(id) FROM cleanup_jobs)"
        )
        engine.cleanup.run_once()
        assert streak_rows(sql_conn) == []
        recovered = streak_lines(caplog)
        assert [(r.levelno, r.afterConsecutiveFailures) for r in recovered] == [
            (logging.INFO, failures)
        ]
        # Successes after the recovery say nothing more.
        sql_conn.execute(
            "UPDATE cleanup_jobs SET next_attempt_at = now() WHERE state <> 'succeeded'"
        )
        engine.cleanup.run_once()
        assert (
            sql_conn.execute(
                "SELECT count(*) AS n FROM cleanup_jobs WHERE state = 'succeeded'"
            ).fetchone()["n"]
            > 1
        )
        assert len(streak_lines(caplog)) == 1
    finally:
        server.stop(timeout=1)


def test_a_streak_turns_error_once_it_is_15_minutes_old_on_a_pinned_clock(app, sql_conn, caplog):
    streaks = Streaks(app.extensions["engine"].db, owner="test")
    caplog.set_level(logging.INFO, logger="engine.operations.streaks")
    streaks.failed("reaper", RuntimeError("boom"), now=T0)
    streaks.failed("reaper", RuntimeError("boom"), now=T0 + timedelta(minutes=14, seconds=59))
    assert [r.levelno for r in streak_lines(caplog)] == [logging.WARNING]

    # Not a throttle point (the 3rd failure), but the streak just became persistent: ERROR.
    streaks.failed("reaper", RuntimeError("boom"), now=T0 + timedelta(minutes=15))
    streaks.failed("reaper", RuntimeError("boom"), now=T0 + timedelta(minutes=16))
    lines = streak_lines(caplog)
    assert [r.levelno for r in lines] == [logging.WARNING, logging.ERROR]
    assert "failing persistently" in lines[1].getMessage() and lines[1].consecutiveFailures == 3
    row = streak_rows(sql_conn)[0]
    assert (row["consecutive_failures"], row["first_failure_at"], row["last_failure_at"]) == (
        4,
        T0,
        T0 + timedelta(minutes=16),
    )

    # From then on, the throttle's lines are ERROR too.
    for minute in range(17, 17 + REPORT_EVERY - 4):
        streaks.failed("reaper", RuntimeError("boom"), now=T0 + timedelta(minutes=minute))
    assert [r.levelno for r in streak_lines(caplog)] == [
        logging.WARNING,
        logging.ERROR,
        logging.ERROR,
    ]


def test_the_durable_count_survives_a_restart_and_any_error_is_scrubbed(app, sql_conn, caplog):
    db = app.extensions["engine"].db
    caplog.set_level(logging.INFO, logger="engine.operations.streaks")
    before = Streaks(db, owner="before-restart", secret_values=["s3cr3t-signing-key"])
    for _ in range(3):
        before.failed(
            "integration:gateway",
            "POST https://user:hunter22@gw/v1 with s3cr3t-signing-key: HTTP 502",
        )
    after = Streaks(db, owner="after-restart", secret_values=["s3cr3t-signing-key"])
    after.failed("integration:gateway", "HTTP 502")
    row = streak_rows(sql_conn)[0]
    assert (row["consecutive_failures"], row["last_owner"]) == (4, "after-restart")
    # The new process logs its first failure, quoting the exact durable count.
    assert [r.consecutiveFailures for r in streak_lines(caplog)] == [1, 4]
    logged = "\n".join(r.getMessage() for r in streak_lines(caplog))
    assert "HTTP 502" in logged
    assert "hunter22" not in logged and "s3cr3t-signing-key" not in logged

    # A process that never saw the failure ends only a stale streak, not a live one.
    bystander = Streaks(db, owner="bystander")
    bystander.succeeded("integration:gateway")
    assert len(streak_rows(sql_conn)) == 1
    bystander._stale_checked.clear()
    bystander.succeeded("integration:gateway", now=row["last_failure_at"] + timedelta(minutes=10))
    assert streak_rows(sql_conn) == []
