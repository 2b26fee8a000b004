"""Blocked: a leaseless parked state that waits indefinitely and resumes by an inline claim."""

from datetime import timedelta

from engine.core.status import Status


def test_blocked_waits_indefinitely_through_every_reaper_sweep(runtime, insert_task, client):
    task = insert_task(status="blocked")
    far = task["created_at"] + timedelta(days=3650)
    resolved = runtime.reaper.sweep(now=far)
    assert sum(resolved.values()) == 0
    assert client.get(f"/api/v1/tasks/{task['id']}").get_json()["status"] == "blocked"


def test_input_submission_claims_inline_and_resumes(client, insert_task, wait_status, sql_conn):
    task = insert_task(
        status="blocked",
        lease_epoch=3,
        artifact_summary={"pendingInputs": [{"name": "REGION", "type": "string"}]},
    )
    blocked = client.get(f"/api/v1/tasks/{task['id']}").get_json()
    assert blocked["pendingInputs"] == [{"name": "REGION", "type": "string"}]
    response = client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"REGION": "eu"}})
    assert response.status_code == 200
    claimed = response.get_json()
    assert claimed["status"] == "running" and claimed["pendingInputs"] is None
    stored = sql_conn.execute(
        "SELECT lease_epoch, lease_claimed_at FROM deploy_tasks WHERE id = %s", (task["id"],)
    ).fetchone()
    assert stored["lease_epoch"] == 4 and stored["lease_claimed_at"] is not None
    wait_status(task["id"], "completed")


def test_input_on_a_task_that_is_not_blocked_is_409(client, insert_task):
    for status in (Status.RUNNING, Status.COMPLETED):
        task = insert_task(status=str(status))
        response = client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"a": "b"}})
        assert response.status_code == 409
        assert response.get_json()["code"] == "task_not_blocked"
        assert response.get_json()["snapshot"]["status"] == str(status)


def test_input_body_is_validated(client, insert_task):
    task = insert_task(status="blocked")
    assert client.post(f"/api/v1/tasks/{task['id']}/input", json={}).status_code == 400
    response = client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"a": 1}})
    assert response.status_code == 400 and response.get_json()["code"] == "invalid_request"
    assert client.get(f"/api/v1/tasks/{task['id']}").get_json()["status"] == "blocked"
