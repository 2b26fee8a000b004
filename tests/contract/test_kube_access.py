"""Contract: "Check" in the cluster access dialog asks the cluster (kmock) what a deploy needs,
read-only, through the run's address guard, and answers what is missing in plain words."""

import json

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from engine.integrations.kube.access import NEEDS
from engine.integrations.kube.retry import RetryPolicy
from tests.contract.conftest import TOKEN, kubeconfig_for
from tests.contract.helpers import header, serve_access, status
from tests.helpers import dump_database, free_port

SSAR = "post /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def check(client, server_url: str, project: str = "demo"):
    with client.session_transaction() as session:
        session["csrf"] = "t"
    response = client.post(
        "/cluster-access/check",
        headers={**header(kubeconfig_for(server_url)), "X-CSRF-Token": "t"},
        json={"projectId": project},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_json()


def test_a_cluster_that_allows_everything_answers_with_its_version_and_user(
    kube_app, mock_server, mock, sql_conn
):
    serve_access(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    answer = check(client, mock_server.url)

    assert answer["ok"] is True
    assert answer["access"] == {
        "reachable": True,
        "version": "v1.31.2",
        "user": "dev@example.com",
        "namespace": "demo",
        "namespaceExists": True,
        "missing": [],
        "problems": [],
        "cause": None,
    }
    asked = [r.data["spec"]["resourceAttributes"] for r in mock[SSAR]]
    assert len(asked) == len(NEEDS) and {a["namespace"] for a in asked} == {"demo"}
    assert {"verb": "patch", "group": "apps", "resource": "deployments", "namespace": "demo"} in (
        asked
    )
    assert {"verb": "get", "resource": "pods", "subresource": "log"}.items() <= next(
        a for a in asked if a.get("subresource") == "log"
    ).items()
    # Read-only: nothing but reviews (answered, never stored) and reads was sent.
    assert {r.method for r in mock} <= {"GET", "POST"}
    assert all(r.method == "GET" or "review" in r.url.path for r in mock)
    assert TOKEN not in dump_database(sql_conn)


def test_what_the_credential_may_not_do_is_listed_in_plain_words(kube_app, mock_server, mock):
    serve_access(mock, denied={("patch", "secrets"), ("list", "events")})
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    access = check(client, mock_server.url)["access"]

    assert access["problems"] == [
        "Not allowed to patch secrets in namespace demo (needed to deploy).",
        "Not allowed to list events in namespace demo (needed to show why a workload is not "
        "ready).",
    ]


def test_a_missing_namespace_and_an_unserved_self_subject_review_are_said(
    kube_app, mock_server, mock
):
    mock["get /api/v1/namespaces/demo"][:1] << 404 << status(404, 'namespaces "demo" not found')
    (
        mock["post /apis/authentication.k8s.io/v1/selfsubjectreviews"][:1]
        << 404
        << status(404, "the server could not find the requested resource")
    )
    serve_access(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    access = check(client, mock_server.url)["access"]

    assert access["user"] is None and access["namespaceExists"] is False
    assert access["problems"] == [
        "Namespace demo does not exist on the cluster: create it before deploying."
    ]


def test_refused_credentials_are_named(kube_app, mock_server, mock):
    mock["get /version"] << {"gitVersion": "v1.31.2"}
    (
        mock["post /apis/authentication.k8s.io/v1/selfsubjectreviews"]
        << 401
        << status(401, "Unauthorized")
    )
    client = kube_app(RetryPolicy(max_retries=0)).test_client()

    access = check(client, mock_server.url)["access"]

    assert access["reachable"] is True
    assert access["problems"] == [
        "The cluster does not accept this kubeconfig's credentials (token or client "
        "certificate): it may be expired or revoked."
    ]


def test_an_unreachable_cluster_is_said_before_any_deploy(kube_app):
    port = free_port()
    client = kube_app(RetryPolicy(max_retries=1, backoff_s=0.01)).test_client()

    access = check(client, f"http://127.0.0.1:{port}")["access"]

    assert access["reachable"] is False
    assert access["problems"] == [
        f"Cannot reach the cluster at 127.0.0.1:{port}: the connection was refused (2 "
        "attempts). Check the kubeconfig's server address, that the cluster is up, and that "
        "this server can reach it."
    ]


def test_the_check_goes_through_the_runs_address_guard(make_app, mock_server, mock):
    # Default settings: loopback is not opted in, so the check refuses it unasked.
    app = make_app(cluster_backend="kubernetes", overrides={"integrations": None})

    answer = check(app.test_client(), mock_server.url.replace("http:", "https:"))

    assert answer["ok"] is False and "cluster.server" in answer["message"]
    assert list(mock) == []


def test_a_project_id_that_is_no_project_id_is_refused_before_the_cluster_is_asked(
    kube_app, mock_server, mock
):
    """The body is validated as every body is: `{"projectId": "\\ud800"}` reached the cluster
    request unchecked and answered 500. By the page's route and the API's, each the same."""
    serve_access(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "t"
    kubeconfig = header(kubeconfig_for(mock_server.url))
    routes = {
        "/cluster-access/check": {**kubeconfig, "X-CSRF-Token": "t"},
        "/api/v1/cluster-access/check": kubeconfig,
    }
    bad = ['"\\ud800"', '"de\\u0000mo"', '"Demo"', '"-demo"', f'"{"x" * 64}"', "5", '["demo"]']

    answers = {
        (path, project): client.post(
            path,
            data=f'{{"projectId": {project}}}',
            content_type="application/json",
            headers=headers,
        )
        for path, headers in routes.items()
        for project in bad
    }

    for (path, project), response in answers.items():
        assert response.status_code == 400, (path, project, response.get_data(as_text=True))
        assert response.get_json()["code"] == "invalid_request", response.get_json()
        assert "projectId" in response.get_json()["fields"], response.get_json()
    assert list(mock) == []  # nothing was asked
    # Positive control: a project id, null (the context's namespace) and no body are checked.
    for path, headers in routes.items():
        for body in ({"projectId": "demo"}, {"projectId": None}, None):
            answer = client.post(path, json=body, headers=headers)
            assert answer.status_code == 200 and answer.get_json()["ok"] is True, answer.text
            assert answer.get_json()["access"]["reachable"] is True
    assert len(list(mock)) > 0


#: Any JSON, its text hostile to PostgreSQL and to a URL (NUL, lone surrogates, slashes).
TEXT = st.one_of(
    st.sampled_from(["demo", "Demo", "", "\x00", "\ud800", "a/b", "..", "x" * 64, "demo\n"]),
    st.text(max_size=10),
)
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
BODIES = st.one_of(
    st.fixed_dictionaries({"projectId": JSON}), st.dictionaries(TEXT, JSON, max_size=3), JSON
)


def test_no_body_makes_the_access_check_answer_5xx_or_ask_the_cluster_unchecked(
    kube_app, mock_server, mock
):
    """Property: whatever the body, either it is an AccessCheck (the cluster is asked about that
    project's namespace, 200) or it is refused with a stable code and the cluster is not asked."""
    serve_access(mock)
    client = kube_app(RetryPolicy(max_retries=0)).test_client()
    with client.session_transaction() as session:
        session["csrf"] = "t"
    kubeconfig = header(kubeconfig_for(mock_server.url))
    routes = {
        "/cluster-access/check": {**kubeconfig, "X-CSRF-Token": "t"},
        "/api/v1/cluster-access/check": kubeconfig,
    }
    seen = {"asked": 0, "refused": 0}

    @settings(
        max_examples=60,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=BODIES, path=st.sampled_from(sorted(routes)))
    @example(body={"projectId": "\ud800"}, path="/cluster-access/check")  # the 500
    @example(body={"projectId": "demo"}, path="/api/v1/cluster-access/check")
    def check(body, path):
        asked_before = len(list(mock))
        response = client.post(
            path,
            data=json.dumps(body).encode("utf-8", "surrogatepass"),
            content_type="application/json",
            headers=routes[path],
        )
        assert response.status_code in (200, 400), (body, response.get_data(as_text=True))
        if response.status_code == 400:
            seen["refused"] += 1
            assert response.get_json()["code"] == "invalid_request", response.get_json()
            assert len(list(mock)) == asked_before, body
        else:
            seen["asked"] += 1
            access = response.get_json()["access"]
            assert access["namespace"] == (body.get("projectId") or "default"), body

    check()
    assert seen["asked"] > 0 and seen["refused"] > 0, seen


@pytest.mark.parametrize("backend", ["kubernetes", "sandbox"])
def test_the_project_page_offers_cluster_access_only_where_runs_reach_real_clusters(
    make_app, backend
):
    """The page's "Cluster access" button and dialog, where a request must bring a kubeconfig
    (engine/lifecycle/kubeconfigs.py) and only there."""
    app = make_app(cluster_backend=backend, overrides={"integrations": None})

    page = app.test_client().get("/projects/demo")

    assert page.status_code == 200
    text = page.get_data(as_text=True)
    required = backend == "kubernetes"
    assert ("data-cluster-open" in text) is required
    assert ('id="cluster-dialog"' in text) is required
