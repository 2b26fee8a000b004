"""The template catalog: shipped templates, declarations, sensitivity, YAML-safe rendering, and the
load-time rules that keep secrets in Secrets and every resource inside its own instance."""

import os
import textwrap

import pytest
import yaml

from engine.abort import CANCEL, SHUTDOWN, Aborted, AbortSignal
from engine.integrations.base import AppliedResource, ApplyError, IntegrationError, ResourceRef
from engine.integrations.template_catalog import TemplateCatalog
from engine.integrations.templates import (
    CatalogError,
    InstantiationError,
    InvalidInputs,
    TemplateApplyError,
    TemplateNotFound,
)
from engine.operations.setting_rules import PROJECT_ROOT

SHIPPED = PROJECT_ROOT / "catalog"

GREETER = """
name: greeter
title: Greeter
description: says hello
inputs:
  - name: greeting
    type: string
    default: hello
  - name: replicas
    type: integer
    default: 1
  - name: verbose
    type: boolean
    default: false
  - name: motd
    type: string
    sensitive: true
  - name: adminPassword
    type: string
  - name: pin
    type: secret
resources:
  - apiVersion: v1
    kind: Secret
    metadata:
      name: ${instance}-secret
    stringData:
      motd: ${inputs.motd}
      admin: ${inputs.adminPassword}
      pin: ${inputs.pin}
  - apiVersion: apps/v1
    kind: Deployment
    metadata:
      name: ${instance}
      labels:
        team: web
    spec:
      replicas: ${inputs.replicas}
      template:
        spec:
          containers:
            - name: app
              image: busybox
              args: ["echo", "${inputs.greeting} from ${instance} in ${namespace}"]
              env:
                - name: GREETING
                  value: ${inputs.greeting}
                - name: VERBOSE
                  value: "${inputs.verbose}"
"""


def catalog_of(tmp_path, **files) -> TemplateCatalog:
    for name, text in files.items():
        (tmp_path / f"{name}.yaml").write_text(textwrap.dedent(text))
    return TemplateCatalog(tmp_path)


def test_the_shipped_catalog_loads_with_a_web_app_postgresql_and_redis():
    catalog = TemplateCatalog(SHIPPED)
    names = [t.name for t in catalog.templates()]
    assert {"webapp", "postgresql", "redis"} <= set(names)
    for template in catalog.templates():
        for decl in template.inputs:
            assert set(decl.as_json()) >= {"name", "type", "default", "required", "sensitive"}
            if decl.sensitive:
                assert decl.default is None
    postgres = catalog.get("postgresql")
    assert postgres.sensitive_names == {"password"}
    values, missing = postgres.resolve({})
    assert [d.name for d in missing] == ["password"]
    assert values["version"] == "17"


@pytest.mark.parametrize("name", ["webapp", "postgresql", "redis"])
def test_every_shipped_template_renders_namespaced_labelled_instance_scoped_documents(name):
    template = TemplateCatalog(SHIPPED).get(name)
    supplied = {d.name: "s3cret-value" for d in template.inputs if d.sensitive}
    values, missing = template.resolve(supplied)
    assert missing == []
    manifests = template.render(instance=f"{name}-abc123", namespace="shop", values=values)
    text = yaml.safe_dump(manifests)
    assert "${" not in text
    for manifest in manifests:
        meta = manifest["metadata"]
        assert meta["namespace"] == "shop" and meta["name"].startswith(f"{name}-abc123")
        assert meta["labels"]["app.kubernetes.io/instance"] == f"{name}-abc123"
        if manifest["kind"] != "Secret":
            assert "s3cret-value" not in yaml.safe_dump(manifest)
    assert {m["kind"] for m in manifests} & {"Deployment", "StatefulSet"}


def test_sensitivity_is_the_declaration_or_the_shared_predicate(tmp_path):
    template = catalog_of(tmp_path, greeter=GREETER).get("greeter")
    flags = {d.name: d.sensitive for d in template.inputs}
    assert flags == {
        "greeting": False,
        "replicas": False,
        "verbose": False,
        "motd": True,  # declared
        "adminPassword": True,  # named like a secret (shared predicate)
        "pin": True,
    }  # typed as one (shared predicate)


def test_placeholders_take_typed_values_and_interpolate_into_strings(tmp_path):
    template = catalog_of(tmp_path, greeter=GREETER).get("greeter")
    values, _ = template.resolve(
        {"replicas": "3", "verbose": "yes", "motd": "m", "adminPassword": "a", "pin": "p"}
    )
    secret, deployment = template.render(instance="greeter-0a1b2c", namespace="demo", values=values)
    assert deployment["spec"]["replicas"] == 3
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"] == ["echo", "hello from greeter-0a1b2c in demo"]
    assert container["env"][1] == {"name": "VERBOSE", "value": True}
    assert deployment["metadata"]["labels"]["team"] == "web"
    assert secret["stringData"] == {"motd": "m", "admin": "a", "pin": "p"}


@pytest.mark.parametrize(
    "hostile",
    [
        "x\nkind: ClusterRole",
        "a: b",
        "- item",
        "{{ injected }}",
        "*alias",
        "&anchor x",
        '"quoted"',
        "'single'",
        "${inputs.replicas}",
        "# comment",
        "null",
        "true",
        "123",
    ],
)
def test_values_are_yaml_safe_they_never_change_the_document_structure(tmp_path, hostile):
    template = catalog_of(tmp_path, greeter=GREETER).get("greeter")
    values, _ = template.resolve(
        {"greeting": hostile, "motd": "m", "adminPassword": "a", "pin": "p"}
    )
    manifests = template.render(instance="greeter-0a1b2c", namespace="demo", values=values)
    reparsed = list(yaml.safe_load_all(yaml.safe_dump_all(manifests)))
    assert reparsed == manifests
    deployment = reparsed[1]
    assert deployment["kind"] == "Deployment"
    env = deployment["spec"]["template"]["spec"]["containers"][0]["env"]
    assert env[0] == {"name": "GREETING", "value": hostile}
    # A value is substituted once: a placeholder inside a value stays text.
    assert deployment["spec"]["replicas"] == 1


def test_bad_values_are_reported_by_field_without_echoing_them(tmp_path):
    template = catalog_of(tmp_path, greeter=GREETER).get("greeter")
    with pytest.raises(InvalidInputs) as caught:
        template.resolve({"replicas": "many-SECRETISH", "verbose": "perhaps"})
    assert caught.value.fields == {
        "replicas": "must be an integer",
        "verbose": "must be true or false",
    }
    assert "SECRETISH" not in str(caught.value)


def test_required_inputs_without_value_or_default_are_missing(tmp_path):
    template = catalog_of(
        tmp_path,
        t="""
        name: t
        inputs:
          - {name: a, type: string, required: true}
          - {name: b, type: string, required: true, default: x}
          - {name: c, type: string}
        resources:
          - {apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"},
             data: {a: "${inputs.a}", b: "${inputs.b}", c: "${inputs.c}"}}
    """,
    ).get("t")
    values, missing = template.resolve({"a": ""})
    assert [d.name for d in missing] == ["a"]
    assert values == {"b": "x", "c": ""}


@pytest.mark.parametrize(
    "body,problem",
    [
        (
            """
     inputs: [{name: password, type: password}]
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"},
          data: {p: "${inputs.password}"}}
     """,
            "may only be used in a Secret's data or stringData",
        ),
        (
            """
     inputs: [{name: password, type: password}]
     resources:
       - {apiVersion: v1, kind: Secret, metadata: {name: "${instance}",
          annotations: {leak: "${inputs.password}"}}, stringData: {p: x}}
     """,
            "may only be used in a Secret's data or stringData",
        ),
        (
            """
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: &m {name: "${instance}"}, data: *m}
     """,
            "aliases are not accepted",
        ),
        (
            """
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: {name: fixed-name}}
     """,
            "must contain ${instance}",
        ),
        (
            """
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"},
          data: {a: "${inputs.nope}"}}
     """,
            "unknown placeholders ['inputs.nope']",
        ),
        (
            """
     inputs: [{name: token, type: string, default: abc}]
     resources:
       - {apiVersion: v1, kind: Secret, metadata: {name: "${instance}"},
          stringData: {t: "${inputs.token}"}}
     """,
            "a sensitive input has no default",
        ),
        (
            """
     inputs: [{name: n, type: integer, default: ten}]
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"}}
     """,
            "must be an integer",
        ),
        (
            """
     inputs: [{name: n, type: integer}]
     resources:
       - {apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"}}
     """,
            "an optional integer input needs a default",
        ),
        (
            """
     resources:
       - {apiVersion: v1, kind: Namespace, metadata: {name: "${instance}"}}
     """,
            "Namespace is not a namespaced kind a task may create",
        ),
        (
            """
     resources:
       - {apiVersion: example.com/v1, kind: Widget, metadata: {name: "${instance}"}}
     """,
            "Widget is not a namespaced kind a task may create",
        ),
        (
            """
     resources: []
     """,
            "non-empty list",
        ),
    ],
)
def test_templates_breaking_the_rules_are_rejected_at_load_naming_the_file(tmp_path, body, problem):
    with pytest.raises(CatalogError) as caught:
        catalog_of(tmp_path, broken="name: broken\n" + textwrap.dedent(body))
    assert "broken.yaml" in str(caught.value) and problem in str(caught.value)


def test_an_edit_is_picked_up_and_a_broken_edit_hides_only_that_template(tmp_path):
    catalog = catalog_of(
        tmp_path,
        greeter=GREETER,
        other="""
        name: other
        resources: [{apiVersion: v1, kind: ConfigMap, metadata: {name: "${instance}"}}]
    """,
    )
    path = tmp_path / "greeter.yaml"
    path.write_text(textwrap.dedent(GREETER).replace("default: hello", "default: bonjour"))
    os.utime(path, ns=(1, 1))  # a different mtime even within the filesystem's resolution
    assert catalog.get("greeter").resolve({})[0]["greeting"] == "bonjour"
    path.write_text("name: greeter\nresources: nope\n")
    os.utime(path, ns=(2, 2))
    assert [t.name for t in catalog.templates()] == ["other"]
    with pytest.raises(CatalogError):
        catalog.get("greeter")
    with pytest.raises(TemplateNotFound):
        catalog.get("missing")


def test_declared_sensitive_keys_names_only_declared_secrets_that_were_given(tmp_path):
    catalog = catalog_of(tmp_path, greeter=GREETER)
    given = {"motd", "greeting", "pin"}  # a source's args and the inputs
    assert catalog.declared_sensitive_keys("greeter", given) == ["motd", "pin"]
    assert catalog.declared_sensitive_keys("greeter", {"greeting"}) == []
    assert catalog.declared_sensitive_keys("gone", given) == []


class _Cluster:
    """Just enough cluster for the provider call: applies in order, refuses one kind."""

    def __init__(self, refuse=None, error=ApplyError, delay_s=0.0):
        self.refuse, self.error, self.delay_s, self.applied = refuse, error, delay_s, []

    def apply(self, manifest, *, abort):
        abort.sleep(self.delay_s)
        ref = ResourceRef.of(manifest)
        if ref.kind == self.refuse:
            raise self.error("refused")
        self.applied.append(ref)
        return AppliedResource(ref, "created")


def _manifests(tmp_path):
    template = catalog_of(tmp_path, greeter=GREETER).get("greeter")
    values, _ = template.resolve({"motd": "m", "adminPassword": "a", "pin": "p"})
    return template.render(instance="greeter-0a1b2c", namespace="demo", values=values)


def test_a_refused_document_is_a_typed_apply_failure_carrying_the_partial_instance(tmp_path):
    manifests = _manifests(tmp_path)
    catalog = TemplateCatalog(tmp_path)
    with pytest.raises(TemplateApplyError) as caught:
        catalog.instantiate(manifests, cluster=_Cluster(refuse="Deployment"), abort=AbortSignal())
    assert [r.ref.kind for r in caught.value.applied] == ["Secret"]
    assert caught.value.ref.kind == "Deployment" and caught.value.reason == "apply_failed"
    with pytest.raises(InstantiationError) as other:
        catalog.instantiate(
            manifests,
            abort=AbortSignal(),
            cluster=_Cluster(refuse="Deployment", error=IntegrationError),
        )
    assert not isinstance(other.value, TemplateApplyError)


class _AbortedMidCall(_Cluster):
    """Fires the caller's signal from inside the second document's apply: the call is mid-way
    by construction, whatever the machine's load (a timer racing the applies is not)."""

    def __init__(self, signal: AbortSignal, reason: str, in_flight_s: float):
        super().__init__()
        self.signal, self.reason, self.in_flight_s = signal, reason, in_flight_s

    def apply(self, manifest, *, abort):
        if len(self.applied) == 1:  # the first document is applied, the second starts
            self.signal.abort(self.reason)
            self.delay_s = self.in_flight_s
        return super().apply(manifest, abort=abort)


def test_a_cancel_mid_call_lets_the_instantiation_finish_but_a_shutdown_stops_it(tmp_path):
    manifests = _manifests(tmp_path)
    assert len(manifests) >= 2  # a document applied before the abort, one in flight
    first = ResourceRef.of(manifests[0])
    catalog = TemplateCatalog(tmp_path)
    abort = AbortSignal()
    cluster = _AbortedMidCall(abort, CANCEL, in_flight_s=0.2)
    applied = catalog.instantiate(manifests, cluster=cluster, abort=abort)
    assert abort.reason == CANCEL  # the cancel did land mid-call
    assert len(applied) == len(manifests) == len(cluster.applied)
    # A shutdown interrupts the document in flight (were it let through like a cancel, its 30 s
    # apply would finish and be counted).
    abort = AbortSignal()
    cluster = _AbortedMidCall(abort, SHUTDOWN, in_flight_s=30.0)
    with pytest.raises(Aborted):
        catalog.instantiate(manifests, cluster=cluster, abort=abort)
    assert cluster.applied == [first]
    with pytest.raises(Aborted):  # already cancelled: the call never starts
        aborted = AbortSignal()
        aborted.abort(CANCEL)
        catalog.instantiate(manifests, cluster=_Cluster(), abort=aborted)
