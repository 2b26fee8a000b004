"""Real clusters from the browser: the "Cluster access" dialog checks a kubeconfig by the API's
rules, keeps it in the tab's sessionStorage only, and sends it as X-Kubeconfig on exactly the
requests that start or resume a run; a deploy goes through the Kubernetes adapter to kmock (a
Kubernetes API mock), and no byte of the kubeconfig reaches the server's disk, logs or database."""

import base64
from pathlib import Path

import pytest
import yaml

from tests.contract.conftest import TOKEN, kubeconfig_for
from tests.contract.helpers import (
    DEPLOYMENT_PATH,
    SERVICE_PATH,
    echo,
    serve_access,
    workload_status,
)
from tests.contract.kmock_server import KMockServer
from tests.e2e.conftest import NARROW, WIDE, open_pane
from tests.helpers import dump_database

pytestmark = pytest.mark.e2e

READY = workload_status(available=1)
#: kmock listens on plain http on 127.0.0.1: the operator opts that network in for this server.
KUBE_ENV = {
    "CLUSTER_BACKEND": "kubernetes",
    "KUBE_ALLOWED_NETWORKS": "127.0.0.0/8",
    "KUBE_ALLOW_HTTP": "true",
}


@pytest.fixture
def kmock_server():
    server = KMockServer().start()
    yield server
    server.stop()


def test_a_kubeconfig_from_the_dialog_deploys_through_kmock_and_is_never_stored(
    server, open_page, kmock_server, sql_conn, tmp_path
):
    mock = kmock_server.mock
    mock[f"patch {DEPLOYMENT_PATH}"] << 201 << echo
    mock[f"patch {SERVICE_PATH}"] << 201 << echo
    mock[f"get {DEPLOYMENT_PATH}"] << READY
    serve_access(mock)  # "Check" asks the cluster before the kubeconfig is kept
    srv = server(**KUBE_ENV)
    ui = open_page(srv, "demo")
    page = ui.page
    carried = []
    page.on(
        "request",
        lambda r: (
            carried.append((r.method, r.url.replace(srv.base, "")))
            if "x-kubeconfig" in r.headers
            else None
        ),
    )
    assert page.inner_text("[data-cluster-label]") == "not set"

    # Without cluster access a deploy asks for it first instead of sending a request that fails.
    page.click("[data-deploy=image]")
    page.wait_for_selector(open_pane("image"))
    page.fill("#f-image", "nginx:1.27")
    page.fill("#f-name", "web")
    page.fill("#f-port", "80")
    page.click("#pane button[type=submit]")
    page.wait_for_selector("#cluster-dialog[open]")
    ui.shot("cluster-dialog")
    assert len(mock["patch"]) == 0

    # A kubeconfig the API would refuse is refused here too, with its reason.
    page.fill("#cluster-kubeconfig", "apiVersion: v1\nkind: Config\nclusters: []\n")
    page.click("[data-cluster-save]")
    page.wait_for_function(
        "document.querySelector('#cluster-error').textContent.includes('current-context')"
    )
    assert page.is_visible("#cluster-error")
    assert page.evaluate("sessionStorage.getItem('kubeconfig')") is None

    text = yaml.safe_dump(kubeconfig_for(kmock_server.url, namespace="demo"))
    encoded = base64.b64encode(text.strip().encode()).decode()  # the dialog trims it
    page.set_input_files(
        "#cluster-file",
        files=[{"name": "config", "mimeType": "text/plain", "buffer": text.encode()}],
    )
    page.wait_for_function("document.querySelector('#cluster-kubeconfig').value.includes('ctx')")
    page.click("[data-cluster-save]")
    # The access check's whole answer, in words, before anything is deployed.
    page.wait_for_selector("#cluster-answer:not([hidden])")
    answer = page.inner_text("#cluster-answer")
    assert "Yes, Kubernetes v1.31.2" in answer and "dev@example.com" in answer, answer
    assert "Nothing: deploys to this namespace can go ahead." in answer, answer
    ui.shot("cluster-answer")
    page.click("[data-cluster-close]")
    page.wait_for_selector("#cluster-dialog:not([open])", state="attached")
    assert page.inner_text("[data-cluster-label]") == "ctx on c"
    assert page.evaluate("sessionStorage.getItem('kubeconfig')") == encoded
    ui.shot("cluster-set")

    page.click("#pane button[type=submit]")
    page.wait_for_selector("#timeline-pane.is-open[data-task-id]")
    task_id = page.get_attribute("#timeline-pane", "data-task-id")
    ui.wait_chip(task_id, "completed")
    ui.shot("deployed-through-kmock")
    page.set_viewport_size(NARROW)
    ui.shot("deployed-through-kmock")
    page.set_viewport_size(WIDE)
    sent = list(mock["patch"])
    assert [r.url.path for r in sent] == [DEPLOYMENT_PATH, SERVICE_PATH]
    assert all(r.headers["Authorization"] == f"Bearer {TOKEN}" for r in sent)
    # Exactly the check and the deploy carried it: never the page loads, streams or the cancel.
    assert [(m, u.split("?")[0]) for m, u in carried] == [
        ("POST", "/cluster-access/check"),
        ("POST", "/cluster-access/check"),  # refused, then kept
        ("POST", "/projects/demo/tasks"),
    ]

    page.click("[data-cluster-open]")
    page.click("[data-cluster-forget]")
    assert page.evaluate("sessionStorage.getItem('kubeconfig')") is None
    assert page.inner_text("[data-cluster-label]") == "not set"
    page.keyboard.press("Escape")

    # Nothing of it on the server's disk (its data directory, its log) or in the database.
    marks = [TOKEN, encoded, kmock_server.url + "\n", "current-context: ctx"]
    for path in Path(tmp_path).rglob("*"):
        if path.is_file() and "pgdata" not in path.parts:
            content = path.read_bytes().decode("utf-8", "replace")
            assert not [m for m in marks if m in content], path
    database = dump_database(sql_conn)
    assert not [m for m in (TOKEN, encoded) if m in database]
    assert srv.output()  # the log was read (positive control: it exists and has lines)
    ui.assert_no_errors()
