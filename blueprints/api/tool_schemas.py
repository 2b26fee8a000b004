"""JSON Schema from our marshmallow schemas, so tool definitions can never drift from validation."""

from marshmallow import Schema, fields, validate

from blueprints.schemas import SourceField
from engine.runners.kinds import KINDS
from engine.trust.untrusted import STORABLE_TEXT_PATTERN


def schema_of(schema: Schema | type[Schema]) -> dict:
    """The JSON Schema (object) of a marshmallow schema."""
    instance = schema() if isinstance(schema, type) else schema
    properties, required = {}, []
    for name, field in instance.fields.items():
        if field.dump_only:
            continue
        key = field.data_key or name
        properties[key] = field_schema(field)
        if field.required:
            required.append(key)
    out = {"type": "object", "properties": properties, "additionalProperties": False}
    if instance.__doc__:
        out["description"] = instance.__doc__.strip()
    if required:
        out["required"] = required
    return out


def field_schema(field: fields.Field) -> dict:
    if getattr(field, "json_schema", None):
        out = dict(field.json_schema)
    elif isinstance(field, SourceField):
        # Titled: a generated client names each kind's class by it, not by its place in the list.
        out = {
            "oneOf": [
                {"title": KINDS[name].title, **schema_of(KINDS[name].schema)}
                for name in sorted(KINDS)
            ]
        }
    elif isinstance(field, fields.Nested):
        out = schema_of(field.schema)
    elif isinstance(field, fields.List):
        out = {"type": "array", "items": field_schema(field.inner)}
    elif isinstance(field, fields.Dict):
        out = {"type": "object"}
        if field.key_field is not None:
            out["propertyNames"] = field_schema(field.key_field)
        if field.value_field is not None:
            out["additionalProperties"] = field_schema(field.value_field)
    elif isinstance(field, fields.UUID):
        out = {"type": "string", "format": "uuid"}
    elif isinstance(field, fields.Integer):
        out = {"type": "integer"}
    elif isinstance(field, fields.Number):
        out = {"type": "number"}
    elif isinstance(field, fields.Boolean):
        out = {"type": "boolean"}
    else:
        out = {"type": "string"}
        if not any(isinstance(v, validate.Regexp) for v in field.validators):
            out["pattern"] = STORABLE_TEXT_PATTERN
    for validator in field.validators:
        out.update(_constraint(validator, out.get("type")))
    return out


def _constraint(validator, json_type: str | None) -> dict:
    if isinstance(validator, validate.Length):
        prefix = {"string": "Length", "array": "Items", "object": "Properties"}.get(json_type)
        if prefix is None:
            return {}
        out = {}
        if validator.min is not None:
            out[f"min{prefix}"] = validator.min
        if validator.max is not None:
            out[f"max{prefix}"] = validator.max
        return out
    if isinstance(validator, validate.Range):
        out = {}
        if validator.min is not None:
            out["minimum"] = validator.min
        if validator.max is not None:
            out["maximum"] = validator.max
        return out
    if isinstance(validator, validate.Regexp):
        return {"pattern": validator.regex.pattern}
    if isinstance(validator, validate.OneOf):
        return {"enum": list(validator.choices)}
    if isinstance(validator, validate.Equal):
        return {"const": validator.comparable}
    return {}
