"""Property: every parser of an upstream answer takes any JSON shape as data. Each answer (a
Kubernetes object or list, a refusal's Status, a pod and its events, a model's plan) is either
read or refused with a named cause (UpstreamAnswerMalformed, MalformedAnswer), never an
AttributeError, TypeError or KeyError; the HTTP contract tests drive the same parsers over real
sockets (tests/contract/test_kube_hostile_answers.py)."""

import json
from collections import Counter

import pytest
import yaml
from hypothesis import example, given
from hypothesis import strategies as st

from engine.integrations.base import IntegrationError, Readiness, ResourceRef
from engine.integrations.kube.diagnosis import CAUSES, diagnose, not_ready, pod_name
from engine.integrations.kube.readiness import (
    endpoint_slices_readiness,
    object_readiness,
    service_readiness_by_spec,
)
from engine.integrations.kube.response import KubeResponse, refusal
from engine.integrations.shapes import (
    UpstreamAnswerMalformed,
    entries,
    field,
    optional,
    reading,
)
from engine.runners import direct
from engine.runners.ai_answer import (
    MalformedAnswer,
    check_secret_placement,
    parse_answer,
    placeholders,
    sanitize,
)
from engine.trust.untrusted import unfit_for_jsonb, unstorable
from tests.hostile_json import JSON, examples, hostile

KINDS = [dict, list, str, int, float, bool]


def answered(body) -> dict:
    """What the adapter hands a parser: the body through KubeResponse.json (an object, or
    UpstreamAnswerMalformed)."""
    return KubeResponse(200, {}, json.dumps(body).encode()).json()


def of_kind(value, kind: type) -> bool:
    """Whether a value is of a JSON type as the accessors mean it (a bool is no integer)."""
    return (kind is bool) == isinstance(value, bool) and isinstance(
        value, (int, float) if kind is float else kind
    )


@examples(200)
@given(
    obj=JSON | st.fixed_dictionaries({"a": JSON | st.fixed_dictionaries({"b": JSON})}),
    path=st.sampled_from(["a", "a.b"]),
    kind=st.sampled_from(KINDS),
)
def test_a_field_is_of_its_type_or_a_named_malformed_answer(obj, path, kind):
    try:
        value = field(obj, path, kind)
    except UpstreamAnswerMalformed as exc:
        assert str(exc).startswith("the answer"), exc
    else:
        assert value is None or of_kind(value, kind), value
    assert of_kind(optional(obj, path, kind, default=kind()), kind)
    try:
        assert all(isinstance(item, dict) for item in entries(obj, path))
    except UpstreamAnswerMalformed:
        pass


def test_the_accessors_name_the_field_and_both_types():
    review = {"status": {"userInfo": ["a"]}}
    with pytest.raises(UpstreamAnswerMalformed) as raised, reading("asking who"):
        field(review, "status.userInfo.username", str)
    assert str(raised.value) == "asking who: the answer's status.userInfo is a list, not an object"
    assert raised.value.reason == "upstream_answer_malformed"
    assert field({"spec": {}}, "spec.replicas", int, default=1) == 1  # absent: the default
    assert field({"spec": {"replicas": None}}, "spec.replicas", int, default=1) == 1  # null too
    with pytest.raises(UpstreamAnswerMalformed, match="replicas is true or false, not an integer"):
        field({"spec": {"replicas": True}}, "spec.replicas", int)  # a bool is no JSON integer
    with pytest.raises(UpstreamAnswerMalformed, match=r"items\[1\] is a string, not an object"):
        entries({"items": [{}, "x"]}, "items")
    assert optional({"status": 5}, "status.phase", str) == ""


# -- readiness ----------------------------------------------------------------------------------


def conditions(*pairs):
    return [{"type": t, "status": s, "reason": "R", "message": "m"} for t, s in pairs]


WORKLOAD = {
    "metadata": {"name": "web", "generation": 2},
    "spec": {"replicas": 2, "completions": 1},
    "status": {
        "observedGeneration": 2,
        "updatedReplicas": 2,
        "readyReplicas": 2,
        "availableReplicas": 2,
        "succeeded": 0,
        "conditions": conditions(("Progressing", "True"), ("Complete", "False"), ("Ready", "True")),
    },
}
SERVICE = {"spec": {"type": "ClusterIP", "clusterIP": "10.0.0.1", "selector": {"app": "web"}}}
SLICES = {
    "items": [
        {"endpoints": [{"addresses": ["10.1.0.1"], "conditions": {"ready": True}}]},
        {"endpoints": [{"addresses": ["10.1.0.2"], "conditions": {"ready": False}}]},
    ]
}
#: Kinds with a rule of their own, one by its Ready condition, one that only has to exist.
READINESS_KINDS = ["Deployment", "StatefulSet", "Job", "TemplateInstance", "ConfigMap"]


def test_readiness_of_any_object_is_an_answer_or_a_named_malformed_answer():
    seen = Counter()

    @examples(250)
    @given(kind=st.sampled_from(READINESS_KINDS), body=hostile(WORKLOAD))
    @example(kind="Deployment", body={"spec": [1]})
    @example(kind="Deployment", body={"status": {"availableReplicas": "5"}})
    @example(kind="Job", body={"status": {"conditions": [{"type": ["Complete"]}]}})
    @example(kind="StatefulSet", body={"metadata": {"generation": "2"}})
    def check(kind, body):
        seen[read(lambda: object_readiness(kind, answered(body)))] += 1

    check()
    # The positive control: each outcome is reached (a rule refusing everything would pass).
    assert min(seen[o] for o in ("ready", "waiting", "malformed")) >= 5, seen


def test_a_services_readiness_of_any_shape_is_an_answer_or_a_named_malformed_answer():
    seen = Counter()

    @examples(200)
    @given(service=hostile(SERVICE), slices=hostile(SLICES))
    @example(service={"spec": "x"}, slices={"items": [{"endpoints": {"a": 1}}]})
    @example(service=SERVICE, slices={"items": [{"endpoints": [{"addresses": 5}]}]})
    def check(service, slices):
        outcome = read(lambda: service_readiness_by_spec(answered(service)))
        if outcome == "undecided":
            outcome = read(lambda: endpoint_slices_readiness(answered(slices)))
        seen[outcome] += 1

    check()
    assert min(seen[o] for o in ("ready", "waiting", "malformed")) >= 5, seen


def read(decide) -> str:
    """What a readiness rule made of an answer: ready, waiting, undecided (None) or malformed."""
    try:
        readiness = decide()
    except UpstreamAnswerMalformed as exc:
        assert str(exc).startswith(("the answer", "the API answered 200")), exc
        return "malformed"
    if readiness is None:
        return "undecided"
    assert isinstance(readiness, Readiness) and isinstance(readiness.detail, str)
    return "ready" if readiness.ready is True else "waiting"


# -- why a pod is not ready ---------------------------------------------------------------------


def pod(state: dict, *, scheduled: str = "True", last: dict | None = None) -> dict:
    """A pod that is not ready, its one container in `state`."""
    return {
        "metadata": {"name": "web-1"},
        "spec": {"containers": [{"name": "web", "image": "nginx:1.99"}]},
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "Ready", "status": "False"},
                {"type": "PodScheduled", "status": scheduled, "reason": "Unschedulable"},
            ],
            "containerStatuses": [
                {"name": "web", "restartCount": 3, "state": state, "lastState": last or {}}
            ],
        },
    }


#: Pods of several causes, for the mutations to start from.
PODS = [
    pod({}, scheduled="False"),
    pod({"waiting": {"reason": "CrashLoopBackOff"}}, last={"terminated": {"exitCode": 1}}),
    pod({"waiting": {"reason": "ImagePullBackOff", "message": "not found"}}),
    pod({"terminated": {"reason": "OOMKilled", "exitCode": 137}}),
]
EVENT = {"reason": "Failed", "message": "Failed to pull: not found", "lastTimestamp": "2026"}


def test_a_diagnosis_of_any_pods_and_events_says_less_never_fails():
    causes = Counter()

    @examples(150)
    @given(
        pods=st.lists(st.sampled_from(PODS).flatmap(hostile), max_size=2),
        events=st.lists(hostile(EVENT), max_size=2),
    )
    @example(pods=[{"status": {"conditions": 5}}, {"metadata": []}], events=[["x"]])
    def check(pods, events):
        named = {pod_name(p): events for p in not_ready(pods)}

        findings = diagnose(pods, named)

        for finding in findings:
            assert finding.cause in CAUSES
            assert isinstance(finding.message, str) and unstorable(finding.message) is None
            assert isinstance(finding.restarts, int)
            causes[finding.cause] += 1

    check()
    assert len(causes) >= 3, causes  # the control: hostile pods still say why when they can


# -- a refusal's words --------------------------------------------------------------------------

STATUS = {
    "kind": "Status",
    "code": 422,
    "message": "invalid",
    "details": {"kind": "namespaces", "name": "demo", "causes": [{"field": "spec.replicas"}]},
}


def test_a_refusal_of_any_shape_is_a_typed_error_quoting_only_text():
    named = []

    @examples(200)
    @given(code=st.sampled_from([400, 401, 403, 404, 409, 410, 422]), body=hostile(STATUS))
    @example(code=422, body={"details": {"causes": 5}})
    @example(code=404, body={"details": {"kind": ["namespaces"]}})
    def check(code, body):
        response = KubeResponse(code, {}, json.dumps(body).encode())

        error = refusal(response, method="PATCH", path="/apis/apps/v1/namespaces/demo/x/w")

        assert isinstance(error, IntegrationError) and unstorable(str(error)) is None
        named.extend(getattr(error, "fields", ()))

    check()
    assert "spec.replicas" in named  # the control: a Status of the usual shape is read


# -- a model's answer ---------------------------------------------------------------------------

PLAN = {
    "plan": {"summary": "nginx", "args": {"replicas": 1}},
    "manifests": [
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "labels": {"app": "web"}},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "replicas": 1},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web"},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80}]},
        },
        {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "web"},
            "spec": {"tls": [{}], "rules": [{"host": "a.example", "http": {"paths": [{}]}}]},
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "db"},
            "stringData": {"PASSWORD": "${input:PASSWORD}"},
        },
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: settings}\ndata: {a: b}\n",
    ],
}
NEED_INPUTS = {
    "needInputs": [
        {"name": "PASSWORD", "type": "password", "sensitive": True, "required": True},
        {"name": "REPLICAS", "type": "number", "default": 1, "description": "how many"},
    ]
}
YAML_DATE = "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\ndata: {d: 2020-01-01}\n"
SERVICE_DOC = PLAN["manifests"][1]


def test_a_model_answer_of_any_shape_is_a_plan_or_a_named_malformed_answer():
    seen = Counter()

    @examples(250)
    @given(answer=hostile(PLAN) | hostile(NEED_INPUTS), fenced=st.booleans())
    # The answers that crashed a run (runner_error).
    @example(answer={"needInputs": [{"name": "X", "type": []}]}, fenced=False)
    @example(answer={**PLAN, "plan": {"summary": "a\x00b"}}, fenced=False)
    @example(answer={**PLAN, "plan": {"summary": "\ud800"}}, fenced=True)
    @example(answer={**PLAN, "plan": {"n": float("nan")}}, fenced=False)
    @example(answer={"plan": {}, "manifests": [YAML_DATE]}, fenced=False)
    @example(
        answer={"plan": {}, "manifests": ["kind: Secret\ndata: !!binary aGk=\n"]}, fenced=False
    )
    @example(answer={"plan": {}, "manifests": [{**SERVICE_DOC, "spec": [1]}]}, fenced=False)
    @example(answer={"plan": {}, "manifests": [{**SERVICE_DOC, "kind": "A\x00"}]}, fenced=False)
    def check(answer, fenced):
        text = json.dumps(answer)
        if fenced:
            text = f"Here it is:\n```json\n{text}\n```\n"

        try:
            parsed = parse_answer(text)
        except MalformedAnswer as exc:
            assert str(exc) and unstorable(str(exc)) is None, exc
            seen["refused"] += 1
            return
        seen["read"] += 1
        # What the runner reads and stores of a parsed answer: storable, and read without a crash.
        assert unfit_for_jsonb(parsed) == {}
        for declared in parsed.get("needInputs", []):
            assert isinstance(declared["name"], str) and isinstance(declared["sensitive"], bool)
        assert isinstance(parsed.get("plan", {}), dict)
        for manifest in parsed.get("manifests", []):
            ResourceRef.of(manifest)
            where = direct.endpoint(manifest, "demo")
            assert where is None or isinstance(where, str)
            placeholders(manifest)
            try:
                check_secret_placement([manifest], {"PASSWORD"})
            except MalformedAnswer:
                pass
            yaml.safe_dump(sanitize(manifest, {"PASSWORD"}))

    check()
    assert seen["read"] >= 20 and seen["refused"] >= 20, seen
