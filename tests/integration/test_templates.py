"""Template sources end to end through the HTTP API: catalog listing, deploy on the fake cluster
and the sandbox, blocked inputs answered through /input, identity reuse across redeploys,
failure cleanup only for a fresh identity, and cancel never reaching cleanup."""

import json
import os
import re
import textwrap
import uuid

import pytest

from tests.helpers import (
    applied_manifests,
    create,
    dump_database,
    events,
    redeploy,
    steps,
    template,
    wait_for,
    wait_for_status,
)
from tests.helpers import secret_forms as forms

INSTANCE = "templateInstanceName"


def canary() -> str:
    return f"CANARY-{uuid.uuid4().hex}"


def instance_of(snap) -> str:
    return snap["resultIdentities"][INSTANCE]


# -- the catalog ---------------------------------------------------------------------------------
def test_the_catalog_lists_each_template_with_its_declared_inputs(client):
    response = client.get("/api/v1/templates")
    assert response.status_code == 200
    items = {t["name"]: t for t in response.get_json()["items"]}
    assert {"webapp", "postgresql", "redis"} <= set(items)
    for item in items.values():
        assert item["title"] and item["description"]
        for decl in item["inputs"]:
            assert {"name", "type", "default", "required", "sensitive"} <= set(decl)
    postgres = {d["name"]: d for d in items["postgresql"]["inputs"]}
    assert postgres["password"] | {"description": None} == {
        "name": "password",
        "type": "password",
        "default": None,
        "required": True,
        "sensitive": True,
        "description": None,
    }
    assert postgres["version"]["default"] == "17" and postgres["version"]["sensitive"] is False
    webapp = {d["name"]: d for d in items["webapp"]["inputs"]}
    assert webapp["port"] == webapp["port"] | {"type": "integer", "default": 80}


# -- deploying -----------------------------------------------------------------------------------
def test_a_template_deploys_to_completed_on_the_fake_cluster(client, cluster):
    task = create(client, template("webapp", replicas=2, image="nginx:1.27"))
    assert task["runner"] == "template"
    snap = wait_for_status(client, task["id"], "completed", "failed")
    assert snap["status"] == "completed", snap["failure"]
    instance = instance_of(snap)
    assert re.fullmatch(r"webapp-[0-9a-f]{6}", instance)
    assert cluster.applied() == [f"Deployment/{instance}", f"Service/{instance}"]
    deployment = applied_manifests(cluster, "Deployment")[0]
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["namespace"] == "demo"
    assert {(r["kind"], r["name"]) for r in snap["appliedResources"]} == {
        ("Deployment", instance),
        ("Service", instance),
    }
    # Completed only after the required result resource answered ready.
    polled = [c.ref.label() for c in cluster.calls if c.op == "readiness"]
    assert polled == [f"Deployment/{instance}"]
    assert cluster.deletes() == []


@pytest.mark.parametrize(
    "name,inputs",
    [
        ("webapp", {}),
        ("postgresql", {"password": "pg-pass-1234"}),
        ("redis", {"password": "rd-pass-1234"}),
    ],
)
def test_each_shipped_template_deploys_to_completed_on_the_sandbox(sandbox_client, name, inputs):
    client, sandbox = sandbox_client
    task = create(client, template(name), inputs=inputs)
    snap = wait_for_status(client, task["id"], "completed", "failed", "blocked")
    assert snap["status"] == "completed", snap
    instance = instance_of(snap)
    stored = {ref.label() for ref in sandbox.objects}
    assert {f"{r['kind']}/{r['name']}" for r in snap["appliedResources"]} == stored
    assert all(ref.name.startswith(instance) and ref.namespace == "demo" for ref in sandbox.objects)


# -- blocked inputs and the secrets contract ---------------------------------------------------
def test_a_blocked_template_resumes_through_input_and_its_secret_is_persisted_nowhere(
    client, cluster, sql_conn
):
    secret = canary()
    task = create(client, template("postgresql", database="shop"))
    blocked = wait_for_status(client, task["id"], "blocked", "completed", "failed")
    assert blocked["status"] == "blocked"
    pending = {d["name"]: d for d in blocked["pendingInputs"]}
    assert pending["password"]["missing"] is True and pending["password"]["sensitive"] is True
    assert pending["database"]["missing"] is False
    assert blocked["resultIdentities"] == {}  # parked before any identity was allocated
    assert cluster.calls == []

    response = client.post(
        f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"password": secret}}
    )
    assert response.status_code == 200 and response.get_json()["status"] == "running"
    done = wait_for_status(client, task["id"], "completed", "failed")
    assert done["status"] == "completed", done["failure"]

    # The cluster got the value, in the Secret and nowhere else.
    instance = instance_of(done)
    secret_doc = applied_manifests(cluster, "Secret")[0]
    assert secret_doc["metadata"]["name"] == f"{instance}-credentials"
    assert secret_doc["stringData"]["password"] == secret
    assert secret_doc["stringData"]["database"] == "shop"
    others = [m for m in applied_manifests(cluster) if m["kind"] != "Secret"]
    assert others and secret not in repr(others)
    # No table, column or event holds it; clones will know to re-ask it.
    dump = dump_database(sql_conn)
    assert all(form not in dump for form in forms(secret))
    assert "password" in done["sensitiveKeys"]
    assert secret not in json.dumps(events(client, task["id"]))


SECRET_NOTE = """
name: note
title: Note
description: a note kept in a Secret
inputs:
  - name: note
    type: string
    sensitive: {note_sensitive}
  - name: code
    type: string
    required: true
resources:
  - apiVersion: v1
    kind: Secret
    metadata:
      name: ${{instance}}
    stringData:
      note: ${{inputs.note}}
      code: ${{inputs.code}}
  - apiVersion: v1
    kind: ConfigMap
    metadata:
      name: ${{instance}}-info
    data:
      info: plain
"""


def write_note_template(directory, *, note_sensitive: bool, mtime_ns: int) -> None:
    path = directory / "note.yaml"
    path.write_text(
        textwrap.dedent(SECRET_NOTE).format(note_sensitive="true" if note_sensitive else "false")
    )
    os.utime(path, ns=(mtime_ns, mtime_ns))


def test_a_declared_secret_with_an_innocuous_name_is_stripped_before_the_first_insert(
    make_app, cluster, sql_conn, tmp_path
):
    write_note_template(tmp_path, note_sensitive=True, mtime_ns=1)
    client = make_app(template_catalog_dir=str(tmp_path)).test_client()
    secret = canary()
    task = create(client, template("note", note=secret, code="plain-code"))
    assert "note" not in task["source"]["args"] and "note" in task["sensitiveKeys"]
    done = wait_for_status(client, task["id"], "completed", "failed", "blocked")
    assert done["status"] == "completed", done
    assert applied_manifests(cluster, "Secret")[0]["stringData"]["note"] == secret
    dump = dump_database(sql_conn)
    assert all(form not in dump for form in forms(secret))
    assert "plain-code" in dump  # non-sensitive arguments stay on the task


def test_the_runner_re_scrubs_a_source_persisted_before_the_template_declared_it_sensitive(
    make_app, cluster, sql_conn, tmp_path
):
    write_note_template(tmp_path, note_sensitive=False, mtime_ns=1)
    client = make_app(template_catalog_dir=str(tmp_path)).test_client()
    value = canary()
    task = create(client, template("note", note=value))
    blocked = wait_for_status(client, task["id"], "blocked", "completed", "failed")
    assert blocked["status"] == "blocked" and blocked["source"]["args"]["note"] == value
    # The template is changed while the task is parked: `note` is now declared sensitive.
    write_note_template(tmp_path, note_sensitive=True, mtime_ns=2)
    client.post(f"/api/v1/tasks/{task['id']}/input", json={"inputs": {"code": "c0de"}})
    done = wait_for_status(client, task["id"], "completed", "failed")
    assert done["status"] == "completed", done["failure"]
    assert "note" not in done["source"]["args"] and "note" in done["sensitiveKeys"]
    assert applied_manifests(cluster, "Secret")[0]["stringData"]["note"] == value  # not dropped
    row = sql_conn.execute(
        "SELECT row_to_json(t)::text AS row FROM deploy_tasks t WHERE id = %s", (task["id"],)
    ).fetchone()["row"]
    assert value not in row
    rescrubbed = [
        e["payload"] for e in events(client, task["id"]) if e["kind"] == "secrets_rescrubbed"
    ]
    assert rescrubbed == [{"stripped": ["note"], "recorded": []}]


def test_a_redeploy_re_asks_a_recorded_optional_secret_instead_of_dropping_it(
    make_app, cluster, tmp_path
):
    write_note_template(tmp_path, note_sensitive=True, mtime_ns=1)
    client = make_app(template_catalog_dir=str(tmp_path)).test_client()
    cluster.fail_kinds = {"ConfigMap"}
    first = create(client, template("note", note=canary(), code="c0de"))
    assert wait_for_status(client, first["id"], "failed", "completed")["status"] == "failed"
    cluster.fail_kinds = set()
    clone = redeploy(client, first["id"])
    blocked = wait_for_status(client, clone["id"], "blocked", "completed", "failed")
    assert blocked["status"] == "blocked"  # `note` is optional, but it was given and is secret
    pending = {d["name"]: d for d in blocked["pendingInputs"]}
    assert pending["note"]["missing"] is True and pending["code"]["missing"] is False
    second = canary()
    client.post(f"/api/v1/tasks/{clone['id']}/input", json={"inputs": {"note": second}})
    assert wait_for_status(client, clone["id"], "completed", "failed")["status"] == "completed"
    assert applied_manifests(cluster, "Secret")[-1]["stringData"] == {
        "note": second,
        "code": "c0de",
    }


# -- identities across redeploys ----------------------------------------------------------------
def failed_webapp(client, cluster) -> dict:
    """A webapp task whose Service the cluster refused (Deployment applied, then cleaned up)."""
    cluster.fail_kinds = {"Service"}
    task = create(client, template("webapp"))
    snap = wait_for_status(client, task["id"], "failed", "completed")
    assert snap["status"] == "failed" and snap["failure"]["reason"] == "apply_failed"
    return snap


def test_a_redeploy_of_a_failed_template_task_reuses_its_instance_name(client, cluster):
    first = failed_webapp(client, cluster)
    cluster.fail_kinds = set()
    clone = redeploy(client, first["id"])
    assert clone["resultIdentities"] == first["resultIdentities"]
    done = wait_for_status(client, clone["id"], "completed", "failed")
    assert done["status"] == "completed" and instance_of(done) == instance_of(first)
    assert applied_manifests(cluster, "Service")[0]["metadata"]["name"] == instance_of(first)
    assert [s["reused"] for s in steps(client, clone["id"], "identity")] == [True]


def test_an_edited_redeploy_to_another_project_gets_a_fresh_instance_name(client, cluster):
    first = failed_webapp(client, cluster)
    cluster.fail_kinds = set()
    clone = redeploy(
        client, first["id"], projectId="elsewhere", source=template("webapp", replicas=3)
    )
    assert clone["resultIdentities"] == {} and clone["projectId"] == "elsewhere"
    done = wait_for_status(client, clone["id"], "completed", "failed")
    assert done["status"] == "completed"
    assert re.fullmatch(r"webapp-[0-9a-f]{6}", instance_of(done))
    assert instance_of(done) != instance_of(first)
    service = applied_manifests(cluster, "Service")[0]
    assert service["metadata"] == service["metadata"] | {
        "name": instance_of(done),
        "namespace": "elsewhere",
    }


def test_an_edited_redeploy_that_switches_template_gets_a_fresh_instance_name(client, cluster):
    first = failed_webapp(client, cluster)
    cluster.fail_kinds = set()
    clone = redeploy(client, first["id"], source=template("redis", password="rd-pass-1234"))
    assert clone["resultIdentities"] == {} and clone["projectId"] == first["projectId"]
    done = wait_for_status(client, clone["id"], "completed", "failed")
    assert done["status"] == "completed"
    assert re.fullmatch(r"redis-[0-9a-f]{6}", instance_of(done))
    assert [s["reused"] for s in steps(client, clone["id"], "identity")] == [False]
    assert instance_of(first) not in {
        m["metadata"]["name"] for m in applied_manifests(cluster, "Service")
    }


def test_an_edited_redeploy_of_the_same_template_keeps_its_instance_name(client, cluster):
    first = failed_webapp(client, cluster)
    cluster.fail_kinds = set()
    clone = redeploy(client, first["id"], source=template("webapp", replicas=3))
    assert clone["resultIdentities"] == first["resultIdentities"]


def test_a_redeploy_chain_converges_on_the_root_identity_after_the_root_is_purged(
    client, cluster, sql_conn
):
    cluster.fail_kinds = {"StatefulSet"}
    a = create(client, template("postgresql"), inputs={"password": "first-pass-1"})
    a = wait_for_status(client, a["id"], "failed", "completed")
    assert a["status"] == "failed"
    root_identity = instance_of(a)
    cluster.fail_kinds = set()

    # The password is a recorded secret with no value in memory: B parks before allocating.
    # (A B that switched template would not carry A's identity at all: see the test above.)
    b = redeploy(client, a["id"])
    assert wait_for_status(client, b["id"], "blocked", "failed", "completed")["status"] == "blocked"
    assert client.post(f"/api/v1/tasks/{b['id']}/cancel").get_json()["status"] == "cancelled"
    b = client.get(f"/api/v1/tasks/{b['id']}").get_json()
    assert b["resultIdentities"] == {INSTANCE: root_identity}  # copied at creation, nothing new

    sql_conn.execute("DELETE FROM deploy_tasks WHERE id = %s", (a["id"],))  # A is purged
    applies_before = len(applied_manifests(cluster))
    c = redeploy(client, b["id"], source=template("postgresql"), inputs={"password": "third-pass"})
    c = wait_for_status(client, c["id"], "completed", "failed", "blocked")
    assert c["status"] == "completed", c
    assert instance_of(c) == root_identity
    names = {m["metadata"]["name"] for m in applied_manifests(cluster)[applies_before:]}
    assert names == {root_identity, f"{root_identity}-credentials"}


# -- failure cleanup ------------------------------------------------------------------------------
def test_an_apply_failure_of_a_fresh_instance_deletes_its_partial_resources(client, cluster):
    snap = failed_webapp(client, cluster)
    instance = instance_of(snap)
    assert [c.ref.label() for c in cluster.deletes()] == [f"Deployment/{instance}"]
    assert snap["appliedResources"] == []
    assert [s["state"] for s in steps(client, snap["id"], "cleanup")] == ["started", "done"]
    assert [s["reused"] for s in steps(client, snap["id"], "identity")] == [False]


def test_an_apply_failure_of_a_reused_instance_deletes_nothing(client, cluster):
    first = failed_webapp(client, cluster)
    deletes_by_first = len(cluster.deletes())
    clone = redeploy(client, first["id"])  # the Service is still refused
    snap = wait_for_status(client, clone["id"], "failed", "completed")
    assert snap["failure"]["reason"] == "apply_failed"
    assert len(cluster.deletes()) == deletes_by_first == 1
    assert [(r["kind"], r["name"]) for r in snap["appliedResources"]] == [
        ("Deployment", instance_of(first))
    ]
    assert steps(client, clone["id"], "cleanup") == []


def test_a_readiness_timeout_fails_with_the_resources_kept(make_app, cluster):
    client = make_app(readiness_timeout_s=0.2).test_client()
    cluster.ready_after_polls = "never"
    task = create(client, template("webapp"))
    snap = wait_for_status(client, task["id"], "failed", "completed")
    assert snap["failure"]["reason"] == "readiness_timeout"
    assert len(snap["appliedResources"]) == 2 and cluster.deletes() == []


@pytest.mark.parametrize("refused", [set(), {"Service"}], ids=["apply-ok", "apply-refused"])
def test_a_cancel_during_the_template_apply_is_cancelled_with_nothing_deleted(
    client, cluster, refused
):
    cluster.apply_delay_s = 0.3
    cluster.fail_kinds = refused
    task = create(client, template("webapp"))
    wait_for(cluster.applying.is_set, message="the provider call in flight")
    response = client.post(f"/api/v1/tasks/{task['id']}/cancel")
    assert response.status_code == 200
    snap = wait_for_status(client, task["id"], "cancelled", "failed", "completed")
    assert snap["status"] == "cancelled" and snap["failure"] is None
    assert cluster.deletes() == []
    assert steps(client, task["id"], "cleanup") == []
    # One atomic provider call: the cancel landed after it, never between its documents.
    attempted = [c.ref.kind for c in cluster.calls if c.op == "apply"]
    assert attempted == ["Deployment", "Service"]
    assert snap["cancellation"]["applied"] == ("fully" if not refused else "partially")
