"""The engine in one process against real PostgreSQL, integrations faked at their boundary.

Everything is asserted through what production reads: API responses (snapshots, events, lists),
/healthz, and the fake cluster's record of calls.
"""

from datetime import datetime, timedelta

import pytest

from tests.helpers import IMAGE_SOURCE, events, snapshot, wait_for, wait_for_status

# -- helpers ---------------------------------------------------------------------------------------


def post_task(client, source=None, project_id="demo"):
    response = client.post(
        "/api/v1/tasks", json={"projectId": project_id, "source": source or dict(IMAGE_SOURCE)}
    )
    assert response.status_code == 201, response.get_json()
    return response.get_json()


def status_events(client, task_id):
    return [e["payload"] for e in events(client, task_id) if e["kind"] == "status"]


def runs_in_flight(client) -> int:
    return client.get("/healthz").get_json()["running"]


def db_now(sql_conn):
    return sql_conn.execute("SELECT now() AS now").fetchone()["now"]


def row_of(sql_conn, task_id):
    return sql_conn.execute("SELECT * FROM deploy_tasks WHERE id = %s", (task_id,)).fetchone()


def event_count(sql_conn, task_id) -> int:
    return sql_conn.execute(
        "SELECT count(*) AS n FROM deploy_task_events WHERE task_id = %s", (task_id,)
    ).fetchone()["n"]


DEPLOYMENT = {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web", "namespace": "demo"}
SERVICE = {
    "apiVersion": "v1",
    "kind": "Service",
    "name": "web",
    "namespace": "demo",
    "endpoint": "web.demo.svc:80",
}  # where it answers, for the canvas card


def subset(payload: dict, expected: dict) -> bool:
    """`payload` carries every key of `expected` with that value (more keys may be added)."""
    return {k: payload.get(k) for k in expected} == expected


def without_action(resources):
    return [{k: v for k, v in r.items() if k != "action"} for r in resources]


# -- create and run --------------------------------------------------------------------------------


def test_create_answers_running_because_the_claim_is_stored(client, cluster):
    cluster.apply_delay_s = 60  # park the runner inside its first apply
    created = client.post("/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE})
    assert created.status_code == 201
    body = created.get_json()
    assert (body["status"], body["phase"]) == ("running", "starting")
    moves = status_events(client, body["id"])
    assert subset(moves[0], {"from": "queued", "to": "running", "verdict": "claimed", "by": "dev"})
    assert [e["kind"] for e in events(client, body["id"])][0] == "created"


def test_create_while_draining_is_refused_and_stores_nothing(client, runtime):
    runtime.shutdown()
    response = client.post("/api/v1/tasks", json={"projectId": "demo", "source": IMAGE_SOURCE})
    assert response.status_code == 503
    assert response.get_json()["code"] == "shutting_down"
    assert client.get("/api/v1/tasks").get_json()["items"] == []


def test_the_runner_completes_only_once_the_workload_is_ready(client, cluster):
    cluster.ready_after_polls = "never"
    task_id = post_task(client)["id"]
    wait_for(lambda: cluster.polls >= 3, message="readiness polls")
    held = snapshot(client, task_id)
    assert (held["status"], held["phase"]) == ("applying", "verify")
    assert without_action(held["appliedResources"]) == [DEPLOYMENT, SERVICE]

    cluster.ready_after_polls = None  # the workload turns ready
    done = wait_for_status(client, task_id, "completed", "failed")
    assert (done["status"], done["phase"], done["failure"]) == ("completed", "done", None)
    moves = [(m["from"], m["to"]) for m in status_events(client, task_id)]
    assert moves == [("queued", "running"), ("running", "applying"), ("applying", "completed")]
    verify = [
        e["payload"]["state"]
        for e in events(client, task_id)
        if e["payload"].get("step") == "verify"
    ]
    assert verify == ["started", "done"]


def test_readiness_timeout_fails_and_keeps_the_resources(make_app, cluster):
    cluster.ready_after_polls = "never"
    client = make_app(readiness_timeout_s=0.3).test_client()
    task_id = post_task(client)["id"]
    failed = wait_for_status(client, task_id, "completed", "failed", "cancelled")
    assert failed["status"] == "failed"
    assert failed["failure"]["reason"] == "readiness_timeout"
    assert "Deployment/web" in failed["failure"]["message"]
    assert without_action(failed["appliedResources"]) == [DEPLOYMENT, SERVICE]
    assert cluster.deletes() == []
    assert subset(
        status_events(client, task_id)[-1],
        {
            "from": "applying",
            "to": "failed",
            "verdict": "failed",
            "reason": "readiness_timeout",
            "message": failed["failure"]["message"],
            "by": "runner",
        },
    )


def test_an_apply_error_fails_the_task_with_what_was_applied(client, cluster):
    cluster.fail_kinds = {"Service"}
    task_id = post_task(client)["id"]
    failed = wait_for_status(client, task_id, "completed", "failed", "cancelled")
    assert failed["status"] == "failed"
    assert failed["failure"]["reason"] == "apply_failed"
    assert "Service/web" in failed["failure"]["message"]
    assert without_action(failed["appliedResources"]) == [DEPLOYMENT]
    assert cluster.applied() == ["Deployment/web"]
    assert cluster.deletes() == []


# -- leases ----------------------------------------------------------------------------------------

SHORT_LEASE = dict(lease_ttl_s=1, lease_renew_interval_s=0.2, reaper_interval_s=0.2)


def test_a_call_longer_than_the_lease_is_not_reaped_while_renewal_runs(make_app, cluster):
    cluster.apply_delay_s = 3
    client = make_app(**SHORT_LEASE).test_client()
    task_id = post_task(client)["id"]
    done = wait_for_status(client, task_id, "completed", "failed", "cancelled", timeout=40)
    assert done["status"] == "completed", done["failure"]
    assert all(m["by"] != "reaper" for m in status_events(client, task_id))
    # The evidence that the call really outlived the lease, from the task's own timeline.
    applies = [e for e in events(client, task_id) if e["payload"].get("step") == "apply"]
    started = next(e for e in applies if e["payload"]["state"] == "started")
    finished = next(e for e in applies if e["payload"]["state"] == "done")
    took = (
        datetime.fromisoformat(finished["createdAt"]) - datetime.fromisoformat(started["createdAt"])
    ).total_seconds()
    assert took > 2 * SHORT_LEASE["lease_ttl_s"]


def test_control_without_renewal_the_same_call_is_reaped(make_app, cluster):
    """The previous test can fail: with renewal off, the reaper resolves the run as interrupted
    and the runner, told its lease is gone, stops without writing anything more."""
    cluster.apply_delay_s = 3
    client = make_app(**{**SHORT_LEASE, "lease_renew_interval_s": 3600}).test_client()
    task_id = post_task(client)["id"]
    failed = wait_for_status(client, task_id, "completed", "failed", "cancelled", timeout=40)
    assert (failed["status"], failed["failure"]["reason"]) == ("failed", "interrupted")
    assert status_events(client, task_id)[-1]["by"] == "reaper"
    wait_for(lambda: runs_in_flight(client) == 0, 20, message="the zombie runner to stop")
    assert cluster.calls[0].outcome == "aborted"
    assert events(client, task_id)[-1]["payload"]["by"] == "reaper"


def test_a_lease_that_fails_to_renew_aborts_its_runner(client, runtime, cluster, sql_conn):
    cluster.apply_delay_s = 60
    task_id = post_task(client)["id"]
    wait_for(cluster.applying.is_set, message="the runner to be inside its apply")

    before = row_of(sql_conn, task_id)["lease_expires_at"]
    runtime.renewer.renew_once()  # positive control: a held lease is extended
    renewed = row_of(sql_conn, task_id)
    assert renewed["lease_expires_at"] > before

    # Someone else takes the lease without telling this process (no NOTIFY).
    sql_conn.execute(
        "UPDATE deploy_tasks SET lease_epoch = lease_epoch + 1 WHERE id = %s", (task_id,)
    )
    written = event_count(sql_conn, task_id)
    runtime.renewer.renew_once()
    wait_for(lambda: runs_in_flight(client) == 0, 20, message="the runner to stop")

    assert cluster.calls[-1].outcome == "aborted"
    assert cluster.applied() == []
    after = row_of(sql_conn, task_id)
    assert after["lease_expires_at"] == renewed["lease_expires_at"]  # not renewed
    assert snapshot(client, task_id)["status"] == "applying"  # the runner wrote no outcome
    assert event_count(sql_conn, task_id) == written


# -- the reaper, on a pinned clock -----------------------------------------------------------------

# (name, row columns relative to T, sweep offset just before the deadline, just after, outcome)
REAPER_CASES = [
    (
        "never_started",
        dict(status="queued"),
        "queued_start_deadline_s",
        0,
        ("failed", "never_started", "never_started", "queued"),
    ),
    (
        "lease_expired",
        dict(status="running", lease_expires_at=60),
        None,
        60,
        ("failed", "interrupted", "failed", "running"),
    ),
    (
        "lease_expired_cancel_pending",
        dict(status="applying", lease_expires_at=60, cancel_requested_at=10),
        None,
        60,
        ("cancelled", "cancel_acknowledged", "cancelled", "applying"),
    ),
    (
        "cancel_deadline_live_lease",
        dict(status="running", lease_expires_at=86_400, cancel_requested_at=0),
        "cancel_ack_deadline_s",
        0,
        ("cancelled", "cancel_deadline", "cancelled", "running"),
    ),
    (
        "run_timeout",
        dict(status="applying", lease_expires_at=86_400),
        "max_run_s",
        0,
        ("failed", "timeout", "failed", "applying"),
    ),
]


@pytest.mark.parametrize(
    "name,columns,deadline,offset,outcome", REAPER_CASES, ids=[c[0] for c in REAPER_CASES]
)
def test_reaper_outcomes_record_their_verdict(
    client, runtime, insert_task, sql_conn, name, columns, deadline, offset, outcome
):
    status, reason, verdict, source = outcome
    t = db_now(sql_conn)
    at = {
        k: t + timedelta(seconds=v) if k in ("lease_expires_at", "cancel_requested_at") else v
        for k, v in columns.items()
    }
    if columns["status"] != "queued":
        at["lease_claimed_at"] = t
    task_id = insert_task(created_at=t, **at)["id"]
    due = offset + (getattr(runtime.settings, deadline) if deadline else 0)

    early = runtime.reaper.sweep(now=t + timedelta(seconds=due - 1))
    assert sum(early.values()) == 0
    assert snapshot(client, task_id)["status"] == source

    late = runtime.reaper.sweep(now=t + timedelta(seconds=due + 1))
    assert sum(late.values()) == 1
    snap = snapshot(client, task_id)
    assert snap["status"] == status
    if status == "failed":
        assert snap["failure"]["reason"] == reason
    last = status_events(client, task_id)[-1]
    assert (last["from"], last["to"], last["verdict"], last["reason"], last["by"]) == (
        source,
        status,
        verdict,
        reason,
        "reaper",
    )
    assert last["message"]

    assert sum(runtime.reaper.sweep(now=t + timedelta(seconds=due + 3600)).values()) == 0


def test_one_sweep_resolves_every_kind_and_leaves_live_work_alone(
    client, runtime, insert_task, sql_conn
):
    t = db_now(sql_conn)
    s = runtime.settings
    later = t + timedelta(seconds=max(s.queued_start_deadline_s, s.max_run_s) + 1)
    stale_queued = insert_task(status="queued", created_at=t)["id"]
    orphan = insert_task(
        status="running",
        created_at=t,
        lease_claimed_at=later,
        lease_expires_at=later - timedelta(seconds=1),
    )["id"]
    live = insert_task(
        status="applying",
        created_at=later,
        lease_claimed_at=later,
        lease_expires_at=later + timedelta(seconds=60),
    )["id"]
    parked = insert_task(status="blocked", created_at=t)["id"]
    resolved = runtime.reaper.sweep(now=later)
    assert resolved["never_started"] == 1 and resolved["lease_expired"] == 1
    assert sum(resolved.values()) == 2
    assert [snapshot(client, i)["status"] for i in (stale_queued, orphan, live, parked)] == [
        "failed",
        "failed",
        "applying",
        "blocked",
    ]


# -- the read side never writes status -------------------------------------------------------------


def test_reads_never_complete_a_task_whose_resources_are_ready(
    client, cluster, insert_task, sql_conn
):
    """Regression: snapshot/timeline reads used to observe readiness and write `completed`."""
    applied = [{**DEPLOYMENT, "action": "created"}]
    task_id = insert_task(
        status="applying",
        phase="verify",
        artifact_summary={"plannedResources": [DEPLOYMENT], "appliedResources": applied},
    )["id"]
    assert cluster.ready_after_polls is None  # the fake says everything is ready
    before = row_of(sql_conn, task_id)
    written = event_count(sql_conn, task_id)

    for _ in range(3):
        assert snapshot(client, task_id)["status"] == "applying"
        events(client, task_id)
        listed = client.get("/api/v1/tasks").get_json()["items"]
        assert [i["status"] for i in listed] == ["applying"]
        client.get("/api/v1/tasks?status=completed")
    stream = client.get("/api/v1/projects/demo/tasks/stream", buffered=False)
    first = next(iter(stream.response))
    stream.close()
    assert b'"status":"applying"' in (first if isinstance(first, bytes) else first.encode())

    after = row_of(sql_conn, task_id)
    assert (after["status"], after["updated_at"], after["finished_at"]) == (
        before["status"],
        before["updated_at"],
        None,
    )
    assert event_count(sql_conn, task_id) == written
    assert cluster.polls == 0  # no read asked the cluster anything


# -- listing ---------------------------------------------------------------------------------------


def _page_through(client, query: str, limit: int) -> list[str]:
    ids, cursor = [], None
    for _ in range(50):
        url = f"/api/v1/tasks?limit={limit}{query}" + (f"&cursor={cursor}" if cursor else "")
        response = client.get(url)
        assert response.status_code == 200, response.get_json()
        body = response.get_json()
        assert len(body["items"]) <= limit
        ids += [i["id"] for i in body["items"]]
        cursor = body["nextCursor"]
        if cursor is None:
            return ids
    raise AssertionError("pagination did not end")


def test_list_pages_newest_first_over_created_at_then_id(client, insert_task, sql_conn):
    t = db_now(sql_conn)
    rows = [
        insert_task(status=status, project_id=project, created_at=t + timedelta(seconds=sec))
        for status, project, sec in [
            ("completed", "demo", 0),
            ("failed", "demo", 1),
            ("failed", "other", 1),
            ("running", "demo", 1),
            ("cancelled", "other", 2),
            ("blocked", "demo", 3),
            ("failed", "demo", 4),
        ]
    ]
    insert_task(status="failed", workspace="someone-else", created_at=t)
    newest_first = sorted(rows, key=lambda r: (r["created_at"], r["id"]), reverse=True)

    for limit in (1, 2, 3, 50):
        assert _page_through(client, "", limit) == [str(r["id"]) for r in newest_first]

    failed_in_demo = [
        str(r["id"]) for r in newest_first if r["status"] == "failed" and r["project_id"] == "demo"
    ]
    assert _page_through(client, "&status=failed&projectId=demo", 1) == failed_in_demo
    terminal = [str(r["id"]) for r in newest_first if r["status"] in ("failed", "cancelled")]
    assert _page_through(client, "&status=failed&status=cancelled", 2) == terminal
    other = [str(r["id"]) for r in newest_first if r["project_id"] == "other"]
    assert _page_through(client, "&projectId=other", 1) == other


@pytest.mark.parametrize(
    "query",
    [
        "cursor=not-a-cursor",
        "status=done",
        "limit=0",
        "limit=many",
        "limit=201",
        "projectId=Not_Valid",
        "bogus=1",
    ],
)
def test_list_rejects_bad_parameters(client, query):
    response = client.get(f"/api/v1/tasks?{query}")
    assert response.status_code == 400
    assert response.get_json()["code"] == "invalid_request"


# -- validation ------------------------------------------------------------------------------------

BAD_BODIES = [
    ("unknown_field", {"projectId": "demo", "source": IMAGE_SOURCE, "priority": 1}, "priority"),
    (
        "unknown_source_field",
        {"projectId": "demo", "source": {**IMAGE_SOURCE, "cpu": "1"}},
        "source",
    ),
    ("port_as_string", {"projectId": "demo", "source": {**IMAGE_SOURCE, "port": "80"}}, "source"),
    ("project_as_number", {"projectId": 7, "source": IMAGE_SOURCE}, "projectId"),
    ("bad_project_name", {"projectId": "Demo Project", "source": IMAGE_SOURCE}, "projectId"),
    ("missing_source", {"projectId": "demo"}, "source"),
    ("unknown_kind", {"projectId": "demo", "source": {"kind": "helm"}}, "source"),
    ("source_not_object", {"projectId": "demo", "source": "nginx"}, "source"),
    (
        "inputs_not_strings",
        {"projectId": "demo", "source": IMAGE_SOURCE, "inputs": {"a": 1}},
        "inputs",
    ),
    ("predecessor_not_uuid", {"predecessorTaskId": "abc"}, "predecessorTaskId"),
]


@pytest.mark.parametrize("name,body,field", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_invalid_create_bodies_are_400_naming_the_field(client, name, body, field):
    response = client.post("/api/v1/tasks", json=body)
    assert response.status_code == 400, response.get_json()
    payload = response.get_json()
    assert payload["code"] == "invalid_request"
    assert field in payload["fields"]
    assert client.get("/api/v1/tasks").get_json()["items"] == []


@pytest.mark.parametrize(
    "data,content_type,status,code",
    [
        ("not json", "application/json", 400, "malformed_json"),
        ('["a", "list"]', "application/json", 400, "invalid_request"),
        ('{"projectId": "demo"', "application/json", 400, "malformed_json"),
        ("projectId=demo", "text/plain", 415, "unsupported_media_type"),
        ("", None, 415, "unsupported_media_type"),
    ],
)
def test_bodies_that_are_not_a_json_object_are_refused(client, data, content_type, status, code):
    response = client.post("/api/v1/tasks", data=data, content_type=content_type)
    assert response.status_code == status
    assert response.get_json()["code"] == code


def test_an_oversized_body_is_413_json(client):
    huge = {"projectId": "demo", "source": {**IMAGE_SOURCE, "env": {"BIG": "x" * 300_000}}}
    response = client.post("/api/v1/tasks", json=huge)
    assert response.status_code == 413
    assert response.get_json()["code"] == "body_too_large"
    assert client.get("/api/v1/tasks").get_json()["items"] == []


def test_an_invalid_kubeconfig_header_is_400(client):
    response = client.post(
        "/api/v1/tasks",
        json={"projectId": "demo", "source": IMAGE_SOURCE},
        headers={"X-Kubeconfig": "%%% not base64"},
    )
    assert response.status_code == 400
    assert response.get_json()["code"] == "invalid_request"


# -- tenancy ---------------------------------------------------------------------------------------


def test_another_namespaces_task_is_not_found_everywhere(client, insert_task, sql_conn):
    theirs = insert_task(status="blocked", workspace="other-team")
    task_id = theirs["id"]
    for method, path, body in [
        ("get", f"/api/v1/tasks/{task_id}", None),
        ("get", f"/api/v1/tasks/{task_id}/events", None),
        ("post", f"/api/v1/tasks/{task_id}/cancel", None),
        ("post", f"/api/v1/tasks/{task_id}/input", {"inputs": {"a": "b"}}),
        ("patch", f"/api/v1/tasks/{task_id}/canvas", {"x": 1, "y": 2}),
        ("post", "/api/v1/tasks", {"predecessorTaskId": str(task_id)}),
    ]:
        response = getattr(client, method)(path, json=body)
        assert response.status_code == 404, (method, path, response.get_json())
        assert response.get_json()["code"] in ("task_not_found", "predecessor_not_found")
    assert client.get("/api/v1/tasks").get_json()["items"] == []
    after = row_of(sql_conn, task_id)
    assert (after["status"], after["cancel_requested_at"], after["canvas"]) == (
        "blocked",
        None,
        None,
    )


def test_unknown_ids_and_paths_are_404_json(client):
    for path in [
        "/api/v1/tasks/00000000-0000-0000-0000-000000000000",
        "/api/v1/tasks/nope",
        "/api/v1/nothing-here",
    ]:
        response = client.get(path)
        assert response.status_code == 404
        assert response.get_json()["code"] in ("task_not_found", "not_found")
