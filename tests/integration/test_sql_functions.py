"""The SQL functions the named queries share (migrations/0003): the task NOTIFY and "expired"."""

import json
import uuid

import psycopg


def test_a_task_change_notifies_ids_only_and_a_purge_says_removed(sql_conn, database_url):
    task_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN deploy_tasks")
        sql_conn.execute("SELECT notify_task_changed('ws', 'shop', %s)", (task_id,))
        sql_conn.execute(
            "SELECT notify_task_changed('ws', 'shop', %s, removed => true)", (task_id,)
        )
        got = [json.loads(n.payload) for n in listener.notifies(timeout=10, stop_after=2)]
    changed = {"workspace": "ws", "project": "shop", "task": str(task_id)}
    assert got == [changed, {**changed, "removed": True}]


def test_expired_is_inlined_so_its_cutoff_stays_an_index_condition(sql_conn):
    plan = "\n".join(
        row["QUERY PLAN"]
        for row in sql_conn.execute(
            "EXPLAIN SELECT id FROM deploy_tasks t "
            "WHERE task_expired(t.status, t.finished_at, now() - interval '30 days')"
        )
    )
    assert "finished_at <" in plan  # the control: the condition is in the plan
    assert "task_expired" not in plan


def test_a_lease_holders_write_notifies_the_lease_as_it_left_it(sql_conn, database_url):
    task_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN deploy_tasks")
        sql_conn.execute(
            "SELECT notify_task_changed('ws', 'shop', %s, status => 'applying', epoch => 3, "
            "owner => 'host-a:1:abc', cancel => false)",
            (task_id,),
        )
        got = [json.loads(n.payload) for n in listener.notifies(timeout=10, stop_after=1)]
    assert got == [
        {
            "workspace": "ws",
            "project": "shop",
            "task": str(task_id),
            "lease": {"status": "applying", "epoch": 3, "owner": "host-a:1:abc", "cancel": False},
        }
    ]


def test_a_runner_notice_says_runner_and_carries_no_lease(sql_conn, database_url):
    task_id = uuid.uuid4()
    with psycopg.connect(database_url, autocommit=True) as listener:
        listener.execute("LISTEN deploy_tasks")
        sql_conn.execute("SELECT notify_task_changed('ws', 'shop', %s, runner => true)", (task_id,))
        got = [json.loads(n.payload) for n in listener.notifies(timeout=10, stop_after=1)]
    assert got == [{"workspace": "ws", "project": "shop", "task": str(task_id), "runner": True}]
