"""Backpressure: a process holding MAX_RUNS_PER_PROCESS runs refuses the next create (or
redeploy) at once with 503 `overloaded` and Retry-After, writes no task, counts the refusal, and
admits again once a run ends; concurrent creates never overshoot the limit."""

import gevent

from tests.helpers import IMAGE_SOURCE, scrape, total, wait_for, wait_for_status

BODY = {"projectId": "demo", "source": dict(IMAGE_SOURCE)}
REFUSED = "deploy_runs_refused_total"


def task_count(sql_conn) -> int:
    return sql_conn.execute("SELECT count(*) AS n FROM deploy_tasks").fetchone()["n"]


def test_a_full_process_refuses_until_a_run_ends(make_app, cluster, sql_conn):
    cluster.ready_after_polls = "never"  # every run holds its place until cancelled
    app = make_app(max_runs_per_process=2, readiness_timeout_s=600.0)
    client, runtime = app.test_client(), app.extensions["engine"]
    first, second = (client.post("/api/v1/tasks", json=BODY).get_json()["id"] for _ in range(2))
    assert len(runtime.runs) == 2
    refused_before = total(scrape(client), REFUSED)

    refused = client.post("/api/v1/tasks", json=BODY)
    assert refused.status_code == 503, refused.get_json()
    assert refused.get_json()["code"] == "overloaded"
    assert refused.headers["Retry-After"] == "1"
    assert task_count(sql_conn) == 2  # nothing written
    assert total(scrape(client), REFUSED) == refused_before + 1

    client.post(f"/api/v1/tasks/{first}/cancel")
    wait_for_status(client, first, "cancelled")
    wait_for(lambda: len(runtime.runs) == 1, message="the cancelled run to end")
    again = client.post("/api/v1/tasks", json=BODY)
    assert again.status_code == 201, again.get_json()

    # Full again: a redeploy counts like a create, and so does one carrying an Idempotency-Key.
    redeploy = client.post("/api/v1/tasks", json={**BODY, "predecessorTaskId": first})
    assert redeploy.status_code == 503 and redeploy.get_json()["code"] == "overloaded"
    keyed = client.post("/api/v1/tasks", json=BODY, headers={"Idempotency-Key": "k-1"})
    assert keyed.status_code == 503 and keyed.headers["Retry-After"] == "1"
    assert task_count(sql_conn) == 3
    assert total(scrape(client), REFUSED) == refused_before + 3
    assert len(runtime.runs) == 2 and any(str(t) == second for t in runtime.runs)


def test_concurrent_creates_never_overshoot_the_limit(make_app, cluster, sql_conn):
    cluster.ready_after_polls = "never"
    app = make_app(max_runs_per_process=3, readiness_timeout_s=600.0)
    client, runtime = app.test_client(), app.extensions["engine"]
    creates = [gevent.spawn(client.post, "/api/v1/tasks", json=BODY) for _ in range(12)]
    gevent.joinall(creates, timeout=60, raise_error=True)
    statuses = sorted(g.value.status_code for g in creates)
    assert statuses == [201] * 3 + [503] * 9, statuses
    assert len(runtime.runs) == 3
    assert task_count(sql_conn) == 3
