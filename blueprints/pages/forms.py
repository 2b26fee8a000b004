"""The forms of the project page: deploy panes read off each source kind's request schema (or a
catalog template's declared inputs), and the blocking-input form of a task. Sensitive values are
never prefilled."""

import logging
from dataclasses import dataclass

from flask import abort
from marshmallow import ValidationError
from marshmallow import fields as mfields
from marshmallow import validate as mvalidate

from blueprints.pages import presentation
from blueprints.pages.task_views import view_from_row
from blueprints.request_helpers import runtime
from engine.core.status import Status
from engine.runners.kinds import KINDS
from engine.trust import manifests, secrets

log = logging.getLogger(__name__)

FIELD_HELP = {
    "image": "e.g. nginx:1.27",
    "name": "lowercase letters, digits and '-'",
    "env": "KEY=value, one per line",
    "args": "KEY=value, one per line",
}


@dataclass
class FieldSpec:
    """One field of a deploy pane form."""

    name: str
    label: str
    widget: str  # text | textarea | number | select | checkbox | pairs | lines | password
    required: bool = False
    choices: list | None = None
    help: str = ""
    value: object = None
    error: str | None = None
    #: pairs: sensitive keys the user must re-enter (edit & redeploy); values never prefilled.
    reenter: tuple = ()
    #: blocking form: an input the task already has; sent only when the user changes it.
    kept: bool = False


def template_catalog() -> list[dict]:
    """The template catalog's summaries (name, title, description, inputs), or [] when the catalog
    is absent or cannot be read: the template pane then degrades to its plain form."""
    catalog = runtime().integrations.templates
    if catalog is None:
        return []
    try:
        return [template.summary() for template in catalog.templates()]
    except Exception:
        log.warning("template catalog unavailable for the deploy pane", exc_info=True)
        return []


def _widget(name: str, field) -> tuple[str, list | None]:
    choices = None
    for validator in getattr(field, "validators", []) or []:
        if isinstance(validator, mvalidate.OneOf):
            choices = list(validator.choices)
    if choices:
        return "select", choices
    if isinstance(field, mfields.Boolean):
        return "checkbox", None
    if isinstance(field, (mfields.Integer, mfields.Float)):
        return "number", None
    if isinstance(field, mfields.Dict):
        return "pairs", None
    if isinstance(field, mfields.List):
        return "lines", None
    if name in ("prompt", "description", "instructions"):
        return "textarea", None
    return "text", None


def schema_fields(kind: str) -> list[FieldSpec]:
    """A pane's fields, read off the kind's request schema (so new kinds get a pane for free)."""
    schema = KINDS[kind].schema()
    specs = []
    for name, field in schema.fields.items():
        if name == "kind" or field.dump_only:
            continue
        widget, choices = _widget(name, field)
        specs.append(
            FieldSpec(
                name=name,
                label=presentation.field_label(name),
                widget=widget,
                required=field.required,
                choices=choices,
                help=FIELD_HELP.get(name, ""),
            )
        )
    return specs


def prefill(specs: list[FieldSpec], kind: str, source: dict, sensitive_keys: list[str]) -> None:
    """Prefill from a predecessor's persisted source. Sensitive values are never prefilled: their
    keys are listed to re-enter instead."""
    declared = set(sensitive_keys)
    skip = KINDS[kind].no_prefill
    first_pairs = next((s for s in specs if s.widget == "pairs"), None)
    for spec in specs:
        if spec.name in skip or spec.name not in source:
            continue
        value = source[spec.name]
        if spec.widget == "pairs" and isinstance(value, dict):
            spec.value = "\n".join(
                f"{k}={v}"
                for k, v in value.items()
                if not secrets.is_sensitive(k, declared=declared)
            )
        elif spec.widget == "lines" and isinstance(value, list):
            spec.value = "\n".join(str(v) for v in value)
        elif not secrets.is_sensitive(spec.name, declared=declared):
            spec.value = value
    if first_pairs is not None:
        first_pairs.reenter = tuple(sorted(declared))


def template_fields(
    catalog: list[dict], chosen: str | None, source: dict | None, sensitive_keys: list[str]
) -> tuple[dict | None, list[FieldSpec]]:
    """The chosen template and one field per declared input: non-sensitive ones prefilled from the
    predecessor's args, else the declared default; sensitive ones always empty."""
    template = next((t for t in catalog if t["name"] == chosen), None)
    if template is None:
        return None, []
    args = (source or {}).get("args") or {}
    declared = set(sensitive_keys)
    specs = []
    for decl in template.get("inputs") or []:
        sensitive = decl.get("sensitive") or secrets.is_sensitive(
            decl["name"], declared=declared, input_type=decl.get("type")
        )
        widget = manifests.input_widget(decl.get("type"), sensitive=sensitive)
        value = None if sensitive else args.get(decl["name"], decl.get("default"))
        specs.append(
            FieldSpec(
                name=decl["name"],
                widget=widget,
                label=decl.get("title") or presentation.field_label(decl["name"]),
                required=bool(decl.get("required")) or (sensitive and decl["name"] in declared),
                help=decl.get("description") or "",
                value=value,
            )
        )
    return template, specs


def pane_context(
    project_id: str,
    kind: str,
    *,
    predecessor: dict | None = None,
    chosen_template: str | None = None,
    form_values: dict | None = None,
) -> dict:
    """What the deploy pane of `kind` renders (prefilled from `predecessor`'s row when editing)."""
    if kind not in KINDS:
        abort(404)
    source = dict(predecessor["source"]) if predecessor else {}
    sensitive_keys = list(predecessor["sensitive_keys"]) if predecessor else []
    template, catalog = None, []
    if KINDS[kind].fields_from_catalog:
        catalog = template_catalog()
        chosen_template = (
            chosen_template or source.get("template") or (catalog[0]["name"] if catalog else None)
        )
    if catalog:
        template, specs = template_fields(catalog, chosen_template, source, sensitive_keys)
    else:
        specs = schema_fields(kind)
        if predecessor:
            prefill(specs, kind, source, sensitive_keys)
    if form_values:
        for spec in specs:
            if spec.widget != "password" and spec.name in form_values:
                spec.value = form_values[spec.name]
    view = view_from_row(predecessor) if predecessor else None
    return {
        "project_id": project_id,
        "kind": kind,
        "kinds": KINDS,
        "specs": specs,
        "catalog": catalog,
        "template": template,
        "predecessor": view,
        "errors": [],
        "sensitive_keys": sensitive_keys,
    }


def _pairs(text: str) -> dict[str, str]:
    """KEY=value lines. An error names the line by number only: the same parser reads the
    "Secret values" box, and any part of a line there may be a secret."""
    found = {}
    for number, line in enumerate((text or "").splitlines(), start=1):
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            raise ValidationError(f"line {number} is not KEY=value")
        found[key.strip()] = value.strip()
    return found


def source_from_form(kind: str, form, ctx: dict) -> tuple[dict, list[str], dict]:
    """(source, sensitive key names, field errors) from a submitted pane form."""
    source: dict = {"kind": kind}
    sensitive: list[str] = []
    errors: dict[str, str] = {}
    if ctx["template"] is not None:  # a catalog template's inputs are its args
        source["template"] = ctx["template"]["name"]
        args = {}
        for spec in ctx["specs"]:
            raw = form.get(f"f:{spec.name}", "")
            if spec.widget == "checkbox":
                raw = "true" if raw else "false"
            if raw != "":
                args[spec.name] = raw
            if spec.widget == "password" and raw != "":
                sensitive.append(spec.name)
        source["args"] = args
        return source, sensitive, errors
    for spec in ctx["specs"]:
        raw = form.get(f"f:{spec.name}", "")
        try:
            if spec.widget == "checkbox":
                source[spec.name] = bool(raw)
            elif spec.widget == "number":
                if raw.strip():
                    source[spec.name] = (
                        int(raw) if raw.strip().lstrip("-").isdigit() else float(raw)
                    )
            elif spec.widget == "pairs":
                values = _pairs(raw)
                secret_values = _pairs(form.get(f"s:{spec.name}", ""))
                for key in spec.reenter:
                    value = form.get(f"s:{spec.name}:{key}", "")
                    if value:
                        secret_values[key] = value
                sensitive += sorted(secret_values)
                values.update(secret_values)
                if values:
                    source[spec.name] = values
            elif spec.widget == "lines":
                items = [line.strip() for line in raw.splitlines() if line.strip()]
                if items:
                    source[spec.name] = items
            elif raw.strip():
                source[spec.name] = raw.strip()
        except (ValueError, ValidationError) as exc:
            errors[spec.name] = str(
                exc.messages[0] if isinstance(exc, ValidationError) else "must be a number"
            )
    return source, sensitive, errors


def flatten_errors(messages, prefix="") -> dict[str, str]:
    flat = {}
    if isinstance(messages, dict):
        for key, value in messages.items():
            flat.update(flatten_errors(value, f"{prefix}{key}." if key != "source" else ""))
    elif isinstance(messages, list):
        flat[prefix.rstrip(".") or "_form"] = "; ".join(
            str(m) for m in messages if not isinstance(m, (dict, list))
        )
    return flat


def input_fields(snapshot: dict) -> list[FieldSpec]:
    """The blocking-input form: every sensitive input re-asked (empty, required), the others
    prefilled from their declared defaults. Inputs the task already has (declared `missing:
    false` by the runner) are `kept`: sent only when changed, so a default never silently
    replaces what the deployment was given."""
    if snapshot["status"] != Status.BLOCKED:
        return []
    declared = set(snapshot.get("sensitiveKeys") or [])
    specs = []
    for decl in snapshot.get("pendingInputs") or []:
        if isinstance(decl, str):
            decl = {"name": decl}
        name = decl.get("name")
        if not name:
            continue
        sensitive = bool(decl.get("sensitive")) or secrets.is_sensitive(
            name, declared=declared, input_type=decl.get("type")
        )
        widget = manifests.input_widget(decl.get("type"), sensitive=sensitive)
        kept = not sensitive and decl.get("missing") is False
        specs.append(
            FieldSpec(
                name=name,
                label=decl.get("label") or presentation.field_label(name),
                widget=widget,
                required=(sensitive or bool(decl.get("required"))) and not kept,
                help=decl.get("description") or "",
                value=None if sensitive else decl.get("default"),
                kept=kept,
            )
        )
    return sorted(specs, key=lambda spec: spec.kept)
