"""Marshmallow schemas for every request body. Unknown fields are rejected.

Every schema derives from RequestSchema, whose one rule refuses text PostgreSQL cannot store (a
NUL character, a lone surrogate) in any key or value, so a field added later cannot bring the
500 back (tests/unit/test_invariants.py checks the base class).
"""

from marshmallow import Schema, ValidationError, fields, pre_load, validate, validates_schema

from engine.core.status import Status
from engine.runners.database import ENGINES as DATABASE_ENGINES
from engine.trust.untrusted import unstorable_paths

#: A Kubernetes object name (DNS-1123 label).
NAME = validate.Regexp(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    error="must be lowercase letters, digits and '-', at most 63 characters",
)
PROJECT_ID = NAME
ENV_NAME = validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", error="not a valid variable name")
MAX_VALUE = 32_768


def _nest(path: tuple, message: str) -> dict:
    out: dict | list = [message]
    for part in reversed(path or ("_schema",)):
        out = {part: out}
    return out


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


class RequestSchema(Schema):
    """A request's fields; the storable-text rule holds for every string in it."""

    @pre_load
    def _storable_text(self, data, **kwargs):
        problems = unstorable_paths(data)
        if problems:
            messages: dict = {}
            for path, reason in problems.items():
                _merge(messages, _nest(path, reason))
            raise ValidationError(messages)
        return data


class ImageSource(RequestSchema):
    """A container image deployed as a Deployment (+ Service with a port)."""

    kind = fields.String(required=True, validate=validate.Equal("image"))
    image = fields.String(required=True, validate=validate.Length(1, 512))
    name = fields.String(required=True, validate=NAME)
    port = fields.Integer(validate=validate.Range(1, 65535), strict=True)
    replicas = fields.Integer(validate=validate.Range(0, 50), strict=True)
    env = fields.Dict(
        keys=fields.String(validate=ENV_NAME),
        values=fields.String(validate=validate.Length(max=MAX_VALUE)),
        validate=validate.Length(max=100),
    )


class ArgValue(fields.Field):
    """A template argument: a string, an integer or a boolean (its declaration types it)."""

    #: What the chat tools' JSON Schema says of it (blueprints/jsonschema.py).
    json_schema = {"type": ["string", "integer", "boolean"]}

    def _deserialize(self, value, attr, data, **kwargs):
        if isinstance(value, bool) or (isinstance(value, int) and abs(value) < 2**53):
            return value
        if isinstance(value, str) and len(value) <= MAX_VALUE:
            return value
        raise ValidationError("must be a string, an integer or a boolean")


class TemplateSource(RequestSchema):
    """An instance of a catalog template (GET /api/v1/templates lists them with their inputs)."""

    kind = fields.String(required=True, validate=validate.Equal("template"))
    template = fields.String(
        required=True,
        validate=validate.Regexp(r"^[a-z]([-a-z0-9]{0,28}[a-z0-9])?$", error="not a template name"),
    )
    args = fields.Dict(
        keys=fields.String(validate=ENV_NAME), values=ArgValue(), validate=validate.Length(max=100)
    )


class DatabaseSource(RequestSchema):
    """A database server: StatefulSet, headless Service, generated credentials in a Secret."""

    kind = fields.String(required=True, validate=validate.Equal("database"))
    engine = fields.String(required=True, validate=validate.OneOf(list(DATABASE_ENGINES)))
    # 52: a StatefulSet's pods carry a controller-revision-hash label of name + 11 characters.
    name = fields.String(required=True, validate=[NAME, validate.Length(max=52)])
    version = fields.String(
        validate=validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", error="not an image tag")
    )


class PromptSource(RequestSchema):
    """A free-text request, planned by the AI runner (devbox + gateway)."""

    kind = fields.String(required=True, validate=validate.Equal("prompt"))
    prompt = fields.String(
        required=True,
        validate=[validate.Length(1, 4000), validate.Regexp(r"\S", error="must not be blank")],
    )


class GitHubSource(RequestSchema):
    """A GitHub repository, cloned into a devbox and planned by the AI runner."""

    kind = fields.String(required=True, validate=validate.Equal("github"))
    repo = fields.String(
        required=True,
        validate=validate.Regexp(
            r"^[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}$",
            error="must be owner/name",
        ),
    )
    ref = fields.String(
        validate=validate.Regexp(
            r"^(?!-)(?!.*\.\.)(?!.*/$)[A-Za-z0-9._/-]{1,200}$", error="not a branch or tag name"
        )
    )


#: kind -> schema of that source kind
SOURCE_SCHEMAS: dict[str, type[Schema]] = {
    "image": ImageSource,
    "template": TemplateSource,
    "database": DatabaseSource,
    "prompt": PromptSource,
    "github": GitHubSource,
}


class SourceField(fields.Field):
    """A source object, validated by the schema of its `kind`."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise ValidationError("must be an object")
        kind = value.get("kind")
        schema = SOURCE_SCHEMAS.get(kind) if isinstance(kind, str) else None
        if schema is None:
            raise ValidationError(f"kind must be one of: {', '.join(sorted(SOURCE_SCHEMAS))}")
        return schema().load(value)


InputValues = fields.Dict(
    keys=fields.String(validate=validate.Length(1, 128)),
    values=fields.String(validate=validate.Length(max=MAX_VALUE)),
    validate=validate.Length(max=100),
)
SensitiveKeys = fields.List(
    fields.String(validate=validate.Length(1, 128)), validate=validate.Length(max=100)
)


class CreateTask(RequestSchema):
    """Create a deployment task; with predecessorTaskId, a redeploy of a failed or cancelled one."""

    projectId = fields.String(validate=PROJECT_ID)
    source = SourceField()
    inputs = InputValues
    sensitiveKeys = SensitiveKeys
    predecessorTaskId = fields.UUID()

    @validates_schema
    def _fresh_create_needs_target_and_source(self, data, **kwargs):
        if "predecessorTaskId" not in data:
            missing = {
                k: ["Missing data for required field."]
                for k in ("projectId", "source")
                if k not in data
            }
            if missing:
                raise ValidationError(missing)


class SubmitInputs(RequestSchema):
    """Answer a blocked task's inputs; it resumes at once."""

    inputs = fields.Dict(
        keys=fields.String(validate=validate.Length(1, 128)),
        values=fields.String(validate=validate.Length(max=MAX_VALUE)),
        required=True,
        validate=validate.Length(max=100),
    )
    sensitiveKeys = fields.List(
        fields.String(validate=validate.Length(1, 128)), validate=validate.Length(max=100)
    )


class CanvasPatch(RequestSchema):
    """Where a task's placeholder sits on the canvas."""

    x = fields.Float(required=True, validate=validate.Range(-100_000, 100_000))
    y = fields.Float(required=True, validate=validate.Range(-100_000, 100_000))


class ListTasks(RequestSchema):
    """Query parameters of the task list."""

    projectId = fields.String(validate=PROJECT_ID)
    status = fields.List(fields.String(validate=validate.OneOf([s.value for s in Status])))
    cursor = fields.String(validate=validate.Length(max=200))
    limit = fields.Integer(validate=validate.Range(1, 200), load_default=50)


class ListEvents(RequestSchema):
    after = fields.Integer(validate=validate.Range(0), load_default=0)
    limit = fields.Integer(validate=validate.Range(1, 1000), load_default=500)


class WaitForTask(RequestSchema):
    """Query parameters of a task read: with waitFor, a long-poll."""

    waitFor = fields.String(
        validate=validate.OneOf(["terminal"]),
        metadata={
            "description": "return once the task is terminal or blocked (waiting on a person)"
        },
    )
    timeout = fields.Integer(
        validate=validate.Range(0, 300),
        load_default=30,
        metadata={"description": "seconds to wait at most"},
    )
