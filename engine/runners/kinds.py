"""The source kinds, each defined once: its request schema, runner, steps and words.

Every surface reads this registry: the API's source schemas (blueprints/schemas.py), the deploy
panes and their tabs (blueprints/forms.py), the runner a task gets (engine/runners), the step
count a timeline shows (each runner module declares its STEPS), and the summaries of the dock and
the explain tool. Adding a kind is one entry here, beside the runner that runs it.

The schemas validate what a runner will read from a task's persisted source; unknown fields are
rejected, and every schema carries the storable-text rule (RequestSchema).
"""

from collections.abc import Callable
from dataclasses import dataclass

from marshmallow import Schema, ValidationError, fields, validate

from engine.runners import ai, database, direct, template
from engine.runners.context import RunContext, TaskHandle
from engine.trust.untrusted import STORABLE_TEXT_PATTERN, RequestSchema, WholeNumber, whole

#: A Kubernetes object name (DNS-1123 label).
NAME = validate.Regexp(
    r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
    error="must be lowercase letters, digits and '-', at most 63 characters",
)
ENV_NAME = validate.Regexp(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$", error="not a valid variable name")
MAX_VALUE = 32_768


@dataclass(frozen=True)
class SourceKind:
    """One kind of source: what a request must hold, who runs it, how it reads."""

    name: str
    #: The kind in words (the deploy pane's tab and heading).
    title: str
    schema: type[Schema]
    #: The runner's name (recorded on the task) and its run function.
    runner: str
    run: Callable[[TaskHandle, RunContext], None]
    #: The steps a run goes through, as its runner module declares them.
    steps: tuple[str, ...]
    #: Which deployment this is, in a few words (the dock's chip).
    summary: Callable[[dict], str]
    #: What is being deployed, as a sentence's start (the explain tool).
    describe: Callable[[dict], str]
    #: The source field naming the catalog template this kind instantiates (None: none). Its
    #: args and inputs are that template's declared inputs: checked before a task exists, its
    #: declared secrets stripped by name, the pane's fields; a result identity names it too.
    template_field: str | None = None
    #: Source fields an edit & redeploy never prefills.
    no_prefill: frozenset[str] = frozenset()
    #: Redeployed in one click only: no pane to edit it (seed 000, US10 amendment).
    one_click: bool = False
    #: The run streams a model's text (the timeline's log shows it live).
    streamed: bool = False

    @property
    def fields_from_catalog(self) -> bool:
        """The pane's fields are the chosen catalog template's inputs, not the schema's fields."""
        return self.template_field is not None


# -- template ------------------------------------------------------------------------------------
class ArgValue(fields.Field):
    """A template argument: a string, an integer or a boolean (its declaration types it)."""

    #: What the documents (OpenAPI, the chat tools' JSON Schema) say of it: each bound applies to
    #: its own type. An integer stays exact in every JSON reader (a double's 53 bits).
    json_schema = {
        "type": ["string", "integer", "boolean"],
        "minimum": -(2**53 - 1),
        "maximum": 2**53 - 1,
        "maxLength": MAX_VALUE,
        "pattern": STORABLE_TEXT_PATTERN,
    }

    def _deserialize(self, value, attr, data, **kwargs):
        value = whole(value)
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


#: The result identity a template deployment is known by: its instance name (`webapp-3f2a`).
TEMPLATE_INSTANCE = template.INSTANCE_NAME

TEMPLATE = SourceKind(
    name="template",
    title="Template",
    schema=TemplateSource,
    runner="template",
    run=template.run,
    steps=template.STEPS,
    summary=lambda source: f"template {source.get('template') or ''}".strip(),
    describe=lambda source: f"Deploying template {source.get('template')}",
    template_field="template",
)


# -- image ---------------------------------------------------------------------------------------
class ImageSource(RequestSchema):
    """A container image deployed as a Deployment (+ Service with a port)."""

    kind = fields.String(required=True, validate=validate.Equal("image"))
    image = fields.String(required=True, validate=validate.Length(1, 512))
    name = fields.String(required=True, validate=NAME)
    port = WholeNumber(validate=validate.Range(1, 65535), strict=True)
    replicas = WholeNumber(validate=validate.Range(0, 50), strict=True)
    env = fields.Dict(
        keys=fields.String(validate=ENV_NAME),
        values=fields.String(validate=validate.Length(max=MAX_VALUE)),
        validate=validate.Length(max=100),
    )


IMAGE = SourceKind(
    name="image",
    title="Container image",
    schema=ImageSource,
    runner="direct",
    run=direct.run,
    steps=direct.STEPS,
    summary=lambda source: str(source.get("image") or ""),
    describe=lambda source: f"Deploying image {source.get('image')} as {source.get('name')}",
)


# -- database ------------------------------------------------------------------------------------
class DatabaseSource(RequestSchema):
    """A database server: StatefulSet, headless Service, generated credentials in a Secret."""

    kind = fields.String(required=True, validate=validate.Equal("database"))
    engine = fields.String(required=True, validate=validate.OneOf(list(database.ENGINES)))
    # 52: a StatefulSet's pods carry a controller-revision-hash label of name + 11 characters.
    name = fields.String(required=True, validate=[NAME, validate.Length(max=52)])
    version = fields.String(
        validate=validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", error="not an image tag")
    )


DATABASE = SourceKind(
    name="database",
    title="Database",
    schema=DatabaseSource,
    runner="direct",
    run=database.run,
    steps=database.STEPS,
    summary=lambda source: " ".join(
        str(part) for part in (source.get("engine"), source.get("version")) if part
    ),
    describe=lambda source: (
        f"Deploying a {source.get('engine')} database named {source.get('name')}"
    ),
)


# -- github --------------------------------------------------------------------------------------
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


def _repository(source: dict) -> str:
    ref = source.get("ref")
    return f"{source.get('repo') or ''}{'@' + ref if ref else ''}"


GITHUB = SourceKind(
    name="github",
    title="GitHub repository",
    schema=GitHubSource,
    runner="ai",
    run=ai.run,
    steps=ai.GITHUB_STEPS,
    summary=_repository,
    describe=lambda source: f"Deploying GitHub repository {source.get('repo')}",
    no_prefill=frozenset({"repo"}),  # the repository is picked again
    streamed=True,
)


# -- prompt --------------------------------------------------------------------------------------
#: Some character that is not whitespace, anywhere, and no NUL character (the storable-text rule
#: of RequestSchema, which the documents can only state in a field's one pattern). Python counts
#: \x1c-\x1f as whitespace and JSON Schema's regex dialect does not: naming them keeps the
#: document's reading the server's.
NOT_BLANK = r"^[\s\x1c-\x1f]*[^\s\x1c-\x1f\x00][^\x00]*$"


class PromptSource(RequestSchema):
    """A free-text request, planned by the AI runner (devbox + gateway)."""

    kind = fields.String(required=True, validate=validate.Equal("prompt"))
    prompt = fields.String(
        required=True,
        validate=[
            validate.Length(1, 4000),
            validate.Regexp(NOT_BLANK, error="must not be blank"),
        ],
    )


PROMPT = SourceKind(
    name="prompt",
    title="Prompt",
    schema=PromptSource,
    runner="ai",
    run=ai.run,
    steps=ai.PROMPT_STEPS,
    summary=lambda source: "prompt",
    describe=lambda source: f'Deploying from the prompt "{(source.get("prompt") or "")[:80]}"',
    one_click=True,
    streamed=True,
)


#: Every source kind by name, in the deploy panes' order.
KINDS: dict[str, SourceKind] = {k.name: k for k in (TEMPLATE, IMAGE, DATABASE, GITHUB, PROMPT)}


def template_of(source: dict) -> str | None:
    """The catalog template a source instantiates (by its kind's template_field), else None."""
    kind = KINDS.get(source.get("kind"))
    if kind is None or kind.template_field is None:
        return None
    return source.get(kind.template_field)
