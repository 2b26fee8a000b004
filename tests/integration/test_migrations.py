"""Versioned migrations: pending files applied once, in order; a current database is only read."""

import json
import shutil
import uuid

import gevent
import gevent.event
import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from engine.maintenance.reaper import Reaper
from engine.operations import migrations
from engine.operations.migrations import APPLICATION_NAME, MIGRATION_LOCK_KEY, MIGRATIONS_DIR
from tests.helpers import _with_db, wait_for


@pytest.fixture
def empty_database_url(pg_admin_url):
    """A database with nothing in it (not cloned from the migrated template)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    yield _with_db(pg_admin_url, name)
    with psycopg.connect(pg_admin_url, autocommit=True) as conn:
        conn.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )


def connect(url):
    return psycopg.connect(url, autocommit=True, row_factory=dict_row)


def ledger(url) -> list[tuple[int, bool]]:
    with connect(url) as conn:
        return [
            (r["version"], r["adopted"])
            for r in conn.execute("SELECT version, adopted FROM schema_migrations ORDER BY version")
        ]


def rows_by_table(url) -> dict[str, list[dict]]:
    with connect(url) as conn:
        tables = [
            r["tablename"]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = 'public' "
                "AND tablename <> 'schema_migrations'"
            )
        ]
        return {
            t: [
                json.loads(r["row"])
                for r in conn.execute(
                    sql.SQL("SELECT row_to_json(x)::text AS row FROM {} x").format(
                        sql.Identifier(t)
                    )
                )
            ]
            for t in tables
        }


#: Columns a later migration renamed (0012: the tenant is the workspace).
RENAMED = {"namespace": "workspace"}


def up_to(tmp_path, last: int):
    """A migrations directory holding the real files up to `last`."""
    directory = tmp_path / "migrations"
    directory.mkdir()
    for m in migrations.discover():
        if m.version <= last:
            shutil.copy(m.path, directory)
    return directory


def only_initial(tmp_path):
    directory = tmp_path / "migrations"
    directory.mkdir()
    shutil.copy(MIGRATIONS_DIR / "0001_initial.sql", directory)
    return directory


def test_a_fresh_database_gets_every_migration_once(empty_database_url):
    applied = migrations.upgrade(empty_database_url)
    files = migrations.discover()
    assert [m.version for m in applied] == [m.version for m in files]
    assert files[0].version == 1 and files[0].name == "initial"
    assert ledger(empty_database_url) == [(m.version, False) for m in files]
    assert migrations.upgrade(empty_database_url) == []
    assert all(s.applied_at and not s.unknown for s in migrations.status(empty_database_url))


def test_a_database_at_0001_with_data_upgrades_to_head_and_keeps_every_row(
    empty_database_url, tmp_path, make_app
):
    assert [m.version for m in migrations.upgrade(empty_database_url, only_initial(tmp_path))] == [
        1
    ]
    with connect(empty_database_url) as conn:
        task = conn.execute(
            "INSERT INTO deploy_tasks (namespace, project_id, created_by, source_kind, runner, "
            "status, source, finished_at, devbox_id) VALUES ('default', 'demo', 'ann', 'image', "
            "'direct', 'failed', '{\"image\": \"nginx\"}', now(), 'dbx-1') RETURNING id"
        ).fetchone()
        conn.execute(
            "INSERT INTO deploy_task_events (task_id, kind, payload) "
            "VALUES (%s, 'failed', '{\"reason\": \"x\"}')",
            (task["id"],),
        )
        conn.execute(
            "INSERT INTO deploy_task_messages (task_id, role, content) "
            "VALUES (%s, 'user', 'hello')",
            (task["id"],),
        )
        conn.execute(
            "INSERT INTO task_runtimes (task_id, namespace, kind, liveness, host, owner, "
            "remote_id) VALUES (%s, 'default', 'devbox', 'remote', 'h', 'o', 'dbx-1')",
            (task["id"],),
        )
        conn.execute(
            "INSERT INTO cleanup_jobs (operation_id, trigger, task_id, snapshot) "
            "VALUES ('op-1', 'devbox_pause', %s, '{}')",
            (task["id"],),
        )
    before = rows_by_table(empty_database_url)
    assert all(
        before[t]
        for t in (
            "deploy_tasks",
            "deploy_task_events",
            "deploy_task_messages",
            "task_runtimes",
            "cleanup_jobs",
        )
    )

    migrations.upgrade(empty_database_url)

    assert [v for v, _ in ledger(empty_database_url)] == [m.version for m in migrations.discover()]
    after = rows_by_table(empty_database_url)
    for table, rows in before.items():
        # A later migration may add or rename columns; every value that was there is still there.
        kept = [{k: row[RENAMED.get(k, k)] for k in rows[0]} for row in after[table]]
        assert sorted(map(json.dumps, kept)) == sorted(map(json.dumps, rows)), table
    # And the engine runs on it: the row reads back through the API.
    app = make_app(database_url=empty_database_url)
    snap = app.test_client().get(f"/api/v1/tasks/{task['id']}").get_json()
    assert snap["status"] == "failed"


def test_0012_renames_the_tenant_to_workspace_and_keeps_every_row(empty_database_url, tmp_path):
    migrations.upgrade(empty_database_url, up_to(tmp_path, 11))
    with connect(empty_database_url) as conn:
        task = conn.execute(
            "INSERT INTO deploy_tasks (namespace, project_id, created_by, source_kind, runner, "
            "status, source) VALUES ('team-a', 'shop', 'ann', 'image', 'direct', 'completed', "
            "'{}') RETURNING id"
        ).fetchone()["id"]
        conn.execute(
            "INSERT INTO task_runtimes (task_id, namespace, kind, liveness, host, owner) "
            "VALUES (%s, 'team-a', 'local', 'none', 'h', 'o')",
            (task,),
        )
        conn.execute(
            "INSERT INTO idempotency_keys (namespace, created_by, key, fingerprint) "
            "VALUES ('team-a', 'ann', 'k1', 'f')"
        )
        conn.execute(
            "INSERT INTO projects (namespace, project_id, created_by) "
            "VALUES ('team-a', 'blog', 'ann')"
        )
        conn.execute(
            "INSERT INTO dock_dismissals (namespace, user_id, project_id, task_id) "
            "VALUES ('team-a', 'ann', 'shop', %s)",
            (task,),
        )
        snapshots = [
            {"devboxId": "dbx-1", "namespace": "team-a", "taskId": str(task)},
            {"runtime": {"id": "r1", "namespace": "team-a", "kind": "local"}},
            {"taskId": str(task), "runtimes": [{"namespace": "team-a"}, {"kind": "devbox"}]},
            {"devboxId": "dbx-2"},  # the control: a snapshot without the key stays as it is
        ]
        for n, snap in enumerate(snapshots):
            conn.execute(
                "INSERT INTO cleanup_jobs (operation_id, trigger, namespace, snapshot) "
                "VALUES (%s, 'devbox_delete', 'team-a', %s::jsonb)",
                (f"op-{n}", json.dumps(snap)),
            )

    assert [m.version for m in migrations.upgrade(empty_database_url)][0] == 12

    with connect(empty_database_url) as conn:
        for table in (
            "deploy_tasks",
            "task_runtimes",
            "idempotency_keys",
            "projects",
            "dock_dismissals",
            "cleanup_jobs",
        ):
            got = conn.execute(
                sql.SQL("SELECT workspace FROM {}").format(sql.Identifier(table))
            ).fetchall()
            assert got and {r["workspace"] for r in got} == {"team-a"}, table
        assert (
            conn.execute(
                "SELECT count(*) AS n FROM information_schema.columns "
                "WHERE column_name = 'namespace' AND table_schema = 'public'"
            ).fetchone()["n"]
            == 0
        )
        assert conn.execute("SELECT to_regclass('deploy_tasks_by_workspace') AS i").fetchone()["i"]
        stored = [
            r["snapshot"]
            for r in conn.execute("SELECT snapshot FROM cleanup_jobs ORDER BY operation_id")
        ]
        assert stored == [
            {"devboxId": "dbx-1", "workspace": "team-a", "taskId": str(task)},
            {"runtime": {"id": "r1", "workspace": "team-a", "kind": "local"}},
            {"taskId": str(task), "runtimes": [{"workspace": "team-a"}, {"kind": "devbox"}]},
            {"devboxId": "dbx-2"},
        ]
        conn.execute("LISTEN deploy_tasks")
        conn.execute(
            "SELECT notify_task_changed(workspace => 'team-a', project_id => 'shop', "
            "task_id => %s)",
            (task,),
        )
        payload = json.loads(next(conn.notifies(timeout=5)).payload)
        assert payload == {"workspace": "team-a", "project": "shop", "task": str(task)}


def test_a_database_created_by_the_old_schema_file_is_adopted_without_running_it(
    empty_database_url,
):
    with connect(empty_database_url) as conn:
        conn.execute((MIGRATIONS_DIR / "0001_initial.sql").read_text())
        # Marks whether 0001 runs again: it would re-create this index.
        conn.execute("DROP INDEX deploy_tasks_by_namespace")

    migrations.upgrade(empty_database_url)

    assert ledger(empty_database_url)[0] == (1, True)
    with connect(empty_database_url) as conn:
        assert (
            conn.execute("SELECT to_regclass('deploy_tasks_by_namespace') AS i").fetchone()["i"]
            is None
        )
        # Positive control: the ledger really is the one the schema answers to.
        assert conn.execute("SELECT to_regclass('deploy_tasks') AS t").fetchone()["t"]


def test_pending_files_apply_in_numeric_order_each_in_its_own_transaction(
    empty_database_url, tmp_path
):
    # An empty database: the template carries every real migration, numbers the probes reuse.
    database_url = empty_database_url
    directory = only_initial(tmp_path)
    (directory / "9003_second.sql").write_text("INSERT INTO order_probe (step) VALUES ('second');")
    (directory / "9002_first.sql").write_text(
        "CREATE TABLE order_probe (n serial, step text);"
        " INSERT INTO order_probe (step) VALUES ('first');"
    )
    (directory / "9004_broken.sql").write_text(
        "INSERT INTO order_probe (step) VALUES ('broken'); SELECT no_such_function();"
    )

    with pytest.raises(psycopg.errors.UndefinedFunction):
        migrations.upgrade(database_url, directory)

    assert [v for v, _ in ledger(database_url)] == [1, 9002, 9003]
    with connect(database_url) as conn:
        steps = [r["step"] for r in conn.execute("SELECT step FROM order_probe ORDER BY n")]
    assert steps == ["first", "second"]  # 9004's insert rolled back with it
    assert [
        s.version for s in migrations.status(database_url, directory) if s.applied_at is None
    ] == [9004]


def test_concurrent_boots_apply_each_migration_once(empty_database_url):
    boots = [gevent.spawn(migrations.upgrade, empty_database_url) for _ in range(4)]
    gevent.joinall(boots, timeout=60, raise_error=True)
    applied = [m.version for b in boots for m in b.value]
    assert sorted(applied) == [m.version for m in migrations.discover()]
    assert [v for v, _ in ledger(empty_database_url)] == sorted(applied)


def held_locks(conn, application_name) -> list[dict]:
    return conn.execute(
        "SELECT l.locktype, coalesce(c.relname, '') AS relation, l.mode, l.granted "
        "FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid "
        "LEFT JOIN pg_class c ON c.oid = l.relation "
        "WHERE a.application_name = %s AND l.locktype IN ('relation', 'advisory') "
        "AND a.datname = current_database()",
        (application_name,),
    ).fetchall()


def test_booting_a_current_database_takes_no_lock_stronger_than_access_share(
    database_url, tmp_path, make_app
):
    """EXCLUSIVE mode conflicts with every table lock except ACCESS SHARE: a boot that finishes
    while another transaction holds it on every table (and holds the migration lock) took none."""
    with connect(database_url) as holder, connect(database_url) as observer:
        tables = [
            r["tablename"]
            for r in holder.execute("SELECT tablename FROM pg_tables WHERE schemaname = 'public'")
        ]
        assert "schema_migrations" in tables and "deploy_tasks" in tables
        holder.execute("BEGIN")
        holder.execute(
            sql.SQL("LOCK TABLE {} IN EXCLUSIVE MODE").format(
                sql.SQL(", ").join(map(sql.Identifier, tables))
            )
        )
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK_KEY,))

        # Positive control: with one migration pending, the same boot waits for the lock.
        directory = only_initial(tmp_path)
        (directory / "0099_pending.sql").write_text("SELECT 1;")
        blocked = gevent.spawn(migrations.upgrade, database_url, directory)
        waiting = wait_for(
            lambda: [
                lock for lock in held_locks(observer, APPLICATION_NAME) if not lock["granted"]
            ],
            message="the pending boot to wait",
        )
        assert waiting[0]["locktype"] == "advisory"
        observer.execute(
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity "
            "WHERE application_name = %s AND wait_event_type = 'Lock'",
            (APPLICATION_NAME,),
        )
        with pytest.raises(psycopg.errors.QueryCanceled):
            blocked.get(timeout=10)
        wait_for(lambda: not held_locks(observer, APPLICATION_NAME), message="the control to end")

        # A current database: the whole boot (migrations, pool, app) finishes under the locks.
        observed = []
        stop = gevent.event.Event()

        def observe():
            while not stop.is_set():
                observed.extend(held_locks(observer, APPLICATION_NAME))
                gevent.sleep(0)

        sampler = gevent.spawn(observe)
        boot = gevent.spawn(make_app, overrides={"start_runtime": False})
        boot.join(timeout=30)
        stop.set()
        sampler.join(5)
        assert boot.successful(), f"boot blocked or failed; migrator locks: {observed}"
        holder.execute("ROLLBACK")
    assert {lock["mode"] for lock in observed} <= {"AccessShareLock"}, observed
    print(
        "locks held by the migrator during a current boot:",
        sorted({(lock["relation"], lock["mode"]) for lock in observed}),
    )


def test_a_current_boot_reads_only_the_ledger_with_access_share(database_url):
    """What a current boot locks, observed: it waits on ACCESS EXCLUSIVE of the ledger, and the
    lock it waits for is ACCESS SHARE on schema_migrations, the only lock it asks for."""
    with connect(database_url) as holder, connect(database_url) as observer:
        holder.execute("BEGIN")
        holder.execute("LOCK TABLE schema_migrations IN ACCESS EXCLUSIVE MODE")
        boot = gevent.spawn(migrations.upgrade, database_url)
        waiting = wait_for(
            lambda: [
                lock for lock in held_locks(observer, APPLICATION_NAME) if not lock["granted"]
            ],
            message="the boot to read the ledger",
        )
        granted = [lock for lock in held_locks(observer, APPLICATION_NAME) if lock["granted"]]
        holder.execute("ROLLBACK")
        assert boot.get(timeout=30) == []
    assert [(lock["relation"], lock["mode"]) for lock in waiting] == [
        ("schema_migrations", "AccessShareLock")
    ]
    assert [lock for lock in granted if lock["relation"] not in ("", "pg_class", "pg_locks")] == []


def test_boots_beside_running_sweepers_never_fail_or_stall_them(
    database_url, make_app, runtime, insert_task
):
    for _ in range(20):
        insert_task(status="running", lease_expires_at=psycopg.sql.SQL("now() - interval '1 s'"))
    reaper = Reaper(runtime.db, runtime.settings)
    worker = runtime.cleanup
    errors, sweeps = [], []
    stop = gevent.event.Event()

    def sweep_forever(fn):
        while not stop.is_set():
            try:
                fn()
                sweeps.append(1)
            except Exception as exc:  # noqa: BLE001 - the test reports every failure
                errors.append(exc)
            gevent.sleep(0)

    sweepers = [
        gevent.spawn(sweep_forever, reaper.sweep),
        gevent.spawn(sweep_forever, worker.run_once),
    ]
    try:
        wait_for(lambda: len(sweeps) >= 5, message="the sweepers to run")
        for _ in range(10):
            make_app(overrides={"start_runtime": False})
        swept_during_boots = len(sweeps)
        wait_for(lambda: len(sweeps) > swept_during_boots + 5, message="the sweepers to go on")
    finally:
        stop.set()
        gevent.joinall(sweepers, timeout=10)
    assert errors == []
    assert [v for v, _ in ledger(database_url)] == [m.version for m in migrations.discover()]


def flask_db(url, *args):
    import os
    import subprocess
    import sys

    from tests.helpers import ROOT

    return subprocess.run(
        [sys.executable, "-m", "flask", "--app", "wsgi", "db", *args],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": url},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_db_commands_show_and_apply_pending_migrations(empty_database_url):
    pending_run = flask_db(empty_database_url, "status")
    assert pending_run.returncode == 1, pending_run.stderr
    assert "0001  initial" in pending_run.stdout and "pending" in pending_run.stdout
    # Loading the app for a command boots nothing: the database is still empty.
    with connect(empty_database_url) as conn:
        assert conn.execute("SELECT to_regclass('deploy_tasks') AS t").fetchone()["t"] is None

    upgraded = flask_db(empty_database_url, "upgrade")
    assert upgraded.returncode == 0, upgraded.stderr
    assert "applied 0001_initial" in upgraded.stdout

    current = flask_db(empty_database_url, "status", "--json")
    assert current.returncode == 0, current.stderr
    assert {json.loads(line)["state"] for line in current.stdout.splitlines()} == {"applied"}
