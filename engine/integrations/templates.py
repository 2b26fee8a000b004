"""A catalog template: its input declarations, the rules its file must follow, and the rendering
of an instance; the catalog's protocol (Templates). The catalog itself, a directory of template
files and the one provider call that instantiates one, is template_catalog.py.

A template file declares its inputs and the resources it renders. String values may hold the
placeholders `${instance}` (the instance name), `${namespace}` and `${inputs.NAME}`. They are
substituted after the YAML is parsed, so no value can change a document's structure (YAML-safe by
construction); a string that is exactly one placeholder takes the input's typed value.

Rules a template must follow (checked at load, see `_validate`): every resource is namespaced and
named after `${instance}` (two instances never collide, and failure cleanup can only ever touch its
own instance); a sensitive input is referenced only inside a `Secret` (secrets reach the cluster as
Secrets and nowhere else); a sensitive input has no default.
"""

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from secrets import token_hex
from typing import Protocol

from engine.abort import AbortSignal
from engine.integrations.base import (
    ENGINE_NAME,
    AppliedResource,
    Cluster,
    IntegrationError,
    ResourceRef,
)
from engine.trust import manifests, secrets
from engine.trust.untrusted import load_yaml

INPUT_TYPES = manifests.TEMPLATE_INPUT_TYPES
#: Short enough that `<template>-<suffix>-<resource suffix>` stays a valid object name.
TEMPLATE_NAME = re.compile(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$")
INPUT_NAME = manifests.TEMPLATE_INPUT_NAME
PLACEHOLDER = manifests.TEMPLATE_PLACEHOLDER
INSTANCE_PLACEHOLDER = "${instance}"
#: Random bytes of an instance name's suffix (6 hex characters).
INSTANCE_SUFFIX_BYTES = 3
MANAGED_BY = ENGINE_NAME
TEMPLATE_LABEL = f"{ENGINE_NAME}/template"
INSTANCE_LABEL = "app.kubernetes.io/instance"


class TemplateError(IntegrationError):
    """The template cannot be used."""

    reason = "template_error"


class TemplateNotFound(TemplateError):
    """No template of that name in the catalog."""

    reason = "template_not_found"


class CatalogError(TemplateError):
    """A template file that does not validate (its message names the file and the problem)."""

    reason = "template_invalid"


class InvalidInputs(TemplateError):
    """Input values that do not fit their declared types; `fields` names each (never values)."""

    reason = "invalid_inputs"

    def __init__(self, fields: dict[str, str]):
        super().__init__("; ".join(f"{k}: {v}" for k, v in sorted(fields.items())))
        self.fields = fields


class InstantiationError(IntegrationError):
    """The provider call stopped part-way; `applied` is what it had applied by then."""

    def __init__(
        self, message: str, *, ref: ResourceRef, applied: list[AppliedResource], reason: str
    ):
        super().__init__(message)
        self.ref = ref
        self.applied = list(applied)
        self.reason = reason


class TemplateApplyError(InstantiationError):
    """The cluster refused a document of the instance: the typed apply-stage failure."""


@dataclass(frozen=True)
class InputDecl:
    """One declared input. `sensitive` is the declaration OR the shared predicate."""

    name: str
    type: str
    default: str | int | bool | None
    required: bool
    sensitive: bool
    description: str = ""

    def as_json(self) -> dict:
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "required": self.required,
            "sensitive": self.sensitive,
            "description": self.description,
        }

    def coerce(self, value):
        """The value as this input's type; ValueError naming the expected type."""
        if self.type == "integer":
            if isinstance(value, bool):
                raise ValueError("must be an integer")
            if isinstance(value, int):
                return value
            if isinstance(value, str) and re.fullmatch(r"-?\d{1,18}", value.strip()):
                return int(value.strip())
            raise ValueError("must be an integer")
        if self.type == "boolean":
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in {"true", "yes", "1", "on"}:
                return True
            if text in {"false", "no", "0", "off"}:
                return False
            raise ValueError("must be true or false")
        if isinstance(value, (dict, list)) or value is None:
            raise ValueError("must be a string")
        return value if isinstance(value, str) else _text(value)


@dataclass(frozen=True)
class Template:
    name: str
    title: str
    description: str
    inputs: tuple[InputDecl, ...]
    #: Parsed documents with placeholders; copied at every render.
    resources: tuple[dict, ...]

    def summary(self) -> dict:
        """What GET /api/v1/templates shows: declarations, never values."""
        return {
            "name": self.name,
            "title": self.title,
            "description": self.description,
            "inputs": [d.as_json() for d in self.inputs],
        }

    @property
    def input_names(self) -> set[str]:
        return {d.name for d in self.inputs}

    @property
    def sensitive_names(self) -> set[str]:
        return {d.name for d in self.inputs if d.sensitive}

    def resolve(self, supplied: dict) -> tuple[dict, list[InputDecl]]:
        """(typed value of every input that has one, declarations of required inputs without one).

        Raises InvalidInputs when a supplied value does not fit its type.
        """
        values, missing, errors = {}, [], {}
        for decl in self.inputs:
            value = supplied.get(decl.name)
            if value is not None and value != "":
                try:
                    values[decl.name] = decl.coerce(value)
                except ValueError as exc:
                    errors[decl.name] = str(exc)
            elif decl.default is not None:
                values[decl.name] = decl.default
            elif decl.required:
                missing.append(decl)
            else:
                values[decl.name] = ""  # only string-like inputs lack a default (load checks)
        if errors:
            raise InvalidInputs(errors)
        return values, missing

    def allocate_instance_name(self) -> str:
        """A fresh instance name: `<template>-<random suffix>`."""
        return f"{self.name}-{token_hex(INSTANCE_SUFFIX_BYTES)}"

    def render(self, *, instance: str, namespace: str, values: dict) -> list[dict]:
        """The instance's manifests: placeholders substituted, namespace and labels set."""
        context = {
            "instance": instance,
            "namespace": namespace,
            **{f"inputs.{k}": v for k, v in values.items()},
        }
        manifests = []
        for doc in self.resources:
            manifest = _substitute(copy.deepcopy(doc), context)
            meta = manifest.setdefault("metadata", {})
            meta["namespace"] = namespace
            meta["labels"] = {
                **(meta.get("labels") or {}),
                INSTANCE_LABEL: instance,
                TEMPLATE_LABEL: self.name,
                "app.kubernetes.io/managed-by": MANAGED_BY,
            }
            manifests.append(manifest)
        return manifests


class Templates(Protocol):
    """The template catalog as the runners see it (TemplateCatalog below; fakes in tests)."""

    def templates(self) -> list[Template]:
        """Every template, with its declared inputs."""

    def get(self, name: str) -> Template:
        """One template by name."""

    def declared_sensitive_keys(self, name: str, given: set[str]) -> list[str]:
        """The names among `given` that template `name` declares sensitive."""

    def instantiate(
        self, manifests: list[dict], *, cluster: Cluster, abort: AbortSignal
    ) -> list[AppliedResource]:
        """Apply every document of one instance as a single provider call."""


def load_template(path: Path) -> Template:
    """Parse and validate one template file; CatalogError naming the file and the problem."""
    try:
        raw = load_yaml(path.read_text())
    except (OSError, ValueError) as exc:
        raise CatalogError(f"{path.name}: not readable YAML ({exc})")
    try:
        return _validate(raw)
    except (ValueError, TypeError, KeyError) as exc:
        raise CatalogError(f"{path.name}: {exc}")


def _validate(raw) -> Template:
    if not isinstance(raw, dict):
        raise ValueError("a template is a mapping")
    unknown = set(raw) - {"name", "title", "description", "inputs", "resources"}
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    name = raw.get("name")
    if not isinstance(name, str) or not TEMPLATE_NAME.match(name):
        raise ValueError("name must be lowercase letters, digits and '-', at most 30 characters")
    inputs = tuple(_input(item) for item in raw.get("inputs") or [])
    names = [d.name for d in inputs]
    if len(set(names)) != len(names):
        raise ValueError("an input is declared twice")
    resources = raw.get("resources")
    if not isinstance(resources, list) or not resources:
        raise ValueError("resources must be a non-empty list of manifests")
    known = {"instance", "namespace", *(f"inputs.{n}" for n in names)}
    sensitive = {f"inputs.{d.name}" for d in inputs if d.sensitive}
    seen = set()
    for i, doc in enumerate(resources):
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise ValueError(f"resource {i} needs apiVersion and kind")
        kind = doc["kind"]
        refusal = manifests.kind_refusal(kind)
        if refusal:
            raise ValueError(f"resource {i}: {refusal}")
        doc_name = (doc.get("metadata") or {}).get("name")
        if not isinstance(doc_name, str) or INSTANCE_PLACEHOLDER not in doc_name:
            raise ValueError(f"resource {i}: metadata.name must contain {INSTANCE_PLACEHOLDER}")
        if (kind, doc_name) in seen:
            raise ValueError(f"resource {i}: {kind} {doc_name} rendered twice")
        seen.add((kind, doc_name))
        refs = manifests.references(doc, PLACEHOLDER)
        if refs - known:
            raise ValueError(f"resource {i}: unknown placeholders {sorted(refs - known)}")
        misplaced = manifests.sensitive_outside_secret_data(doc, sensitive, PLACEHOLDER)
        if misplaced:
            raise ValueError(
                f"resource {i}: sensitive inputs {sorted(misplaced)} may only be "
                "used in a Secret's data or stringData"
            )
    return Template(
        name=name,
        title=str(raw.get("title") or name),
        description=str(raw.get("description") or ""),
        inputs=inputs,
        resources=tuple(resources),
    )


def _input(item) -> InputDecl:
    if not isinstance(item, dict):
        raise ValueError("each input is a mapping")
    unknown = set(item) - {"name", "type", "default", "required", "sensitive", "description"}
    if unknown:
        raise ValueError(f"input keys {sorted(unknown)} are unknown")
    name = item.get("name")
    if not isinstance(name, str) or not INPUT_NAME.match(name):
        raise ValueError(f"input name {name!r} is not a valid identifier")
    input_type = item.get("type", "string")
    if input_type not in INPUT_TYPES:
        raise ValueError(f"input {name}: type must be one of {sorted(INPUT_TYPES)}")
    for flag in ("required", "sensitive"):
        if not isinstance(item.get(flag, False), bool):
            raise ValueError(f"input {name}: {flag} must be true or false")
    sensitive = item.get("sensitive", False) or secrets.is_sensitive(name, input_type=input_type)
    decl = InputDecl(
        name=name,
        type=input_type,
        default=None,
        required=item.get("required", False),
        sensitive=sensitive,
        description=str(item.get("description") or ""),
    )
    default = item.get("default")
    if default is not None:
        if sensitive:
            raise ValueError(f"input {name}: a sensitive input has no default")
        default = decl.coerce(default)
    elif not decl.required and input_type in {"integer", "boolean"}:
        raise ValueError(f"input {name}: an optional {input_type} input needs a default")
    return InputDecl(
        name=name,
        type=input_type,
        default=default,
        required=decl.required,
        sensitive=sensitive,
        description=decl.description,
    )


def _substitute(obj, context: dict):
    def fill(text: str):
        # A value that is one whole placeholder keeps its type (replicas: ${inputs.replicas}).
        whole = PLACEHOLDER.fullmatch(text)
        if whole:
            return context[whole.group(1)]
        return PLACEHOLDER.sub(lambda m: _text(context[m.group(1)]), text)

    return manifests.map_strings(obj, fill)


def _text(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
