"""The service's own deployment files: the Kubernetes manifests validate against the Kubernetes
schemas (offline, kubernetes-validate) and say what operating the service needs; the Dockerfile
builds a non-root gunicorn image. tests/integration/test_image_env.py boots what it installs."""

import os
import re
import runpy
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from engine.operations.config import DEFINITIONS
from tests.dockerfile import Dockerfile

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted((ROOT / "deploy" / "kubernetes").glob("*.yaml"))
KUBERNETES_VERSION = "1.37.0"
SECRETS = {
    "SECRET_KEY",
    "OIDC_CLIENT_SECRET",
    "GATEWAY_API_KEY",
    "DEVBOX_SIGNING_KEY",
    "DATABASE_URL",
}


def documents() -> list[dict]:
    return [doc for path in MANIFESTS for doc in yaml.safe_load_all(path.read_text()) if doc]


def of_kind(kind: str) -> dict:
    [doc] = [d for d in documents() if d["kind"] == kind]
    return doc


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_every_manifest_validates_against_the_kubernetes_schemas(path):
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_refuses_a_misspelled_field():
    """Positive control: strict validation is really applied to these documents."""
    service = of_kind("Service")
    service["spec"]["port"] = service["spec"].pop("ports")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(service, KUBERNETES_VERSION, strict=True)


def container_env(deployment) -> dict[str, dict]:
    [container] = deployment["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e for e in container["env"]}


def test_the_deployment_probes_health_and_outlasts_the_drain(monkeypatch):
    deployment = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["lifecycle"]["preStop"]["exec"]["command"][0] == "sleep"
    assert shutdown_problems(deployment, monkeypatch) == []
    assert {"cpu", "memory"} <= set(container["resources"]["requests"])
    assert "memory" in container["resources"]["limits"]
    assert pod["securityContext"]["runAsNonRoot"] is True


def shutdown_problems(deployment: dict, monkeypatch) -> list[str]:
    """What would cut a pod's drain short, read from the three files that set its times: the
    engine's drain (DRAIN_WAIT_S, then SHUTDOWN_GRACE_S for aborted runs, then the process
    groups' stop and the loops') must end inside gunicorn's graceful timeout (gunicorn.conf.py
    read as gunicorn reads it, in the pod's environment), and the preStop pause plus that
    timeout inside the kubelet's terminationGracePeriodSeconds."""
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    for name in [n for n in os.environ if n.lower() in DEFINITIONS]:
        monkeypatch.delenv(name)
    for name, entry in container_env(deployment).items():
        if "value" in entry:
            monkeypatch.setenv(name, entry["value"])
    try:
        conf = runpy.run_path(str(ROOT / "gunicorn.conf.py"))
    except SystemExit as exc:  # the boot check refuses the settings themselves
        return [str(exc)]
    settings, graceful = conf["settings"], conf["graceful_timeout"]
    drain = (
        settings.drain_wait_s
        + settings.shutdown_grace_s
        + settings.runtime_stop_timeout_s
        + 4  # the cleanup worker's, the runner notices' and the listener's stops
    )
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    problems = []
    if settings.drain_wait_s <= 0:
        problems.append("DRAIN_WAIT_S is 0: a rolling restart fails every run in flight")
    if not drain < graceful:
        problems.append(
            f"the drain ({drain:g} s) outlasts gunicorn's graceful timeout ({graceful})"
        )
    if not pre_stop + graceful < pod["terminationGracePeriodSeconds"]:
        problems.append(
            f"preStop ({pre_stop} s) + graceful timeout ({graceful} s) outlast "
            f"terminationGracePeriodSeconds ({pod['terminationGracePeriodSeconds']})"
        )
    return problems


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (lambda pod, env: pod.update(terminationGracePeriodSeconds=30), "preStop (5 s)"),
        (lambda pod, env: env.update(GRACEFUL_TIMEOUT={"value": "29"}), "outlasts gunicorn"),
        (lambda pod, env: env.update(GRACEFUL_TIMEOUT={"value": "15"}), "DRAIN_WAIT_S=20"),
        (lambda pod, env: env.update(DRAIN_WAIT_S={"value": "0"}), "DRAIN_WAIT_S is 0"),
    ],
    ids=["grace-period", "graceful-timeout", "refused-at-boot", "no-drain"],
)
def test_a_deployment_whose_times_cut_the_drain_short_is_found(monkeypatch, change, problem):
    """The control: each way the three files can disagree is found."""
    deployment = of_kind("Deployment")
    pod = deployment["spec"]["template"]["spec"]
    [container] = pod["containers"]
    env = {e["name"]: e for e in container["env"]}
    change(pod, env)
    container["env"] = [{"name": name, **entry} for name, entry in env.items()]
    problems = shutdown_problems(deployment, monkeypatch)
    assert any(problem in p for p in problems), problems


def test_every_secret_comes_from_the_secret_and_every_env_name_is_a_setting():
    env = container_env(of_kind("Deployment"))
    for name in SECRETS:
        assert "value" not in env[name], f"{name} must not be written in the manifest"
        assert env[name]["valueFrom"]["secretKeyRef"]["name"] == "deploy-task-engine"
    known = {definition.variable for definition in DEFINITIONS.values()}
    assert set(env) <= known, set(env) - known


def test_service_budget_and_policy_select_the_deployments_pods():
    labels = of_kind("Deployment")["spec"]["template"]["metadata"]["labels"]
    assert of_kind("Service")["spec"]["selector"].items() <= labels.items()
    for kind in ("PodDisruptionBudget", "NetworkPolicy"):
        selector = of_kind(kind)["spec"].get("selector") or of_kind(kind)["spec"]["podSelector"]
        assert selector["matchLabels"].items() <= labels.items(), kind


def test_the_network_policy_lets_the_pods_reach_only_what_they_use():
    policy = of_kind("NetworkPolicy")["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    ports = {(p["protocol"], p["port"]) for rule in policy["egress"] for p in rule["ports"]}
    # DNS, PostgreSQL / PgBouncer, and https (OIDC issuer, gateway, devbox API, cluster APIs).
    assert ports == {
        ("UDP", 53),
        ("TCP", 53),
        ("TCP", 5432),
        ("TCP", 6432),
        ("TCP", 443),
        ("TCP", 6443),
    }
    for rule in policy["egress"]:
        assert rule["to"], "an egress rule without peers would allow everywhere"


def test_the_image_runs_gunicorn_as_a_non_root_user_from_a_slim_base():
    dockerfile = Dockerfile.read(ROOT / "Dockerfile")
    final = dockerfile.stages[-1]
    assert re.fullmatch(r"python:[\d.]+-slim", final.base)
    assert final.user not in (None, "root", "0")
    assert final.cmd == ["gunicorn", "-c", "gunicorn.conf.py", "wsgi:app"]
    # The final stage installs nothing: only the build stage's venv is copied in.
    assert not [run for run in final.runs if re.search(r"\b(pip|apt-get|apt|apk)\b", run)]
    assert [origin for origin, _, _ in final.copies] == ["build", None]
    assert any("requirements.txt" in run for run in dockerfile.stages[0].runs)
