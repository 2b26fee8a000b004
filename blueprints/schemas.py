"""Marshmallow schemas for every request body. Unknown fields are rejected.

Every schema derives from RequestSchema, whose one rule refuses text PostgreSQL cannot store (a
NUL character, a lone surrogate) in any key or value, so a field added later cannot bring the
500 back (tests/unit/test_invariants.py checks the base class). A source's schema is its kind's
(engine/runners/kinds.py).
"""

from marshmallow import ValidationError, fields, validate, validates_schema

from engine.core.status import Status
from engine.runners.kinds import KINDS, MAX_VALUE, NAME
from engine.trust.secrets import MIN_SECRET_CHARS
from engine.trust.untrusted import RequestSchema

#: A project id is a Kubernetes object name.
PROJECT_ID = NAME


class SourceField(fields.Field):
    """A source object, validated by the schema of its `kind` (engine/runners/kinds.py)."""

    def _deserialize(self, value, attr, data, **kwargs):
        if not isinstance(value, dict):
            raise ValidationError("must be an object")
        kind = value.get("kind")
        known = KINDS.get(kind) if isinstance(kind, str) else None
        if known is None:
            raise ValidationError(f"kind must be one of: {', '.join(sorted(KINDS))}")
        return known.schema.shared().load(value)


InputValues = fields.Dict(
    keys=fields.String(validate=validate.Length(1, 128)),
    values=fields.String(validate=validate.Length(max=MAX_VALUE)),
    validate=validate.Length(max=100),
)
#: What makes a value sensitive, and the one rule on it JSON Schema cannot state (it spans two
#: fields or a name's meaning): said in words in the document.
SENSITIVE_RULE = (
    "names of inputs (or source env/args entries) that are sensitive, besides those named like a "
    f"secret (password, token, api_key, ...); a sensitive value needs at least "
    f"{MIN_SECRET_CHARS} characters (a shorter one could not be scrubbed from logs): 400 otherwise"
)
SensitiveKeys = fields.List(
    fields.String(validate=validate.Length(1, 128)),
    validate=validate.Length(max=100),
    metadata={"description": SENSITIVE_RULE},
)


#: A page's cursor (the task list's and an app's history): what dto.encode_cursor writes, unpadded
#: URL-safe base64 (decode_cursor checks the rest).
Cursor = fields.String(validate=[validate.Length(1, 200), validate.Regexp(r"^[A-Za-z0-9_-]+$")])


class CreateTask(RequestSchema):
    """Create a deployment task; with predecessorTaskId, a redeploy of a failed or cancelled one."""

    projectId = fields.String(validate=PROJECT_ID)
    source = SourceField()
    inputs = InputValues
    sensitiveKeys = SensitiveKeys
    predecessorTaskId = fields.UUID()

    #: The rule below for the OpenAPI document: each way to create (a title) and what it requires.
    json_schema_variants = {"NewTask": ["projectId", "source"], "Redeploy": ["predecessorTaskId"]}

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


class AccessCheck(RequestSchema):
    """Check a kubeconfig against a project's namespace (the cluster access dialog's "Check")."""

    projectId = fields.String(
        validate=PROJECT_ID,
        allow_none=True,
        metadata={
            "description": "the project whose namespace is checked (absent or null: the "
            "namespace of the kubeconfig's context, else `default`)"
        },
    )


class SubmitInputs(RequestSchema):
    """Answer a blocked task's inputs; it resumes at once."""

    inputs = fields.Dict(
        keys=fields.String(validate=validate.Length(1, 128)),
        values=fields.String(validate=validate.Length(max=MAX_VALUE)),
        required=True,
        validate=validate.Length(max=100),
    )
    sensitiveKeys = SensitiveKeys


#: An app key (deploy_tasks.app_key): its kind, then the instance or object name.
APP_KEY = validate.Regexp(
    r"^(template|image|database):[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", error="not an app key"
)


class AppHistory(RequestSchema):
    """Query parameters of an app: a page of its deployment history."""

    cursor = Cursor
    limit = fields.Integer(validate=validate.Range(1, 200), load_default=20)


class CanvasPatch(RequestSchema):
    """Where a task's placeholder sits on the canvas."""

    x = fields.Float(required=True, validate=validate.Range(-100_000, 100_000))
    y = fields.Float(required=True, validate=validate.Range(-100_000, 100_000))


class ListTasks(RequestSchema):
    """Query parameters of the task list."""

    projectId = fields.String(validate=PROJECT_ID)
    status = fields.List(fields.String(validate=validate.OneOf([s.value for s in Status])))
    cursor = Cursor
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
