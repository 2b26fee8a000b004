"""Contract: how the Kubernetes adapter reads readiness, kind by kind, against kmock."""

import pytest

from engine.abort import AbortSignal
from engine.integrations.base import IntegrationError, Readiness, ResourceRef, UnknownKind

DEPLOYMENT = ResourceRef("apps/v1", "Deployment", "web", "demo")
STATEFULSET = ResourceRef("apps/v1", "StatefulSet", "db", "demo")
JOB = ResourceRef("batch/v1", "Job", "migrate", "demo")
SERVICE = ResourceRef("v1", "Service", "web", "demo")
CONFIG_MAP = ResourceRef("v1", "ConfigMap", "settings", "demo")
NAMESPACE = ResourceRef("v1", "Namespace", "team-a", None)
INSTANCE = ResourceRef("templates.deploy.example/v1", "TemplateInstance", "pg-1", "demo")


def workload(replicas=2, generation=3, **status):
    return {
        "metadata": {"name": "x", "generation": generation},
        "spec": {"replicas": replicas},
        "status": {"observedGeneration": generation, **status},
    }


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            workload(updatedReplicas=2, availableReplicas=2),
            Readiness(True, "2/2 replicas available"),
        ),
        (
            workload(updatedReplicas=2, availableReplicas=3),
            Readiness(True, "3/2 replicas available"),
        ),
        (
            workload(updatedReplicas=2, availableReplicas=1),
            Readiness(False, "1/2 replicas available"),
        ),
        (
            workload(updatedReplicas=1, availableReplicas=2),
            Readiness(False, "1/2 replicas updated"),
        ),
        (workload(replicas=0), Readiness(True, "0/0 replicas available")),
        (
            {"metadata": {"generation": 1}, "spec": {}, "status": {}},
            Readiness(False, "waiting for the controller to observe generation 1"),
        ),
        (
            {**workload(updatedReplicas=2, availableReplicas=2), "metadata": {"generation": 4}},
            Readiness(False, "waiting for the controller to observe generation 4"),
        ),
        (
            workload(
                updatedReplicas=1,
                availableReplicas=1,
                conditions=[
                    {
                        "type": "Progressing",
                        "status": "False",
                        "reason": "ProgressDeadlineExceeded",
                        "message": "ReplicaSet web-1 has timed out progressing.",
                    }
                ],
            ),
            Readiness(
                False, "progress deadline exceeded: ReplicaSet web-1 has timed out progressing."
            ),
        ),
    ],
)
def test_deployment_is_ready_when_enough_updated_replicas_are_available(kube, mock, body, expected):
    mock["get /apis/apps/v1/namespaces/demo/deployments/web"] << body

    assert kube.readiness(DEPLOYMENT, abort=AbortSignal()) == expected


@pytest.mark.parametrize(
    "body, ready",
    [
        (workload(replicas=3, availableReplicas=3), True),
        (workload(replicas=3, availableReplicas=2), False),
        (workload(replicas=1, readyReplicas=1), True),  # clusters older than availableReplicas
    ],
)
def test_statefulset_is_ready_when_enough_replicas_are_available(kube, mock, body, ready):
    mock["get /apis/apps/v1/namespaces/demo/statefulsets/db"] << body

    assert kube.readiness(STATEFULSET, abort=AbortSignal()).ready is ready


@pytest.mark.parametrize(
    "conditions, expected",
    [
        ([{"type": "Complete", "status": "True"}], Readiness(True, "complete")),
        (
            [{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}],
            Readiness(False, "failed: BackoffLimitExceeded"),
        ),
        ([], Readiness(False, "running: 0/1 succeeded")),
    ],
)
def test_job_is_ready_when_complete(kube, mock, conditions, expected):
    mock["get /apis/batch/v1/namespaces/demo/jobs/migrate"] << {
        "spec": {},
        "status": {"conditions": conditions},
    }

    assert kube.readiness(JOB, abort=AbortSignal()) == expected


def endpoint_slice(*readiness):
    return {
        "endpoints": [
            {"addresses": [f"10.0.0.{i}"], "conditions": {"ready": r}}
            for i, r in enumerate(readiness)
        ]
    }


@pytest.mark.parametrize(
    "slices, expected",
    [
        ([endpoint_slice(True, False)], Readiness(True, "1 ready endpoint")),
        ([endpoint_slice(None), endpoint_slice(True)], Readiness(True, "2 ready endpoints")),
        ([endpoint_slice(False)], Readiness(False, "no ready endpoints")),
        ([], Readiness(False, "no ready endpoints")),
    ],
)
def test_service_is_ready_when_it_has_ready_endpoints(kube, mock, slices, expected):
    mock["get /api/v1/namespaces/demo/services/web"] << {
        "spec": {"selector": {"app": "web"}, "clusterIP": "10.96.0.7", "type": "ClusterIP"}
    }
    mock["get /apis/discovery.k8s.io/v1/namespaces/demo/endpointslices"] << {"items": slices}

    assert kube.readiness(SERVICE, abort=AbortSignal()) == expected

    [listing] = mock["get /apis/discovery.k8s.io/v1/namespaces/demo/endpointslices"]
    assert listing.params == {"labelSelector": "kubernetes.io/service-name=web"}


@pytest.mark.parametrize(
    "spec",
    [
        {"clusterIP": "None", "selector": {"app": "web"}},
        {"type": "ExternalName", "externalName": "db.example.com"},
    ],
)
def test_headless_and_external_name_services_are_ready_without_endpoints(kube, mock, spec):
    mock["get /api/v1/namespaces/demo/services/web"] << {"spec": spec}

    assert kube.readiness(SERVICE, abort=AbortSignal()).ready
    assert not mock["get /apis/discovery.k8s.io/v1/namespaces/demo/endpointslices"]


@pytest.mark.parametrize(
    "conditions, expected",
    [
        (
            [{"type": "Ready", "status": "True", "message": "instance provisioned"}],
            Readiness(True, "instance provisioned"),
        ),
        (
            [{"type": "Ready", "status": "False", "reason": "Provisioning"}],
            Readiness(False, "Ready=False: Provisioning"),
        ),
        ([], Readiness(False, "waiting for the Ready condition")),
    ],
)
def test_template_instance_is_ready_by_its_own_ready_condition(kube, mock, conditions, expected):
    mock[f"get /apis/{INSTANCE.api_version}/namespaces/demo/templateinstances/pg-1"] << {
        "status": {"conditions": conditions}
    }

    assert kube.readiness(INSTANCE, abort=AbortSignal()) == expected


def test_other_kinds_are_ready_when_they_exist(kube, mock):
    mock["get /api/v1/namespaces/demo/configmaps/settings"] << {"data": {}}
    mock["get /api/v1/namespaces/team-a"] << {"metadata": {"name": "team-a"}}

    assert kube.readiness(CONFIG_MAP, abort=AbortSignal()) == Readiness(True, "exists")
    assert kube.readiness(NAMESPACE, abort=AbortSignal()) == Readiness(True, "exists")


@pytest.mark.parametrize("ref", [DEPLOYMENT, SERVICE, CONFIG_MAP, INSTANCE])
def test_a_missing_object_is_not_found(kube, mock, ref):
    # Nothing scripted: kmock's scaffold answers 404 with a Kubernetes Status.
    assert kube.readiness(ref, abort=AbortSignal()) == Readiness(False, "not found")


def test_an_unserved_kind_raises_unknown_kind(kube):
    with pytest.raises(UnknownKind):
        kube.readiness(ResourceRef("example.com/v1", "Widget", "w", "demo"), abort=AbortSignal())


def test_a_failing_read_is_an_integration_error_after_retries(kube, mock):
    mock["get /apis/apps/v1/namespaces/demo/deployments/web"] << 500 << {"message": "boom"}

    with pytest.raises(IntegrationError, match="gave up after 4 attempts.*boom"):
        kube.readiness(DEPLOYMENT, abort=AbortSignal())
