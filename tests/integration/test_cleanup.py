"""Durable cleanup jobs (seed 001) and the reaper's devbox duties and retention (seed 000), on a
real PostgreSQL with a fake devbox API. The clock is pinned through `now`; nothing sleeps."""

import logging
from datetime import UTC, datetime, timedelta

import pytest

from engine.cleanup import jobs as cleanup_jobs
from engine.cleanup.jobs import MAX_ATTEMPTS, RETRY_DELAYS_S, JobState, Trigger
from engine.cleanup.process_groups import HOST
from engine.integrations import Integrations
from engine.maintenance import cleanup_worker as cleanup
from engine.maintenance.cleanup_worker import NO_DEVBOX_NOTE
from tests.fakes import FakeDevbox

DAY = timedelta(days=1)


@pytest.fixture
def devbox():
    return FakeDevbox()


@pytest.fixture
def app(make_app, cluster, devbox):
    """The app with a fake devbox; its loops stay idle: the tests drive reaper and worker."""
    return make_app(
        cleanup_interval_s=3600.0,
        overrides={
            "integrations": Integrations(
                cluster=lambda kubeconfig: cluster, cluster_label="fake", devbox=devbox
            )
        },
    )


@pytest.fixture
def engine(runtime):
    return runtime


def now_plus(delta=timedelta()) -> datetime:
    return datetime.now(UTC) + delta


def jobs(sql_conn, task_id=None):
    return sql_conn.execute(
        "SELECT * FROM cleanup_jobs WHERE %(t)s::uuid IS NULL OR task_id = %(t)s ORDER BY id",
        {"t": task_id},
    ).fetchall()


def calls(devbox, op, outcome=None) -> list[str]:
    """The devbox ids of the fake API's calls to `op` (that ended with `outcome`), in order."""
    return [
        c.devbox_id
        for c in devbox.calls
        if c.op == op and (outcome is None or c.outcome == outcome)
    ]


def task_exists(sql_conn, task_id) -> bool:
    return (
        sql_conn.execute("SELECT 1 FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()
        is not None
    )


def add_history(sql_conn, task_id, events=20):
    sql_conn.execute(
        "INSERT INTO deploy_task_events (task_id, kind) "
        "SELECT %s, 'step' FROM generate_series(1, %s)",
        (task_id, events),
    )
    sql_conn.execute(
        "INSERT INTO deploy_task_messages (task_id, role, content) VALUES (%s, 'user', 'hi')",
        (task_id,),
    )


def with_devbox(sql_conn, devbox, task, devbox_id, *, paused=False):
    """Give an arranged task a devbox the way a runner records one (row + runtime row); it
    exists in the fake devbox API unless `devbox` is None."""
    if devbox is not None:
        devbox.boxes[devbox_id] = "paused" if paused else "running"
    sql_conn.execute(
        "UPDATE deploy_tasks SET devbox_id = %s, devbox_paused_at = %s WHERE id = %s",
        (devbox_id, now_plus() if paused else None, task["id"]),
    )
    sql_conn.execute(
        "INSERT INTO task_runtimes (task_id, workspace, kind, liveness, host, owner, remote_id) "
        "VALUES (%s, %s, 'devbox', 'remote', 'elsewhere', 'elsewhere:1:x', %s)",
        (task["id"], task["workspace"], devbox_id),
    )


# -- the schema ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "typname,enum", [("cleanup_trigger", Trigger), ("cleanup_job_state", JobState)]
)
def test_python_and_postgres_enums_agree(sql_conn, typname, enum):
    labels = [
        r["enumlabel"]
        for r in sql_conn.execute(
            "SELECT enumlabel FROM pg_enum JOIN pg_type t ON t.oid = enumtypid "
            "WHERE t.typname = %s ORDER BY enumsortorder",
            (typname,),
        ).fetchall()
    ]
    assert labels == [str(m) for m in enum]


def test_recording_a_devbox_records_its_runtime_row(engine, insert_task, sql_conn):
    from engine.abort import AbortSignal
    from engine.core.handle import FencedHandle
    from engine.errors import LeaseLost

    def handle_of(task, epoch=1):
        return FencedHandle(
            engine.db, task["id"], epoch=epoch, owner=engine.owner, abort=AbortSignal()
        )

    first = insert_task(status="running", lease_owner=engine.owner, lease_epoch=1)
    handle_of(first).record_devbox("box-rec")
    [row] = sql_conn.execute("SELECT * FROM task_runtimes").fetchall()
    assert (row["task_id"], row["kind"], row["liveness"], row["remote_id"], row["owner"]) == (
        first["id"],
        "devbox",
        "remote",
        "box-rec",
        engine.owner,
    )
    assert row["host"] == HOST
    # The same devbox recorded by a later task: one row, now that task's.
    second = insert_task(status="running", lease_owner=engine.owner, lease_epoch=1)
    handle_of(second).record_devbox("box-rec")
    assert [
        (r["task_id"], r["remote_id"])
        for r in sql_conn.execute("SELECT * FROM task_runtimes").fetchall()
    ] == [(second["id"], "box-rec")]
    # Fenced: a stale epoch records nothing.
    with pytest.raises(LeaseLost):
        handle_of(insert_task(status="running", lease_owner=engine.owner), epoch=0).record_devbox(
            "box-stale"
        )
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM task_runtimes WHERE remote_id = 'box-stale'"
        ).fetchone()["n"]
        == 0
    )


# -- jobs: reuse, the ladder, fencing -----------------------------------------------------------


def test_a_repeated_trigger_reuses_the_open_job(engine, sql_conn):
    first = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-1", workspace="default")
    again = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-1", workspace="default")
    assert first["created"] and not again["created"]
    assert again["id"] == first["id"]
    assert len(jobs(sql_conn)) == 1
    # A different operation is a different job.
    other = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-2", workspace="default")
    assert other["created"] and other["id"] != first["id"]


def test_failed_attempts_wait_the_exact_ladder_then_fail_for_good(
    engine, devbox, insert_task, sql_conn
):
    task = insert_task(status="failed", finished_at=now_plus(-2 * DAY))
    with_devbox(sql_conn, devbox, task, "box-ladder")
    devbox.fail_ops.add("pause")
    t = now_plus()
    assert engine.reaper.sweep(now=t)["pause_devboxes"] == 1
    job_id = jobs(sql_conn)[0]["id"]

    for attempt in range(1, MAX_ATTEMPTS + 1):
        engine.cleanup.run_once(now=t)
        job = sql_conn.execute("SELECT * FROM cleanup_jobs WHERE id = %s", (job_id,)).fetchone()
        assert job["attempts"] == attempt
        assert "HTTP 503" in job["last_error"]
        if attempt == MAX_ATTEMPTS:
            break
        assert job["state"] == "retry_wait"
        assert job["next_attempt_at"] - t == timedelta(seconds=RETRY_DELAYS_S[attempt - 1])
        # Not a microsecond early.
        engine.cleanup.run_once(now=job["next_attempt_at"] - timedelta(microseconds=1))
        assert (
            sql_conn.execute(
                "SELECT attempts FROM cleanup_jobs WHERE id = %s", (job_id,)
            ).fetchone()["attempts"]
            == attempt
        )
        t = job["next_attempt_at"]

    assert [d / 60 for d in RETRY_DELAYS_S] == [1, 5, 15, 60, 180, 360, 720]
    assert job["state"] == "failed"
    assert job["next_attempt_at"] is None and job["completed_at"] == t
    assert len(calls(devbox, "pause")) == MAX_ATTEMPTS

    # Terminal failed is never claimed again, and within the cool-down no fresh job is minted.
    cooled = t + timedelta(seconds=cleanup_jobs.FAILED_JOB_COOLDOWN_S)
    engine.cleanup.run_once(now=cooled - timedelta(microseconds=1))
    engine.reaper.sweep(now=cooled - timedelta(microseconds=1))
    engine.cleanup.run_once(now=cooled - timedelta(microseconds=1))
    assert [(j["id"], j["state"], j["attempts"]) for j in jobs(sql_conn)] == [
        (job_id, "failed", MAX_ATTEMPTS)
    ]
    assert len(calls(devbox, "pause")) == MAX_ATTEMPTS
    # An explicit repeat of the operation gets the failed job back, not a new one.
    again = cleanup_jobs.enqueue(
        engine.db, Trigger.DEVBOX_PAUSE, jobs(sql_conn)[0]["operation_id"], {}
    )
    assert (again["id"], again["state"], again["created"]) == (job_id, "failed", False)

    # After the cool-down the sweep mints a fresh job (its own 8 attempts): never stranded.
    devbox.fail_ops.clear()
    assert streak(sql_conn, "cleanup:devbox_pause") is None
    assert engine.reaper.sweep(now=cooled)["pause_devboxes"] == 1
    # The pause that failed for good and is tried again is a persistent failure's streak ...
    assert streak(sql_conn, "cleanup:devbox_pause")["last_failure_at"] == cooled
    engine.cleanup.run_once(now=cooled)
    assert [(j["state"], j["attempts"]) for j in jobs(sql_conn)] == [
        ("failed", MAX_ATTEMPTS),
        ("succeeded", 1),
    ]
    assert devbox.boxes["box-ladder"] == "paused"
    # ... which the first successful pause ends.
    assert streak(sql_conn, "cleanup:devbox_pause") is None


def test_a_purge_that_failed_for_good_is_enqueued_again_after_the_cool_down(
    engine, devbox, client, insert_task, sql_conn, caplog
):
    """Seed 000: a failing purge is re-swept, never stranded (a devbox outage of about a day)."""
    task = insert_task(status="cancelled", finished_at=now_plus(-40 * DAY))
    with_devbox(sql_conn, devbox, task, "box-outage", paused=True)
    devbox.fail_ops.add("delete")
    t = now_plus()
    engine.reaper.sweep(now=t)
    for _ in range(MAX_ATTEMPTS):
        engine.cleanup.run_once(now=t)
        job = jobs(sql_conn)[0]
        t = job["next_attempt_at"] or job["completed_at"]
    assert (job["state"], job["attempts"]) == ("failed", MAX_ATTEMPTS)
    assert client.get(f"/api/v1/tasks/{task['id']}").status_code == 200

    cooled = t + timedelta(seconds=cleanup_jobs.FAILED_JOB_COOLDOWN_S)
    devbox.fail_ops.clear()  # the outage ends
    caplog.set_level(logging.WARNING, logger="engine.cleanup.jobs")
    # The devbox outage's attempts were integration errors (no streak per attempt)...
    assert streak(sql_conn, "retention_purge") is None
    assert engine.reaper.sweep(now=cooled)["purge"] == 1
    assert any("retention_purge: 1 job(s) enqueued again" in r.getMessage() for r in caplog.records)
    # ... the re-enqueue is what makes the persistent failure visible as a streak.
    row = streak(sql_conn, "retention_purge")
    assert row["consecutive_failures"] == 1 and row["first_failure_at"] == cooled
    assert f"failed {MAX_ATTEMPTS} attempts and were enqueued again" in row["last_error"]
    engine.cleanup.run_once(now=cooled)
    assert client.get(f"/api/v1/tasks/{task['id']}").status_code == 404
    assert [j["state"] for j in jobs(sql_conn)] == ["failed", "succeeded"]
    # The first successful purge ends the streak.
    assert streak(sql_conn, "retention_purge") is None


def streak(sql_conn, subject: str) -> dict | None:
    return sql_conn.execute(
        "SELECT * FROM failure_streaks WHERE subject = %s", (subject,)
    ).fetchone()


def test_a_stale_worker_cannot_overwrite_a_newer_attempt(engine, sql_conn):
    job = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-stale", workspace="default")
    t = now_plus()
    claim = dict(
        triggers=["devbox_delete"],
        limit=10,
        max_attempts=MAX_ATTEMPTS,
        host=HOST,
        has_devbox=True,
        attempt_timeout_s=60.0,
    )
    first = engine.db.all("cleanup_job_claim_due", worker="a", now=t, **claim)
    assert [j["attempts"] for j in first] == [1]
    # Not due again while the claim is live...
    assert (
        engine.db.all("cleanup_job_claim_due", worker="b", now=t + timedelta(seconds=59), **claim)
        == []
    )
    # ...but past its deadline the claim is abandoned and a second worker takes it.
    second = engine.db.all(
        "cleanup_job_claim_due", worker="b", now=t + timedelta(seconds=61), **claim
    )
    assert [j["attempts"] for j in second] == [2]

    stale = dict(job_id=job["id"], attempts=1)
    assert (
        engine.db.all(
            "cleanup_job_finish_if_claimed",
            job_ids=[job["id"]],
            attempts=[1],
            state="succeeded",
            note=None,
            now=None,
        )
        == []
    )
    assert (
        engine.db.one(
            "cleanup_job_retry_if_claimed",
            error="stale",
            max_attempts=MAX_ATTEMPTS,
            delays_s=list(RETRY_DELAYS_S),
            now=None,
            **stale,
        )
        is None
    )
    row = jobs(sql_conn)[0]
    assert (row["state"], row["attempts"], row["claimed_by"], row["last_error"]) == (
        "running",
        2,
        "b",
        None,
    )
    assert engine.db.all(
        "cleanup_job_finish_if_claimed",
        job_ids=[job["id"]],
        attempts=[2],
        state="succeeded",
        note=None,
        now=None,
    )
    assert jobs(sql_conn)[0]["state"] == "succeeded"


def test_an_abandoned_last_attempt_fails_for_good(engine, sql_conn):
    job = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-abandoned", workspace="default")
    t = now_plus()
    sql_conn.execute(
        "UPDATE cleanup_jobs SET state = 'running', attempts = %s, "
        "next_attempt_at = %s, last_error = 'boom' WHERE id = %s",
        (MAX_ATTEMPTS, t, job["id"]),
    )
    engine.cleanup.run_once(now=t + timedelta(seconds=1))
    row = jobs(sql_conn)[0]
    assert (row["state"], row["attempts"], row["next_attempt_at"]) == ("failed", MAX_ATTEMPTS, None)
    assert "abandoned" in row["last_error"] and "boom" in row["last_error"]


# -- idempotence: absent means done, only when typed -----------------------------------------------


def test_a_missing_devbox_completes_the_pause_job(engine, devbox, insert_task, sql_conn):
    task = insert_task(status="completed", finished_at=now_plus(-DAY))
    with_devbox(sql_conn, devbox, task, "box-gone")
    devbox.boxes.pop("box-gone")
    t = now_plus()
    engine.reaper.sweep(now=t)
    engine.cleanup.run_once(now=t)
    [job] = jobs(sql_conn)
    assert (job["state"], job["attempts"]) == ("succeeded", 1)
    assert calls(devbox, "pause", "not_found") == ["box-gone"]
    # Nothing is left running, so the reaper never asks again.
    assert (
        sql_conn.execute(
            "SELECT devbox_paused_at FROM deploy_tasks WHERE id = %s", (task["id"],)
        ).fetchone()["devbox_paused_at"]
        == t
    )
    assert engine.reaper.sweep(now=t + DAY)["pause_devboxes"] == 0


def test_an_untyped_error_that_says_not_found_stays_retryable(
    engine, devbox, insert_task, sql_conn
):
    task = insert_task(status="completed", finished_at=now_plus(-DAY))
    with_devbox(sql_conn, devbox, task, "box-404ish")
    devbox.fail_ops.add("pause")
    devbox.fail_message = "404 devbox not found"
    t = now_plus()
    engine.reaper.sweep(now=t)
    engine.cleanup.run_once(now=t)
    [job] = jobs(sql_conn)
    assert (job["state"], job["attempts"]) == ("retry_wait", 1)
    assert (
        sql_conn.execute(
            "SELECT devbox_paused_at FROM deploy_tasks WHERE id = %s", (task["id"],)
        ).fetchone()["devbox_paused_at"]
        is None
    )


def test_the_reaper_pauses_only_devboxes_no_one_will(engine, devbox, insert_task, sql_conn):
    t = now_plus()
    orphaned = insert_task(status="failed", finished_at=t - timedelta(minutes=5))
    with_devbox(sql_conn, devbox, orphaned, "box-orphaned")
    just_finished = insert_task(status="completed", finished_at=t - timedelta(seconds=5))
    # Inside the grace its own runner has to pause it.
    with_devbox(sql_conn, devbox, just_finished, "box-runner-will-pause")
    already = insert_task(status="cancelled", finished_at=t - DAY)
    with_devbox(sql_conn, devbox, already, "box-paused", paused=True)
    running = insert_task(status="running")
    with_devbox(sql_conn, devbox, running, "box-running")
    shared = insert_task(status="failed", finished_at=t - DAY)
    sql_conn.execute(
        "UPDATE deploy_tasks SET devbox_id = 'box-shared' WHERE id = ANY(%s)",
        ([shared["id"], insert_task(status="blocked")["id"]],),
    )

    assert engine.reaper.sweep(now=t)["pause_devboxes"] == 1
    assert engine.reaper.sweep(now=t)["pause_devboxes"] == 0  # the open job is reused
    engine.cleanup.run_once(now=t)
    assert calls(devbox, "pause", "ok") == ["box-orphaned"]
    assert devbox.boxes.get("box-orphaned") == "paused"
    assert (
        sql_conn.execute(
            "SELECT devbox_paused_at FROM deploy_tasks WHERE id = %s", (orphaned["id"],)
        ).fetchone()["devbox_paused_at"]
        == t
    )
    assert [j["state"] for j in jobs(sql_conn)] == ["succeeded"]


def test_the_reaper_runs_the_devbox_and_runtime_duties_after_never_started(engine):
    assert [s.name for s in engine.reaper.sweeps()][-1] == "never_started"
    assert list(engine.reaper.sweep())[-3:] == ["pause_devboxes", "purge", "orphaned_runtimes"]


# -- retention purge ------------------------------------------------------------------------------


def test_purge_deletes_the_devbox_then_the_row_and_its_history(
    engine, devbox, client, insert_task, sql_conn
):
    expired = insert_task(status="completed", finished_at=now_plus(-31 * DAY))
    with_devbox(sql_conn, devbox, expired, "box-expired", paused=True)
    add_history(sql_conn, expired["id"])
    recent = insert_task(status="failed", finished_at=now_plus(-29 * DAY))
    add_history(sql_conn, recent["id"])

    swept = engine.reaper.sweep()
    assert swept["purge"] == 1
    [job] = jobs(sql_conn)
    assert job["snapshot"]["devboxId"] == "box-expired"  # handles captured before the delete
    assert job["snapshot"]["runtimes"][0]["remote_id"] == "box-expired"
    engine.cleanup.run_once()

    assert calls(devbox, "delete", "ok") == ["box-expired"]
    assert client.get(f"/api/v1/tasks/{expired['id']}").status_code == 404
    assert client.get(f"/api/v1/tasks/{recent['id']}").status_code == 200
    counts = sql_conn.execute(
        "SELECT (SELECT count(*) FROM deploy_task_events WHERE task_id = %(t)s) AS events, "
        "(SELECT count(*) FROM deploy_task_messages WHERE task_id = %(t)s) AS messages, "
        "(SELECT count(*) FROM task_runtimes WHERE task_id = %(t)s) AS runtimes",
        {"t": expired["id"]},
    ).fetchone()
    assert counts == {"events": 0, "messages": 0, "runtimes": 0}
    assert jobs(sql_conn)[0]["state"] == "succeeded"
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s", (recent["id"],)
        ).fetchone()["n"]
        == 20
    )


def test_a_purge_whose_devbox_delete_fails_keeps_the_row_and_retries(
    engine, devbox, client, insert_task, sql_conn
):
    task = insert_task(status="cancelled", finished_at=now_plus(-40 * DAY))
    with_devbox(sql_conn, devbox, task, "box-stubborn", paused=True)
    add_history(sql_conn, task["id"])
    devbox.fail_ops.add("delete")
    t = now_plus()
    engine.reaper.sweep(now=t)
    engine.cleanup.run_once(now=t)

    [job] = jobs(sql_conn)
    assert (job["state"], job["attempts"]) == ("retry_wait", 1)
    assert "box-stubborn" in job["last_error"] and "HTTP 503" in job["last_error"]
    assert job["next_attempt_at"] == t + timedelta(seconds=RETRY_DELAYS_S[0])
    assert client.get(f"/api/v1/tasks/{task['id']}").status_code == 200
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s", (task["id"],)
        ).fetchone()["n"]
        == 20 + 0
    )  # history untouched

    devbox.fail_ops.clear()
    engine.cleanup.run_once(now=job["next_attempt_at"])
    assert client.get(f"/api/v1/tasks/{task['id']}").status_code == 404
    assert calls(devbox, "delete") == ["box-stubborn", "box-stubborn"]
    assert (jobs(sql_conn)[0]["state"], jobs(sql_conn)[0]["attempts"]) == ("succeeded", 2)


def test_a_purge_of_an_already_deleted_devbox_is_done(engine, devbox, insert_task, sql_conn):
    task = insert_task(status="failed", finished_at=now_plus(-31 * DAY))
    with_devbox(sql_conn, devbox, task, "box-long-gone")
    devbox.boxes.pop("box-long-gone")
    engine.reaper.sweep()
    engine.cleanup.run_once()
    assert not task_exists(sql_conn, task["id"])
    assert (jobs(sql_conn)[0]["state"], jobs(sql_conn)[0]["attempts"]) == ("succeeded", 1)


def test_a_purge_of_a_row_already_deleted_is_done_and_still_releases_its_devbox(
    engine, devbox, insert_task, sql_conn
):
    task = insert_task(status="failed", finished_at=now_plus(-31 * DAY))
    with_devbox(sql_conn, devbox, task, "box-orphan")
    engine.reaper.sweep()
    sql_conn.execute("DELETE FROM deploy_tasks WHERE id = %s", (task["id"],))
    engine.cleanup.run_once()
    assert jobs(sql_conn)[0]["state"] == "succeeded"
    assert calls(devbox, "delete", "ok") == ["box-orphan"]  # from the snapshot


def test_purge_emits_the_removal_event_on_a_live_stream(engine, client, insert_task, sql_conn):
    task = insert_task(status="completed", project_id="streamed")
    add_history(sql_conn, task["id"])
    assert engine.listener.connected.wait(5)
    response = client.get("/api/v1/projects/streamed/tasks/stream", buffered=False)
    frames = iter(response.response)
    first = next(frames)
    first = first.decode() if isinstance(first, bytes) else first
    assert first.startswith("event: snapshot") and str(task["id"]) in first

    t = now_plus(31 * DAY)
    engine.reaper.sweep(now=t)
    engine.cleanup.run_once(now=t)
    frame = next(frames)
    frame = frame.decode() if isinstance(frame, bytes) else frame
    assert frame == f'event: remove\ndata: {{"id":"{task["id"]}"}}\n\n'
    response.close()


def test_active_and_blocked_tasks_survive_any_purge(engine, insert_task, sql_conn):
    long_ago = now_plus(-400 * DAY)
    rows = {
        status: insert_task(status=status, created_at=long_ago, finished_at=long_ago)
        for status in (
            "queued",
            "running",
            "blocked",
            "applying",
            "completed",
            "failed",
            "cancelled",
        )
    }
    for row in rows.values():
        add_history(sql_conn, row["id"], events=2)
    t = now_plus(365 * DAY)
    assert cleanup_jobs.enqueue_purges(engine.db, retention_s=30 * 86400, limit=100, now=t) == 3
    # Even a purge job aimed straight at an active task re-checks before it deletes anything.
    for status in ("queued", "running", "blocked", "applying"):
        cleanup_jobs.enqueue(
            engine.db,
            Trigger.RETENTION_PURGE,
            f"retention_purge:{rows[status]['id']}",
            {"taskId": str(rows[status]["id"]), "workspace": "default"},
            task_id=rows[status]["id"],
            workspace="default",
            now=t,
        )
    engine.cleanup.run_once(now=t)

    survivors = {r["status"] for r in sql_conn.execute("SELECT status FROM deploy_tasks")}
    assert survivors == {"queued", "running", "blocked", "applying"}
    by_state = {str(j["task_id"]): j["state"] for j in jobs(sql_conn)}
    for status, row in rows.items():
        expected = (
            "cancelled" if status in ("queued", "running", "blocked", "applying") else "succeeded"
        )
        assert by_state[str(row["id"])] == expected, status


def test_a_purge_rechecks_retention_before_deleting(engine, insert_task, sql_conn):
    task = insert_task(status="completed", finished_at=now_plus(-31 * DAY))
    t = now_plus()
    assert cleanup_jobs.enqueue_purges(engine.db, retention_s=30 * 86400, limit=10, now=t) == 1
    # The precondition stops holding between enqueue and claim.
    sql_conn.execute("UPDATE deploy_tasks SET finished_at = %s WHERE id = %s", (t, task["id"]))
    engine.cleanup.run_once(now=t)
    assert task_exists(sql_conn, task["id"])
    [job] = jobs(sql_conn)
    assert job["state"] == "cancelled" and "retention" in job["last_error"]


def test_purge_works_in_bounded_batches_oldest_first(make_app, insert_task, sql_conn):
    runtime = make_app(cleanup_interval_s=3600.0, purge_batch=3).extensions["engine"]
    tasks = [
        insert_task(status="completed", finished_at=now_plus(-(60 - i) * DAY)) for i in range(7)
    ]

    def remaining():
        return {r["id"] for r in sql_conn.execute("SELECT id FROM deploy_tasks").fetchall()}

    assert runtime.reaper.sweep()["purge"] == 3  # the reaper starts a drain...
    assert runtime.cleanup.run_once() is True  # it purged: more may be due
    assert remaining() == {t["id"] for t in tasks[3:]}
    assert runtime.cleanup.run_once() is True  # ...the worker goes on, a batch per pass
    assert remaining() == {t["id"] for t in tasks[6:]}
    assert runtime.cleanup.run_once() is True
    assert remaining() == set()
    assert runtime.cleanup.run_once() is False  # found nothing more: the drain ends
    assert runtime.reaper.sweep()["purge"] == 0
    assert [j["state"] for j in jobs(sql_conn)] == ["succeeded"] * 7


def test_a_devbox_delete_rechecks_that_no_active_task_uses_it(
    engine, devbox, insert_task, sql_conn
):
    user = insert_task(status="running")
    with_devbox(sql_conn, devbox, user, "box-in-use")
    cleanup_jobs.enqueue_devbox_delete(engine.db, "box-in-use", workspace="default")
    engine.cleanup.run_once()
    [job] = jobs(sql_conn)
    assert job["state"] == "cancelled" and str(user["id"]) in job["last_error"]
    assert calls(devbox, "delete") == []

    sql_conn.execute(
        "UPDATE deploy_tasks SET status = 'failed', finished_at = now(), "
        "lease_owner = NULL, lease_expires_at = NULL WHERE id = %s",
        (user["id"],),
    )
    retry = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-in-use", workspace="default")
    assert retry["created"]
    engine.cleanup.run_once()
    assert calls(devbox, "delete", "ok") == ["box-in-use"]
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM task_runtimes WHERE remote_id = %s", ("box-in-use",)
        ).fetchone()["n"]
        == 0
    )


def test_without_a_devbox_integration_devbox_jobs_wait_with_a_reason(
    engine, cluster, insert_task, sql_conn
):
    # create_app always has a devbox (the sandbox's when DEVBOX_URL is unset); an engine built
    # without one must not pretend devbox work succeeded.
    worker = cleanup.CleanupWorker(
        engine.db,
        engine.settings,
        Integrations(cluster=lambda kubeconfig: cluster, cluster_label="fake", devbox=None),
        owner="no-devbox",
    )
    with_box = insert_task(status="failed", finished_at=now_plus(-31 * DAY))
    with_devbox(sql_conn, None, with_box, "box-nobody-can-reach", paused=True)
    plain = insert_task(status="failed", finished_at=now_plus(-31 * DAY))
    engine.reaper.sweep()
    worker.run_once()

    assert task_exists(sql_conn, with_box["id"]) and not task_exists(sql_conn, plain["id"])
    waiting = [j for j in jobs(sql_conn) if j["needs_devbox"]]
    assert {(j["trigger"], j["state"], j["attempts"], j["last_error"]) for j in waiting} == {
        ("retention_purge", "pending", 0, NO_DEVBOX_NOTE)
    }


def test_completed_jobs_are_forgotten_after_a_week_failed_ones_are_kept(engine, sql_conn):
    done = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-a", workspace="default")
    failed = cleanup_jobs.enqueue_devbox_delete(engine.db, "box-b", workspace="default")
    t = now_plus()
    sql_conn.execute(
        "UPDATE cleanup_jobs SET state = 'succeeded', completed_at = %s WHERE id = %s",
        (t, done["id"]),
    )
    sql_conn.execute(
        "UPDATE cleanup_jobs SET state = 'failed', completed_at = %s, "
        "next_attempt_at = NULL WHERE id = %s",
        (t, failed["id"]),
    )
    engine.cleanup.run_once(now=t + 6 * DAY)
    assert len(jobs(sql_conn)) == 2
    engine.cleanup.run_once(now=t + 8 * DAY)
    assert [j["id"] for j in jobs(sql_conn)] == [failed["id"]]


def test_the_sweeps_cost_follows_expired_rows_not_table_size(engine, sql_conn):
    """Regression: a volatile expression in a sweep's `clock` once made the planner walk the whole
    finished-task index when nothing had expired (3 million buffers on a 1M-row table)."""
    from engine.sql import queries

    sql_conn.execute(
        "INSERT INTO deploy_tasks (workspace, project_id, created_by, source_kind, runner, status,"
        " source, finished_at, devbox_id, devbox_paused_at) "
        "SELECT 'default', 'demo', 'test', 'image', 'direct', 'completed', '{}', "
        "now() - g * interval '1 minute', 'box-' || g, now() FROM generate_series(1, 20000) g"
    )
    sql_conn.execute("ANALYZE deploy_tasks")

    def buffers(name, **params):
        sql_conn.execute("BEGIN")
        plan = sql_conn.execute(
            "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries[name], params
        ).fetchone()["QUERY PLAN"][0]["Plan"]
        sql_conn.execute("ROLLBACK")
        return plan["Shared Hit Blocks"] + plan.get("Shared Read Blocks", 0)

    # 20,000 finished tasks, none past retention, none with an unpaused devbox: next to nothing.
    assert (
        buffers(
            "cleanup_job_enqueue_purges",
            now=None,
            retention_s=30 * 86400.0,
            limit=100,
            cooldown_s=43200.0,
        )
        < 20
    )
    assert (
        buffers(
            "cleanup_job_enqueue_devbox_pauses",
            now=None,
            grace_s=60.0,
            limit=50,
            cooldown_s=43200.0,
        )
        < 20
    )
    assert (
        buffers(
            "cleanup_job_purge",
            job_ids=None,
            attempts=None,
            now=None,
            retention_s=30 * 86400.0,
            limit=300,
            max_attempts=8,
            worker="w",
        )
        < 20
    )
