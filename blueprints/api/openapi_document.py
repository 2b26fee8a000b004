"""The OpenAPI 3.1 document of /api/v1, generated from the schemas the API validates with.

Paths and methods come from the app's URL map, so a route cannot exist without its entry in
OPERATIONS (blueprints/api/openapi_operations.py; building the document fails instead); bodies
and parameters come from the marshmallow schemas in blueprints/schemas.py (requests) and
blueprints/api/openapi_responses.py (responses). Served at GET /api/v1/openapi.json, rendered
for people at GET /api/docs with a vendored Redoc (blueprints/api/openapi_routes.py).
"""

import re
from functools import lru_cache

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import fields, validate

from blueprints import schemas
from blueprints.api import openapi_responses, tool_catalog
from blueprints.api.openapi_operations import OPERATIONS, WRITE_ERRORS
from blueprints.api.openapi_parts import HEADERS, KUBECONFIG, answer, errors, request_body
from blueprints.api.tool_schemas import schema_of
from engine.errors import DomainError
from engine.runners.kinds import KINDS
from engine.trust.untrusted import STORABLE_TEXT_PATTERN

#: Codes the API gives HTTP errors itself (blueprints/errors.py http_error), idempotency's and
#: the auth gate's.
EXTRA_CODES = [
    "not_found",
    "method_not_allowed",
    "body_too_large",
    "unsupported_media_type",
    "http_error",
    "idempotency_key_reused",
    "idempotency_key_in_flight",
    "unauthenticated",
    "workspace_not_allowed",
]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def tool_operations() -> dict[str, dict]:
    """POST /api/v1/tools/<name> for each tool: its arguments as the body (the JSON Schema the
    server validates with), its answer as the response, its links as the task's."""
    paths = {}
    for tool in tool_catalog.TOOLS.values():
        status = "201" if tool.starts_task else "200"
        result = {**answer(tool.output, "the tool's result"), **_tool_links(tool)}
        paths[f"/api/v1/tools/{tool.name}"] = {
            "post": {
                "operationId": _camel(tool.name),
                "tags": ["tools"],
                "summary": tool.description.split(". ")[0].rstrip("."),
                "description": tool.description,
                "parameters": [KUBECONFIG] if tool.annotations.get("openWorldHint") else [],
                "requestBody": request_body(schema_of(tool.arguments)),
                "responses": {status: result, **errors(*WRITE_ERRORS, 422)},
            }
        }
    return paths


def _tool_links(tool) -> dict:
    if tool.output != "Task":
        return {}
    return {
        "links": {
            "GetTask": {"operationId": "getTask", "parameters": {"task_id": "$response.body#/id"}},
            "WaitForDeployment": {
                "operationId": "waitForDeployment",
                "requestBody": {"taskId": "$response.body#/id", "timeoutSeconds": 1},
            },
            "ExplainDeployment": {
                "operationId": "explainDeployment",
                "requestBody": {"taskId": "$response.body#/id"},
            },
            "CancelDeployment": {
                "operationId": "cancelDeployment",
                "requestBody": {"taskId": "$response.body#/id"},
            },
            **(
                {
                    # A new task that blocks asks for inputs; one that does not answers 409.
                    "SubmitDeploymentInputs": {
                        "operationId": "submitDeploymentInputs",
                        "requestBody": {"taskId": "$response.body#/id", "inputs": {}},
                    }
                }
                if tool.starts_task
                else {}
            ),
        }
    }


def error_codes() -> list[str]:
    """Every stable error code the API can answer with."""
    codes, pending = set(EXTRA_CODES), [DomainError]
    while pending:
        cls = pending.pop()
        codes.add(cls.code)
        pending.extend(cls.__subclasses__())
    codes.discard(DomainError.code)
    return sorted(codes)


def _marshmallow_plugin() -> MarshmallowPlugin:
    plugin = MarshmallowPlugin(schema_name_resolver=lambda schema: None)

    def extras(self, field, ret, **kwargs):
        out = {}
        if isinstance(field, fields.Dict):
            # apispec words a Length on a dict as a string length; it bounds the entries.
            for word, bound in (("minLength", "minProperties"), ("maxLength", "maxProperties")):
                if word in ret:
                    out[bound] = ret.pop(word)
            if field.key_field is not None and field.key_field.validators:
                out["propertyNames"] = self.field2property(field.key_field)
        if (
            isinstance(field, fields.String)
            and not isinstance(field, fields.UUID)
            and not any(isinstance(v, validate.Regexp) for v in field.validators)
            and "enum" not in ret
        ):
            out["pattern"] = STORABLE_TEXT_PATTERN  # the storable-text rule of RequestSchema
        if isinstance(field, schemas.SourceField):
            out["oneOf"] = [
                {"title": KINDS[name].title, **self.schema2jsonschema(KINDS[name].schema)}
                for name in sorted(KINDS)
            ]
        if getattr(field, "json_schema", None):
            out.update(field.json_schema)
        for validator in field.validators:
            if isinstance(validator, validate.Equal):
                out["const"] = validator.comparable
        return out

    plugin.converter_extra = extras
    return plugin


def _conditional_requirements(documented: dict, described: dict) -> None:
    """A request schema's requirements that depend on other fields (its `json_schema_variants`),
    which apispec cannot read from a marshmallow validator: the body becomes `anyOf` whole object
    schemas, one per variant, each titled and with its own `required`. (An `anyOf` of bare
    `required` lists beside the properties says the same in JSON Schema, but a generated client
    reads such a body as untyped: openapi-python-client makes it `Any` and drops every field.)"""
    body = described.get("requestBody", {}).get("content", {}).get("application/json", {})
    variants = getattr(body.get("schema"), "json_schema_variants", None)
    if variants:
        content = documented["requestBody"]["content"]["application/json"]
        whole = content["schema"]
        content["schema"] = {
            "anyOf": [
                {**whole, "title": title, "required": sorted({*whole.get("required", ()), *needs})}
                for title, needs in variants.items()
            ]
        }


def openapi_path(rule: str) -> str:
    """/api/v1/tasks/<uuid:task_id> -> /api/v1/tasks/{task_id}"""
    return re.sub(r"<(?:[^:>]+:)?([^>]+)>", r"{\1}", rule)


def documented_rules(app) -> list:
    """Every URL rule the document must describe: all of /api/v1."""
    return [r for r in app.url_map.iter_rules() if r.rule.startswith("/api/v1")]


def build(app) -> dict:
    """The document for `app`; KeyError naming a route that has no entry in OPERATIONS."""
    plugin = _marshmallow_plugin()
    spec = APISpec(
        title="Deployment task engine API",
        version="v1",
        openapi_version="3.1.0",
        plugins=[plugin],
        info={"description": __doc__.split("\n")[0]},
    )
    plugin.converter.add_attribute_function(plugin.converter_extra)
    spec.components.security_scheme(
        "bearer", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    )
    for name in (
        "Task",
        "WaitedTask",
        "TaskPage",
        "Event",
        "EventPage",
        "TemplateList",
        "ToolList",
        "App",
        "AppList",
        "HistoryEntry",
        "AppDetail",
        "WaitOutcome",
        "Explanation",
        "AccessVerdict",
    ):
        spec.components.schema(name, schema=getattr(openapi_responses, name))
    spec.components.schema("Error", schema=openapi_responses.Error)
    for name, header in HEADERS.items():
        spec.components.header(name, header)
    oidc = app.extensions["engine"].settings.auth_mode == "oidc"
    for path, operations in tool_operations().items():
        if oidc:
            operations["post"]["security"] = [{"bearer": []}]
        spec.path(path=path, operations=operations)
    for rule in sorted(documented_rules(app), key=lambda r: r.rule):
        described = OPERATIONS[rule.endpoint]
        if not described:
            continue
        methods = {m.lower() for m in rule.methods} - {"head", "options"}
        operations = {m: dict(described[m]) for m in sorted(methods)}
        if oidc:
            for op in operations.values():
                op["security"] = [{"bearer": []}]
        spec.path(path=openapi_path(rule.rule), operations=operations)
    document = spec.to_dict()
    for rule in documented_rules(app):
        for method, operation in OPERATIONS[rule.endpoint].items():
            _conditional_requirements(document["paths"][openapi_path(rule.rule)][method], operation)
    document["components"]["schemas"]["Error"]["properties"]["code"]["enum"] = error_codes()
    return document


@lru_cache(maxsize=8)
def cached_document(app) -> dict:
    """The document of `app`, built once (the MCP tools' output schemas are its components)."""
    return build(app)
