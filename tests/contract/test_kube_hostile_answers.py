"""Contract: a cluster answering JSON of any shape, over a real loopback socket, meets typed reads.

Every answer the Kubernetes adapter reads (version, SelfSubjectReview, access review, discovery,
apply, objects for readiness, endpoint slices, pods, events) is replaced, one at a time, by any
JSON value or a valid answer with fields of other types (tests/hostile_json.py). The adapter
answers or raises an IntegrationError naming the field; `/cluster-access/check` answers 200 with
the problem in words; a deployment run ends `failed` with a named reason, never `runner_error`.
"""

from collections import Counter

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from engine.abort import AbortSignal
from engine.integrations.base import IntegrationError, ResourceRef
from engine.integrations.kube.backend import KubeBackend
from engine.integrations.kube.retry import RetryPolicy
from engine.readside.explain import CAUSES
from tests.contract.conftest import LOOPBACK, kubeconfig_for
from tests.contract.helpers import (
    DEPLOYMENT,
    DEPLOYMENT_PATH,
    EVENTS_PATH,
    HEALTHY_CLUSTER,
    PODS_PATH,
    SERVICE_PATH,
    SLICES_PATH,
    SSAR_PATH,
    SSR_PATH,
    ScriptedKubeApi,
    deploy,
    header,
    wait_finished,
    workload_status,
)
from tests.helpers import IMAGE_SOURCE
from tests.hostile_json import examples, hostile

NO_RETRY = RetryPolicy(max_retries=0)
WEB = ResourceRef("apps/v1", "Deployment", "web", "demo")


@pytest.fixture
def api():
    server = ScriptedKubeApi()
    yield server
    server.stop()


def route_answers(*routes: str):
    """(route, body) pairs: one of `routes` and an answer for it of any shape."""
    return st.sampled_from(routes).flatmap(
        lambda route: st.tuples(st.just(route), hostile(HEALTHY_CLUSTER[route][1]))
    )


# -- the adapter ----------------------------------------------------------------------------------

#: Each answer the adapter parses, and the call that reads it.
READS = {
    "GET /version": lambda kube, abort: kube.server_version(abort=abort),
    f"POST {SSR_PATH}": lambda kube, abort: kube.who_am_i(abort=abort),
    f"POST {SSAR_PATH}": lambda kube, abort: kube.can(
        "patch", "deployments", group="apps", namespace="demo", abort=abort
    ),
    "GET /apis/apps/v1": lambda kube, abort: kube.apply(DEPLOYMENT, abort=abort),
    f"PATCH {DEPLOYMENT_PATH}": lambda kube, abort: kube.apply(DEPLOYMENT, abort=abort),
    f"GET {DEPLOYMENT_PATH}": lambda kube, abort: kube.readiness(WEB, abort=abort),
    f"GET {SERVICE_PATH}": lambda kube, abort: kube.readiness(
        ResourceRef("v1", "Service", "web", "demo"), abort=abort
    ),
    f"GET {SLICES_PATH}": lambda kube, abort: kube.readiness(
        ResourceRef("v1", "Service", "web", "demo"), abort=abort
    ),
    f"GET {PODS_PATH}": lambda kube, abort: kube.pods("demo", {"app": "web"}, abort=abort),
    f"GET {EVENTS_PATH}": lambda kube, abort: kube.events("demo", "web-1", abort=abort),
}


def test_every_answer_the_adapter_reads_is_read_or_a_named_integration_error(api):
    backend = KubeBackend(retry=NO_RETRY, network=LOOPBACK)
    seen = Counter()

    @examples(150)
    @given(answer=route_answers(*READS), status=st.sampled_from([None] * 4 + [400, 404, 422]))
    # The answers of the issue: a 500 from the access check, a crashed run.
    @example(answer=(f"POST {SSR_PATH}", {"status": "x"}), status=None)
    @example(answer=(f"POST {SSR_PATH}", {"status": {"userInfo": ["a"]}}), status=None)
    @example(answer=(f"POST {SSR_PATH}", {"status": 5}), status=None)
    @example(answer=(f"POST {SSAR_PATH}", {"status": [1]}), status=None)
    @example(answer=("GET /apis/apps/v1", {"resources": "abc"}), status=None)
    def check(answer, status):
        route, body = answer
        api.reset()
        api.answer(route, body, status)
        with backend.cluster(kubeconfig_for(api.url)) as kube:
            try:
                READS[route](kube, AbortSignal())
            except IntegrationError as exc:
                assert str(exc), route
                seen[exc.reason] += 1
            else:
                seen["read"] += 1
        assert route in api.seen  # the hostile answer was read

    check()
    # The controls: answers of the usual shape are read, and hostile ones named as such.
    assert seen["read"] >= 20 and seen["upstream_answer_malformed"] >= 20, seen


def test_the_issues_answers_are_named_by_the_field_and_its_type(api):
    backend = KubeBackend(retry=NO_RETRY, network=LOOPBACK)
    api.answer(f"POST {SSR_PATH}", {"status": {"userInfo": ["a"]}})
    api.answer("GET /apis/apps/v1", {"resources": "abc"})

    with backend.cluster(kubeconfig_for(api.url)) as kube:
        with pytest.raises(IntegrationError) as review:
            kube.who_am_i(abort=AbortSignal())
        with pytest.raises(IntegrationError) as discovered:
            kube.apply(DEPLOYMENT, abort=AbortSignal())

    assert str(review.value) == (
        "asking who the credential is: the answer's status.userInfo is a list, not an object"
    )
    assert str(discovered.value) == (
        "discovering apps/v1: the answer's resources is a string, not a list"
    )
    assert discovered.value.reason == "upstream_answer_malformed"


# -- the access check, through the app ------------------------------------------------------------

ACCESS_ROUTES = (
    "GET /version",
    f"POST {SSR_PATH}",
    "GET /api/v1/namespaces/demo",
    f"POST {SSAR_PATH}",
)


def test_no_answer_of_the_cluster_makes_the_access_check_answer_5xx(kube_app, api):
    client = kube_app(NO_RETRY).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "t"
    sent = {**header(kubeconfig_for(api.url)), "X-CSRF-Token": "t"}
    seen = Counter()

    @examples(40)
    @given(answer=route_answers(*ACCESS_ROUTES))
    @example(answer=(f"POST {SSR_PATH}", {"status": "x"}))
    @example(answer=(f"POST {SSR_PATH}", {"status": {"userInfo": ["a"]}}))
    @example(answer=(f"POST {SSR_PATH}", {"status": 5}))
    @example(answer=(f"POST {SSAR_PATH}", {"status": [1]}))
    def check(answer):
        route, body = answer
        api.reset()
        api.answer(route, body)

        response = client.post("/cluster-access/check", headers=sent, json={"projectId": "demo"})

        assert response.status_code == 200, (answer, response.get_data(as_text=True))
        access = response.get_json()["access"]
        assert all(isinstance(p, str) and p for p in access["problems"]), access
        could_not = [p for p in access["problems"] if "could not answer the check" in p]
        seen["named" if could_not else "answered"] += 1

    check()
    assert seen["named"] >= 5 and seen["answered"] >= 5, seen


def test_the_access_check_says_which_field_of_which_answer(kube_app, api):
    client = kube_app(NO_RETRY).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "t"
    api.answer(f"POST {SSAR_PATH}", {"status": [1]})

    response = client.post(
        "/cluster-access/check",
        headers={**header(kubeconfig_for(api.url)), "X-CSRF-Token": "t"},
        json={"projectId": "demo"},
    )

    access = response.get_json()["access"]
    assert (access["reachable"], access["user"]) == (True, "dev@example.com")
    assert access["problems"] == [
        "The cluster could not answer the check: asking whether the credential may create "
        "deployments: the answer's status is a list, not an object."
    ]


# -- a run -------------------------------------------------------------------------------------

RUN_ROUTES = (
    "GET /apis/apps/v1",
    "GET /api/v1",
    f"PATCH {DEPLOYMENT_PATH}",
    f"GET {DEPLOYMENT_PATH}",
    f"GET {PODS_PATH}",
    f"GET {EVENTS_PATH}",
)


def test_a_run_against_a_cluster_answering_any_shape_ends_with_a_named_reason(kube_app, api):
    client = kube_app(NO_RETRY, readiness_timeout_s=0.3, readiness_poll_s=0.05).test_client()
    seen = Counter()

    @examples(12)
    @given(answer=route_answers(*RUN_ROUTES))
    @example(answer=("GET /apis/apps/v1", {"resources": "abc"}))  # runner_error: AttributeError
    def check(answer):
        route, body = answer
        api.reset()
        if route in (f"GET {PODS_PATH}", f"GET {EVENTS_PATH}"):
            # Pods and events are read only while the workload is not ready.
            api.answer(f"GET {DEPLOYMENT_PATH}", workload_status(available=0))
        api.answer(route, body)

        created = deploy(client, api.url, dict(IMAGE_SOURCE))
        assert created.status_code == 201, created.get_json()
        snapshot = wait_finished(client, created.get_json()["id"])

        failure = snapshot["failure"] or {}
        assert failure.get("reason") in (None, *CAUSES), (answer, failure)
        seen[failure.get("reason", "completed")] += 1

    check()
    assert seen["completed"] > 0 and seen["upstream_answer_malformed"] > 0, seen


def test_a_run_that_meets_a_malformed_discovery_fails_naming_it(kube_app, api):
    client = kube_app(NO_RETRY).test_client()
    api.answer("GET /apis/apps/v1", {"resources": "abc"})

    snapshot = wait_finished(client, deploy(client, api.url, dict(IMAGE_SOURCE)).get_json()["id"])

    assert snapshot["status"] == "failed"
    assert snapshot["failure"] == {
        "reason": "upstream_answer_malformed",
        "message": "applying Deployment/web failed: discovering apps/v1: the answer's resources "
        "is a string, not a list",
    }
