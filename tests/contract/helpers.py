"""Helpers shared by the Kubernetes contract tests (and the browser test that deploys to kmock):
the deployment they apply, kmock responders, and how a test reads the outcome through the API;
and the sandbox the OpenAPI contract tests serve (test_api_contract.py, the generated client)."""

import base64
import json

import yaml
from gevent.pywsgi import WSGIServer
from gevent.server import StreamServer

from tests.contract.conftest import kubeconfig_for
from tests.helpers import loopback_listener, wait_for_status

#: A sandbox that settles a deployment in a fraction of a second.
FAST_SANDBOX = {
    "SANDBOX_APPLY_DELAY_S": "0.01",
    "SANDBOX_READY_DELAY_S": "0.05",
    "READINESS_POLL_S": "0.05",
    "ACCESS_LOG": "",
}
#: A kubeconfig the sandbox accepts (it deploys nowhere real), sent as the documented
#: X-Kubeconfig header: creates reach the engine instead of stopping at a garbled header.
SANDBOX_KUBECONFIG = base64.b64encode(b"apiVersion: v1\nkind: Config\n").decode()

DEPLOYMENT_PATH = "/apis/apps/v1/namespaces/demo/deployments/web"
SERVICE_PATH = "/api/v1/namespaces/demo/services/web"
DEPLOYMENT = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "demo", "labels": {"app": "web"}},
    "spec": {
        "replicas": 2,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {
            "metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
        },
    },
}


def workload_status(available: int, name: str = "web") -> dict:
    """A Deployment or StatefulSet in demo as the API returns it: one replica wanted, settled on
    its current generation, `available` of it up."""
    return {
        "metadata": {"name": name, "namespace": "demo", "generation": 1},
        "spec": {"replicas": 1},
        "status": {
            "observedGeneration": 1,
            "replicas": 1,
            "updatedReplicas": 1,
            "readyReplicas": available,
            "availableReplicas": available,
        },
    }


def status(code: int, message: str) -> dict:
    """A Kubernetes Status body, as the API server sends with an error."""
    return {
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "message": message,
    }


def echo(request):
    """kmock responder: answer an apply with the object it sent (what the API server does)."""
    return request.data


def patches(mock, path=DEPLOYMENT_PATH):
    return [r for r in mock["patch"] if r.url.path == path]


def header(kubeconfig) -> dict:
    """The X-Kubeconfig header carrying `kubeconfig`."""
    return {"X-Kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()}


def deploy(client, server_url: str, source: dict):
    """POST a task of `source` in project demo, with a kubeconfig for the kmock at `server_url`."""
    return client.post(
        "/api/v1/tasks",
        headers=header(kubeconfig_for(server_url)),
        json={"projectId": "demo", "source": source},
    )


def wait_finished(client, task_id: str) -> dict:
    """The task's snapshot once it is completed or failed (read through this test's own app)."""
    # Bounds a failure only: a prompt or github run (devbox, gateway, apply, verify) takes a few
    # seconds on an idle machine and well past ten on a loaded one.
    return wait_for_status(client, task_id, "completed", "failed", timeout=90.0, interval=0.1)


def serve_access(mock, *, denied=(), user="dev@example.com", version="v1.31.2"):
    """Script what the access check asks: /version, who the credential is (SelfSubjectReview),
    the namespace demo, and a SelfSubjectAccessReview that allows all but `denied` (verb,
    resource) pairs."""

    def review(request):
        attributes = request.data["spec"]["resourceAttributes"]
        allowed = (attributes["verb"], attributes["resource"]) not in set(denied)
        return {**request.data, "status": {"allowed": allowed}}

    mock["get /version"] << {"major": "1", "minor": "31", "gitVersion": version}
    (
        mock["post /apis/authentication.k8s.io/v1/selfsubjectreviews"]
        << 201
        << {"status": {"userInfo": {"username": user}}}
    )
    mock["get /api/v1/namespaces/demo"] << {"metadata": {"name": "demo"}}
    mock["post /apis/authorization.k8s.io/v1/selfsubjectaccessreviews"] << 201 << review


class CountingListener:
    """A TCP listener on 127.0.0.1 that counts the connections it receives."""

    def __init__(self):
        self.accepted = 0
        self.server = StreamServer(("127.0.0.1", 0), self._handle)
        self.server.start()
        self.port = self.server.server_port

    def _handle(self, sock, _address):
        self.accepted += 1
        sock.close()

    def stop(self):
        self.server.stop()


#: Paths of the objects an image source with a port (IMAGE_SOURCE) deploys and reads.
PODS_PATH = "/api/v1/namespaces/demo/pods"
EVENTS_PATH = "/api/v1/namespaces/demo/events"
SLICES_PATH = "/apis/discovery.k8s.io/v1/namespaces/demo/endpointslices"
SSR_PATH = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
SSAR_PATH = "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews"


def discovery(*kinds: tuple[str, str]) -> dict:
    """An APIResourceList serving (plural, kind) pairs, namespaced, with a status subresource."""
    resources = []
    for plural, kind in kinds:
        resources.append({"name": plural, "kind": kind, "namespaced": True, "verbs": ["get"]})
        resources.append({"name": f"{plural}/status", "kind": kind, "namespaced": True})
    return {"kind": "APIResourceList", "resources": resources}


#: "METHOD path" -> (status, body) of a healthy cluster: the access check passes, an image
#: source deploys and is ready at once, and every read of a diagnosis has an answer.
HEALTHY_CLUSTER = {
    "GET /version": (200, {"major": "1", "minor": "31", "gitVersion": "v1.31.2"}),
    f"POST {SSR_PATH}": (201, {"status": {"userInfo": {"username": "dev@example.com"}}}),
    "GET /api/v1/namespaces/demo": (200, {"metadata": {"name": "demo"}}),
    f"POST {SSAR_PATH}": (201, {"status": {"allowed": True}}),
    "GET /api/v1": (
        200,
        discovery(("services", "Service"), ("pods", "Pod"), ("events", "Event")),
    ),
    "GET /apis/apps/v1": (200, discovery(("deployments", "Deployment"))),
    "GET /apis/discovery.k8s.io/v1": (200, discovery(("endpointslices", "EndpointSlice"))),
    f"PATCH {DEPLOYMENT_PATH}": (201, {"metadata": {"name": "web"}}),
    f"PATCH {SERVICE_PATH}": (201, {"metadata": {"name": "web"}}),
    f"GET {DEPLOYMENT_PATH}": (200, workload_status(available=1)),
    f"GET {SERVICE_PATH}": (200, {"spec": {"selector": {"app": "web"}, "clusterIP": "10.0.0.9"}}),
    f"GET {SLICES_PATH}": (
        200,
        {"items": [{"endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": True}}]}]},
    ),
    f"GET {PODS_PATH}": (
        200,
        {
            "items": [
                {
                    "metadata": {"name": "web-1"},
                    "status": {
                        "conditions": [{"type": "Ready", "status": "False"}],
                        "containerStatuses": [
                            {"name": "web", "state": {"waiting": {"reason": "ContainerCreating"}}}
                        ],
                    },
                }
            ]
        },
    ),
    f"GET {EVENTS_PATH}": (200, {"items": [{"reason": "Pulling", "message": "pulling nginx"}]}),
}


class ScriptedKubeApi:
    """A Kubernetes API on 127.0.0.1 answering each "METHOD path" with a scripted status and
    body: a healthy cluster (HEALTHY_CLUSTER), of which a test replaces answers with any JSON.
    kmock cannot serve such answers (its DSL reads a list or a string as a script of its own)."""

    def __init__(self):
        self.answers: dict[str, tuple[int, object]] = {}
        self.seen: list[str] = []
        self._server = WSGIServer(loopback_listener(), self._app, log=None)
        self._server.start()
        self.reset()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def reset(self) -> None:
        self.answers = dict(HEALTHY_CLUSTER)
        self.seen = []

    def answer(self, route: str, body, status: int | None = None) -> None:
        """Answer `route` with `body` (any JSON value) and `status` (by default its healthy one)."""
        self.answers[route] = (status or HEALTHY_CLUSTER[route][0], body)

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def _app(self, environ, start_response):
        route = f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}"
        self.seen.append(route)
        code, body = self.answers.get(route, (404, status(404, "the server could not find it")))
        start_response(f"{code} Scripted", [("Content-Type", "application/json")])
        # ASCII JSON: a lone surrogate or NUL arrives as JSON's own escape, NaN as `NaN`.
        return [json.dumps(body).encode()]
