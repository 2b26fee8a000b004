"""What a request's source and inputs go through before any task exists: secrets split from the
persisted source, a template's args checked against its declared inputs, values too short to
scrub refused, and which result identities a clone may reuse (engine/lifecycle/actions.py)."""

from engine.errors import InvalidRequest, UnknownTemplate
from engine.integrations.templates import TemplateNotFound
from engine.runners.kinds import template_of
from engine.trust import secrets

#: Source fields that carry name -> value maps a user may put secrets in.
SECRET_BEARING_FIELDS = ("env", "args")


def strip_source(source: dict, inputs: dict, declared: list[str]) -> tuple[dict, dict, list[str]]:
    """(persistable source, in-memory inputs, sensitive key names): secrets leave the source."""
    kept = dict(source)
    memory = dict(inputs)
    stripped = set(declared)
    for field in SECRET_BEARING_FIELDS:
        values = source.get(field)
        if isinstance(values, dict):
            plain, sensitive = secrets.split(values, declared=set(declared))
            kept[field] = plain
            memory.update(sensitive)
            stripped.update(sensitive)
    _, sensitive_inputs = secrets.split(inputs, declared=set(declared))
    stripped.update(sensitive_inputs)
    return kept, memory, sorted(stripped)


def identity_kind(source: dict) -> tuple:
    """What a result identity names: the source kind and, for a template, which template. A clone
    reuses its predecessor's identities only within one project and one identity kind; an edit
    that switches template (or kind) deploys under a fresh identity, never over the old objects."""
    return (source.get("kind"), template_of(source))


def check_template_args(catalog, name: str | None, source: dict, inputs: dict | None) -> None:
    """The args of a source instantiating template `name` and the top-level inputs against the
    template's declared inputs, before any task exists: UnknownTemplate, or InvalidRequest naming
    each unknown or mistyped value by its field (`source.args.<name>`, `inputs.<name>`; never a
    value).

    Missing required inputs are not an error here: the run asks for them (blocked).
    """
    try:
        template = catalog.get(name or "")
    except TemplateNotFound:
        raise UnknownTemplate(f"no template named {name!r} in the catalog")
    declared = {d.name: d for d in template.inputs}
    fields: dict = {}
    messages = []
    for path, values in (
        (("source", "args"), source.get("args") or {}),
        (("inputs",), inputs or {}),
    ):
        errors = _input_errors(template.name, declared, values)
        if errors:
            where = fields
            for key in path[:-1]:
                where = where.setdefault(key, {})
            where[path[-1]] = errors
            messages += [f"{'.'.join(path)}.{k}: {v[0]}" for k, v in sorted(errors.items())]
    if messages:
        raise InvalidRequest("; ".join(messages), fields=fields)


def _input_errors(template_name: str, declared: dict, values: dict) -> dict:
    """{name: [reason]} for each value that is not a declared input or does not fit its type."""
    errors = {}
    for name, value in values.items():
        if name not in declared:
            errors[name] = [f"not an input of template {template_name}"]
        elif value is not None and value != "":
            try:
                declared[name].coerce(value)
            except ValueError as exc:
                errors[name] = [str(exc)]
    return errors


def refuse_short_secrets(
    memory: dict, sensitive: set[str], *, source: dict | None, inputs: dict
) -> None:
    """InvalidRequest naming every sensitive value under secrets.MIN_SECRET_CHARS: a value that
    short cannot be scrubbed from free text (a model's echo, a crash message) without mangling
    ordinary words, so it is refused before anything is stored."""
    short = secrets.too_short(memory, sensitive)
    if not short:
        return
    reason = [f"a sensitive value needs at least {secrets.MIN_SECRET_CHARS} characters"]
    fields: dict = {}
    for name in short:
        if name in inputs:
            fields.setdefault("inputs", {})[name] = reason
        else:
            where = next(
                (f for f in SECRET_BEARING_FIELDS if name in ((source or {}).get(f) or {})),
                "inputs",
            )
            fields.setdefault("source", {}).setdefault(where, {})[name] = reason
    raise InvalidRequest(f"{', '.join(short)}: {reason[0]}", fields=fields)
