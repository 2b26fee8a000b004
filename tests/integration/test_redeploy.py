"""Redeploy clones: the validation matrix, the concurrent race, lineage and identity reuse."""

import threading

import pytest

IDENTITY = {"templateInstanceName": "webapp-x7k2q"}


def redeploy(client, predecessor_id, **body):
    return client.post("/api/v1/tasks", json={"predecessorTaskId": str(predecessor_id), **body})


@pytest.mark.parametrize("status", ["failed", "cancelled"])
def test_failed_or_cancelled_predecessor_clones_source_target_and_identities(
    client, insert_task, status, wait_status
):
    source = {"kind": "image", "image": "nginx:1.26", "name": "api", "port": 8080}
    pred = insert_task(
        status=status,
        project_id="shop",
        source=source,
        artifact_summary={
            "resultIdentities": IDENTITY,
            "appliedResources": [{"kind": "Deployment", "name": "api"}],
        },
    )
    assert client.get(f"/api/v1/tasks/{pred['id']}").get_json()["hasAppliedResources"] is True
    response = redeploy(client, pred["id"])
    assert response.status_code == 201
    clone = response.get_json()
    assert clone["retriedFromTaskId"] == str(pred["id"])
    assert clone["projectId"] == "shop" and clone["source"] == source
    assert clone["resultIdentities"] == IDENTITY
    assert clone["status"] == "running"
    wait_status(clone["id"], "completed")


@pytest.mark.parametrize("status", ["queued", "running", "blocked", "applying", "completed"])
def test_active_or_completed_predecessor_is_409_with_its_snapshot(client, insert_task, status):
    pred = insert_task(status=status)
    response = redeploy(client, pred["id"])
    assert response.status_code == 409
    body = response.get_json()
    assert body["code"] == "predecessor_not_redeployable"
    assert body["snapshot"]["id"] == str(pred["id"]) and body["snapshot"]["status"] == status


def test_unknown_purged_or_foreign_predecessor_is_404(client, insert_task, sql_conn):
    assert redeploy(client, "00000000-0000-0000-0000-000000000000").status_code == 404
    purged = insert_task(status="failed")
    sql_conn.execute("DELETE FROM deploy_tasks WHERE id = %s", (purged["id"],))
    response = redeploy(client, purged["id"])
    assert response.status_code == 404
    assert response.get_json()["code"] == "predecessor_not_found"
    foreign = insert_task(status="failed", workspace="elsewhere")
    assert redeploy(client, foreign["id"]).status_code == 404
    # Never a silent fresh create.
    assert (
        sql_conn.execute(
            "SELECT count(*) AS n FROM deploy_tasks WHERE retried_from_task_id IS NOT NULL"
        ).fetchone()["n"]
        == 0
    )


def test_twenty_concurrent_redeploys_produce_exactly_one_clone(app, insert_task, sql_conn, cluster):
    cluster.apply_delay_s = 2  # the winner stays active while the others race
    pred = insert_task(status="failed")
    responses = []

    def one():
        responses.append(redeploy(app.test_client(), pred["id"]))

    threads = [threading.Thread(target=one) for _ in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)  # bounds a failure only
    assert not any(t.is_alive() for t in threads), "a request hung"
    codes = sorted(r.status_code for r in responses)
    assert codes == [201] + [409] * 19
    winner = next(r.get_json() for r in responses if r.status_code == 201)
    for loser in (r.get_json() for r in responses if r.status_code == 409):
        assert loser["code"] == "redeploy_already_active"
        assert loser["snapshot"]["id"] == winner["id"]
    clones = sql_conn.execute(
        "SELECT id FROM deploy_tasks WHERE retried_from_task_id = %s", (pred["id"],)
    ).fetchall()
    assert [str(c["id"]) for c in clones] == [winner["id"]]


def test_a_second_redeploy_is_allowed_once_the_first_clone_has_finished(
    client, insert_task, wait_status, cluster
):
    cluster.fail_kinds = {"Deployment"}
    pred = insert_task(status="failed")
    first = redeploy(client, pred["id"]).get_json()
    wait_status(first["id"], "failed")
    second = redeploy(client, pred["id"])
    assert second.status_code == 201


def test_edited_redeploy_uses_the_new_source_and_keeps_lineage(client, insert_task):
    pred = insert_task(
        status="failed", project_id="shop", artifact_summary={"resultIdentities": IDENTITY}
    )
    edited = {"kind": "image", "image": "nginx:1.27", "name": "api", "replicas": 3}
    clone = redeploy(client, pred["id"], source=edited).get_json()
    assert clone["source"] == edited and clone["projectId"] == "shop"
    assert clone["resultIdentities"] == IDENTITY


def test_edited_redeploy_that_retargets_gets_fresh_identities(client, insert_task):
    pred = insert_task(
        status="failed", project_id="shop", artifact_summary={"resultIdentities": IDENTITY}
    )
    clone = redeploy(client, pred["id"], projectId="other-shop").get_json()
    assert clone["projectId"] == "other-shop" and clone["resultIdentities"] == {}
    assert clone["retriedFromTaskId"] == str(pred["id"])


def test_an_edited_redeploy_that_switches_source_kind_gets_fresh_identities(
    client, insert_task, wait_status
):
    pred = insert_task(
        status="failed", project_id="shop", artifact_summary={"resultIdentities": IDENTITY}
    )
    same = redeploy(client, pred["id"]).get_json()
    assert same["resultIdentities"] == IDENTITY  # positive control: same kind, same project
    wait_status(same["id"], "completed", "failed", "cancelled")  # one active clone at a time
    other = redeploy(
        client, pred["id"], source={"kind": "template", "template": "webapp", "args": {}}
    ).get_json()
    assert other["resultIdentities"] == {} and other["projectId"] == "shop"


def test_a_chain_converges_on_the_root_identity_after_the_root_is_purged(
    client, insert_task, sql_conn, cluster, wait_status
):
    cluster.fail_kinds = {"Deployment"}
    root = insert_task(status="failed", artifact_summary={"resultIdentities": IDENTITY})
    b = redeploy(client, root["id"]).get_json()  # B allocates nothing itself
    wait_status(b["id"], "failed")
    sql_conn.execute("DELETE FROM deploy_tasks WHERE id = %s", (root["id"],))
    c = redeploy(client, b["id"]).get_json()
    assert c["resultIdentities"] == IDENTITY
    assert c["retriedFromTaskId"] == b["id"]


def test_redeploy_body_is_validated(client):
    response = client.post("/api/v1/tasks", json={"predecessorTaskId": "not-a-uuid"})
    assert response.status_code == 400 and "predecessorTaskId" in response.get_json()["fields"]
    response = client.post("/api/v1/tasks", json={"source": {"kind": "image"}, "projectId": "p"})
    assert response.status_code == 400
    assert set(response.get_json()["fields"]["source"]) == {"image", "name"}
    response = client.post(
        "/api/v1/tasks", json={"source": {"kind": "image", "image": "nginx", "name": "web"}}
    )
    assert response.status_code == 400 and set(response.get_json()["fields"]) == {"projectId"}


def test_a_one_click_redeploy_re_asks_recorded_secrets_instead_of_deploying_without_them(
    client, cluster, wait_status, sql_conn
):
    first = client.post(
        "/api/v1/tasks",
        json={
            "projectId": "demo",
            "source": {
                "kind": "image",
                "image": "nginx",
                "name": "web",
                "env": {"API_TOKEN": "tok-first-123456"},
            },
        },
    ).get_json()
    cluster.fail_kinds = {"Deployment"}
    wait_status(first["id"], "failed")
    cluster.fail_kinds = set()
    applies_before = len(cluster.calls)
    clone = redeploy(client, first["id"]).get_json()
    blocked = wait_status(clone["id"], "blocked")
    assert [i["name"] for i in blocked["pendingInputs"]] == ["API_TOKEN"]
    assert blocked["pendingInputs"][0]["sensitive"] is True
    assert len(cluster.calls) == applies_before  # nothing was applied without the secret
    response = client.post(
        f"/api/v1/tasks/{clone['id']}/input", json={"inputs": {"API_TOKEN": "tok-second-654321"}}
    )
    assert response.status_code == 200
    wait_status(clone["id"], "completed")
    secret = [c.manifest for c in cluster.calls if c.op == "apply" and c.ref.kind == "Secret"][-1]
    assert secret["stringData"] == {"API_TOKEN": "tok-second-654321"}
    dump = str(sql_conn.execute("SELECT row_to_json(t)::text FROM deploy_tasks t").fetchall())
    assert "tok-second" not in dump and "tok-first" not in dump
