"""What the dashboard reads off tasks: canvas cards grouped by deployment with endpoints, plain
failure wording shared with the explain tool, step times, source summaries."""

from blueprints.pages import presentation
from engine.readside import dto
from engine.readside.explain import explain, failure_help
from engine.readside.store import TaskStore
from engine.readside.timeline import build
from engine.runners.direct import endpoint
from tests.helpers import at


def test_cards_group_by_the_deployment_that_owns_them_workloads_first(projection):
    api = {
        **projection("completed", created=1, applied=[("Service", "api"), ("Deployment", "api")]),
        "title": "api",
    }
    api["appliedResources"][0]["endpoint"] = "api.demo.svc:80"
    web = {**projection("completed", created=2, applied=[("Deployment", "web")]), "title": "web"}
    store = TaskStore("demo")
    store.bootstrap([web, api], now=at(3))
    cards = store.resource_cards()
    assert [(c.owner_title, c.kind) for c in cards] == [
        ("api", "Deployment"),
        ("api", "Service"),
        ("web", "Deployment"),
    ]
    assert [c.endpoint for c in cards] == [None, "api.demo.svc:80", None]
    assert cards[0].group == cards[1].group != cards[2].group


def test_service_and_ingress_endpoints_come_from_their_manifests():
    service = {"kind": "Service", "metadata": {"name": "api"}, "spec": {"ports": [{"port": 80}]}}
    assert endpoint(service, "shop") == "api.shop.svc:80"
    ingress = {
        "kind": "Ingress",
        "metadata": {"name": "api"},
        "spec": {
            "tls": [{}],
            "rules": [{"host": "api.example.com", "http": {"paths": [{"path": "/v1"}]}}],
        },
    }
    assert endpoint(ingress, "shop") == "https://api.example.com/v1"
    assert endpoint({"kind": "Deployment", "metadata": {"name": "api"}}, "shop") is None


def test_a_failure_reads_in_plain_words_with_the_explain_tools_next_step():
    failure = {
        "reason": "apply_failed",
        "message": "applying Deployment/api failed: sandbox: simulated apply error",
    }
    shown = failure_help(failure)
    assert shown["cause"] == "The cluster refused Deployment/api."
    assert (
        shown["raw"]
        == "apply_failed: applying Deployment/api failed: sandbox: simulated apply error"
    )
    snapshot = {
        "id": "t",
        "status": "failed",
        "source": {"kind": "image"},
        "projectId": "p",
        "retriedFromTaskId": None,
        "appliedResources": [],
        "failure": failure,
        "cancelRequestedAt": None,
    }
    assert explain(snapshot, [])["nextSteps"] == [shown["next"]]
    assert presentation.failure({"failure": None}) is None
    assert (
        failure_help({"reason": "something_new", "message": "x"})["cause"]
        == "The deployment failed."
    )


def test_steps_carry_when_they_started_and_when_they_reached_their_state():
    events = [
        {
            "seq": 1,
            "kind": "step",
            "payload": {"step": "apply", "state": "started"},
            "createdAt": "2026-07-06T12:00:00+00:00",
        },
        {
            "seq": 2,
            "kind": "step",
            "payload": {"step": "apply", "state": "done"},
            "createdAt": "2026-07-06T12:00:05+00:00",
        },
        {
            "seq": 3,
            "kind": "step",
            "payload": {"step": "verify", "state": "started"},
            "createdAt": "2026-07-06T12:00:06+00:00",
        },
    ]
    steps = build(events).ordered_steps()
    assert [(s.key, s.started_at[17:19], s.at[17:19], s.ended) for s in steps] == [
        ("apply", "00", "05", True),
        ("verify", "06", "06", False),
    ]


def test_source_summaries_say_which_deployment_it_is():
    assert dto.source_summary("image", {"image": "nginx:1.27"}) == "nginx:1.27"
    assert dto.source_summary("template", {"template": "redis"}) == "template redis"
    assert dto.source_summary("github", {"repo": "a/b", "ref": "main"}) == "a/b@main"
    assert (
        dto.source_summary("database", {"engine": "postgresql", "version": "17"}) == "postgresql 17"
    )


def test_field_labels_are_words_not_raw_names():
    assert presentation.field_label("maxMemory") == "Max memory"
    assert presentation.field_label("ADMIN_PASSWORD") == "Admin password"
    assert presentation.field_label("env") == "Environment variables"
    assert presentation.field_label("name") == "Name"
