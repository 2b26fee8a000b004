"""No deadlock between engine statements (issue 25, item 3): leases expiring mid-run on one of
three engine runtimes (each its own pool) while the other two reap them and renew their own, 400
runs. PostgreSQL's own count of deadlocks in the test database (pg_stat_database.deadlocks) is
the measure: exact, and it counts every statement, whoever sent it."""

import gevent
import psycopg

from tests.helpers import IMAGE_SOURCE, wait_for

RUNS = 400
#: Runs stay in flight, checkpointing once a second (the workload never turns ready).
IN_FLIGHT = dict(readiness_poll_s=1.0)


def deadlocks(admin_url: str, database: str) -> int:
    with psycopg.connect(admin_url, autocommit=True) as conn:
        return conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = %s", (database,)
        ).fetchone()[0]


def provoke_a_deadlock(database_url: str, a, b) -> None:
    """Two transactions locking two tasks in opposite orders: PostgreSQL ends one of them."""
    first = psycopg.connect(database_url)
    second = psycopg.connect(database_url)
    touch = "UPDATE deploy_tasks SET updated_at = now() WHERE id = %s"
    try:
        first.execute(touch, (a,))
        second.execute(touch, (b,))
        waiting = gevent.spawn(first.execute, touch, (b,))
        gevent.sleep(0)  # let it send its statement and wait on the lock
        try:
            second.execute(touch, (a,))
        except psycopg.errors.DeadlockDetected:
            pass
        second.rollback()
        try:
            waiting.get(timeout=30)
        except psycopg.errors.DeadlockDetected:
            pass
        first.rollback()
    finally:
        first.close()
        second.close()


def test_leases_expiring_mid_run_on_one_of_three_runtimes_deadlock_nothing(
    make_app, cluster, database_url, pg_admin_url, insert_task, sql_conn
):
    database = psycopg.conninfo.conninfo_to_dict(database_url)["dbname"]
    # The control: the measure sees a deadlock when there is one.
    before = deadlocks(pg_admin_url, database)
    provoke_a_deadlock(database_url, insert_task()["id"], insert_task()["id"])
    wait_for(lambda: deadlocks(pg_admin_url, database) > before, 30, message="the control deadlock")
    before = deadlocks(pg_admin_url, database)

    cluster.ready_after_polls = "never"
    # Its leases are never renewed (QUIET: renewal off) and last a second: they expire mid-run.
    victim = make_app(lease_ttl_s=1.0, **IN_FLIGHT)
    reapers = [
        make_app(lease_ttl_s=60.0, lease_renew_interval_s=0.2, reaper_interval_s=0.05, **IN_FLIGHT)
        for _ in range(2)
    ]
    apps = [victim, *reapers]
    clients = [a.test_client() for a in apps]
    created = [[] for _ in apps]

    def create(i: int) -> None:
        which = i % len(apps)
        response = clients[which].post(
            "/api/v1/tasks",
            json={"projectId": "demo", "source": {**IMAGE_SOURCE, "name": f"web-{i}"}},
        )
        assert response.status_code == 201, response.get_json()
        created[which].append(response.get_json()["id"])

    gevent.joinall([gevent.spawn(create, i) for i in range(RUNS)], raise_error=True)
    expired = created[0]

    def resolved() -> bool:
        return sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_tasks WHERE id = ANY(%s::uuid[]) "
            "AND status = 'failed' AND failure_reason = 'interrupted'",
            (expired,),
        ).fetchone()["n"] == len(expired)

    wait_for(resolved, 120, message="the reapers to resolve every expired lease")
    # The others ran on, renewed, beside the sweeps.
    others = sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_tasks "
        "WHERE id = ANY(%s::uuid[]) AND status IN ('running', 'applying')",
        (created[1] + created[2],),
    ).fetchone()["n"]
    assert others == RUNS - len(expired)
    # Every other session ends before the count is read: a backend flushes its statistics when
    # it exits (an idle one only every ten seconds).
    for app in apps:
        runtime = app.extensions["engine"]
        runtime.shutdown()
        runtime.db.close()
    others = (
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid()"
    )
    sql_conn.execute(f"SELECT pg_terminate_backend(pid) FROM ({others}) o")
    wait_for(lambda: not sql_conn.execute(others).fetchall(), 30, message="the sessions to end")
    assert deadlocks(pg_admin_url, database) == before
