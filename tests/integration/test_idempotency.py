"""Idempotency-Key on creating requests: replay, reuse, in flight, expiry and purge."""

import uuid

import gevent
import psycopg
from psycopg.types.json import Jsonb

from engine.lifecycle import idempotency
from tests.helpers import IMAGE_SOURCE, wait_for

BODY = {"projectId": "demo", "source": IMAGE_SOURCE}


def post(client, path, body, key):
    return client.post(path, json=body, headers={"Idempotency-Key": key})


def task_count(sql_conn) -> int:
    return sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"]


def test_a_repeated_create_replays_the_first_answer(client, sql_conn):
    key = f'"{uuid.uuid4()}"'  # the draft's Structured Field string form
    first = post(client, "/api/v1/tasks", BODY, key)
    assert first.status_code == 201 and "Idempotent-Replayed" not in first.headers
    again = post(client, "/api/v1/tasks", BODY, key)
    assert again.status_code == 201 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json() == first.get_json()
    assert task_count(sql_conn) == 1
    # Positive control: another key is another task.
    other = post(client, "/api/v1/tasks", BODY, str(uuid.uuid4()))
    assert other.status_code == 201 and other.get_json()["id"] != first.get_json()["id"]
    assert task_count(sql_conn) == 2


def test_the_same_key_for_another_request_is_422(client, sql_conn):
    key = str(uuid.uuid4())
    assert post(client, "/api/v1/tasks", BODY, key).status_code == 201
    changed = post(client, "/api/v1/tasks", {**BODY, "projectId": "other"}, key)
    assert changed.status_code == 422 and changed.get_json()["code"] == "idempotency_key_reused"
    elsewhere = post(client, f"/api/v1/tasks/{uuid.uuid4()}/input", {"inputs": {}}, key)
    assert elsewhere.status_code == 422
    assert task_count(sql_conn) == 1


def _first_request_open(database_url, app, key):
    """A connection holding `key` the way a first request does: taken in its transaction,
    not committed yet."""
    holder = psycopg.connect(database_url)
    asked = idempotency.Request("default", "dev", "POST", "/api/v1/tasks", BODY)
    holder.execute(
        "INSERT INTO idempotency_keys (workspace, created_by, key, fingerprint) "
        "VALUES ('default', 'dev', %s, %s)",
        (key, idempotency.fingerprint(app.secret_key.encode(), asked)),
    )
    return holder


def _waiting_on_a_lock(sql_conn) -> bool:
    return sql_conn.execute(
        "SELECT count(*) AS n FROM pg_stat_activity "
        "WHERE datname = current_database() AND wait_event_type = 'Lock'"
    ).fetchone()["n"]


def test_a_duplicate_waits_for_the_open_first_request_and_replays_its_answer(
    app, client, sql_conn, database_url
):
    key = str(uuid.uuid4())
    holder = _first_request_open(database_url, app, key)
    duplicate = gevent.spawn(post, client, "/api/v1/tasks", BODY, key)
    wait_for(lambda: _waiting_on_a_lock(sql_conn), message="the duplicate to wait for the key")
    kept = {"id": "the-first-answer"}
    holder.execute(
        "UPDATE idempotency_keys SET response_status = 201, response_body = %s WHERE key = %s",
        (Jsonb(kept), key),
    )
    holder.commit()
    holder.close()
    answer = duplicate.get(timeout=30)
    assert answer.status_code == 201 and answer.headers["Idempotent-Replayed"] == "true"
    assert answer.get_json() == kept
    assert task_count(sql_conn) == 0


def test_a_first_request_that_dies_leaves_nothing_and_the_duplicate_runs_at_once(
    app, client, sql_conn, database_url
):
    key = str(uuid.uuid4())
    holder = _first_request_open(database_url, app, key)
    duplicate = gevent.spawn(post, client, "/api/v1/tasks", BODY, key)
    wait_for(lambda: _waiting_on_a_lock(sql_conn), message="the duplicate to wait for the key")
    holder.close()  # the first request's process died: its transaction is gone with it
    answer = duplicate.get(timeout=30)
    assert answer.status_code == 201 and "Idempotent-Replayed" not in answer.headers
    assert task_count(sql_conn) == 1


def test_a_first_request_open_past_the_wait_is_409_in_flight(
    app, client, sql_conn, database_url, monkeypatch
):
    monkeypatch.setattr(idempotency, "IN_FLIGHT_WAIT_S", 0.2)
    key = str(uuid.uuid4())
    holder = _first_request_open(database_url, app, key)
    try:
        busy = post(client, "/api/v1/tasks", BODY, key)
        assert busy.status_code == 409 and busy.get_json()["code"] == "idempotency_key_in_flight"
        assert task_count(sql_conn) == 0
    finally:
        holder.close()
    # Positive control: with the holder gone, the same request runs.
    assert post(client, "/api/v1/tasks", BODY, key).status_code == 201
    assert task_count(sql_conn) == 1


def test_a_key_left_unanswered_by_an_older_release_is_taken_over(app, client, sql_conn):
    key = str(uuid.uuid4())
    asked = idempotency.Request("default", "dev", "POST", "/api/v1/tasks", BODY)
    sql_conn.execute(
        "INSERT INTO idempotency_keys (workspace, created_by, key, fingerprint) "
        "VALUES ('default', 'dev', %s, %s)",
        (key, idempotency.fingerprint(app.secret_key.encode(), asked)),
    )
    answer = post(client, "/api/v1/tasks", BODY, key)
    assert answer.status_code == 201 and "Idempotent-Replayed" not in answer.headers
    assert post(client, "/api/v1/tasks", BODY, key).headers["Idempotent-Replayed"] == "true"
    assert task_count(sql_conn) == 1


def test_error_answers_are_replayed_and_bad_keys_refused(client):
    key = str(uuid.uuid4())
    missing = {"predecessorTaskId": str(uuid.uuid4())}
    first = post(client, "/api/v1/tasks", missing, key)
    assert first.status_code == 404 and first.get_json()["code"] == "predecessor_not_found"
    again = post(client, "/api/v1/tasks", missing, key)
    assert again.status_code == 404 and again.headers["Idempotent-Replayed"] == "true"
    for bad in ("", "has space", "x" * 256, "é"):
        refused = client.post("/api/v1/tasks", json=BODY, headers={"Idempotency-Key": bad})
        assert refused.status_code == 400, bad
        assert refused.get_json()["fields"] == {"Idempotency-Key": ["not a valid key"]}


def test_input_submission_is_idempotent(client, insert_task, sql_conn, wait_status):
    task = insert_task(
        status="blocked", artifact_summary={"pendingInputs": [{"name": "REGION", "type": "string"}]}
    )
    key = str(uuid.uuid4())
    path = f"/api/v1/tasks/{task['id']}/input"
    first = post(client, path, {"inputs": {"REGION": "eu"}}, key)
    assert first.status_code == 200 and first.get_json()["status"] == "running"
    wait_status(task["id"], "completed")
    again = post(client, path, {"inputs": {"REGION": "eu"}}, key)
    assert again.status_code == 200 and again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["status"] == "running"  # the first answer, not a new one
    # Without the key the repeat is what it always was: the task is no longer blocked.
    assert client.post(path, json={"inputs": {"REGION": "eu"}}).status_code == 409
    resumed = sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s AND kind = 'status' "
        "AND payload->>'verdict' = 'resumed'",
        (task["id"],),
    ).fetchone()["n"]
    assert resumed == 1


def test_chat_tools_take_the_key_as_an_argument(client, sql_conn):
    args = {**BODY, "idempotencyKey": str(uuid.uuid4())}
    first = client.post("/api/v1/tools/create_deployment", json=args)
    again = client.post("/api/v1/tools/create_deployment", json=args)
    assert first.status_code == 201 and again.status_code == 201
    assert again.headers["Idempotent-Replayed"] == "true"
    assert again.get_json()["id"] == first.get_json()["id"]
    assert task_count(sql_conn) == 1
    reused = client.post("/api/v1/tools/create_deployment", json={**args, "projectId": "elsewhere"})
    assert reused.status_code == 422 and reused.get_json()["code"] == "idempotency_key_reused"
    assert task_count(sql_conn) == 1


def test_expired_keys_are_forgotten_and_purged_by_the_cleanup_worker(client, runtime, sql_conn):
    old, fresh = str(uuid.uuid4()), str(uuid.uuid4())
    assert post(client, "/api/v1/tasks", BODY, old).status_code == 201
    assert post(client, "/api/v1/tasks", BODY, fresh).status_code == 201
    sql_conn.execute(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = %s",
        (old,),
    )
    # An expired key is a new key: the request runs again.
    rerun = post(client, "/api/v1/tasks", BODY, old)
    assert rerun.status_code == 201 and "Idempotent-Replayed" not in rerun.headers
    assert task_count(sql_conn) == 3
    sql_conn.execute(
        "UPDATE idempotency_keys SET created_at = now() - interval '25 hours' WHERE key = %s",
        (old,),
    )
    runtime.cleanup.run_once()
    kept = {r["key"] for r in sql_conn.execute("SELECT key FROM idempotency_keys").fetchall()}
    assert kept == {fresh}


def test_racing_redeploys_with_their_own_keys_keep_the_one_clone_rule(
    client, cluster, insert_task, sql_conn
):
    import gevent

    cluster.ready_after_polls = "never"  # the clone stays active: a second one is refused
    failed = insert_task(status="failed")
    body = {"predecessorTaskId": str(failed["id"])}
    keys = [str(uuid.uuid4()), str(uuid.uuid4())]
    racers = [gevent.spawn(post, client, "/api/v1/tasks", body, k) for k in keys]
    answers = [r.get(timeout=30) for r in racers]
    assert sorted(a.status_code for a in answers) == [201, 409]
    refused = next(a for a in answers if a.status_code == 409).get_json()
    assert refused["code"] == "redeploy_already_active"
    # Each key replays its own answer.
    for key, answer in zip(keys, answers, strict=False):
        again = post(client, "/api/v1/tasks", body, key)
        assert again.status_code == answer.status_code
        assert again.headers["Idempotent-Replayed"] == "true"
    clones = sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_tasks WHERE retried_from_task_id = %s", (failed["id"],)
    ).fetchone()["n"]
    assert clones == 1
