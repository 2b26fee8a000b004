"""The OpenAPI 3.1 document of /api/v1, generated from the schemas the API validates with.

Paths and methods come from the app's URL map, so a route cannot exist without its entry in
OPERATIONS (building the document fails instead); bodies and parameters come from the marshmallow
schemas in blueprints/schemas.py (requests) and blueprints/responses.py (responses). Served at
GET /api/v1/openapi.json, rendered for people at GET /api/docs with a vendored Redoc.
"""

import re
from functools import lru_cache

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from flask import Blueprint, current_app, jsonify, render_template_string, url_for
from marshmallow import fields, validate

from blueprints import responses, schemas
from blueprints.edge import CONTENT_SECURITY_POLICY
from engine.core.errors import DomainError
from engine.runners.kinds import KINDS

bp = Blueprint("openapi", __name__)

#: The site's policy plus what Redoc needs on this one page: its icon font is a data: URL. Its
#: attribution logo came from Redocly's CDN; the vendored copy shows an empty data: image instead
#: (static/vendor/README.md), so no page fetches anything from outside.
DOCS_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "img-src 'self' data:;", "img-src 'self' data:; font-src 'self' data:;"
)
#: Codes the API gives HTTP errors itself (blueprints/api.py http_error), idempotency's and
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

TASK_ID = {
    "in": "path",
    "name": "task_id",
    "required": True,
    "schema": {"type": "string", "format": "uuid"},
}
PROJECT_ID = {
    "in": "path",
    "name": "project_id",
    "required": True,
    "schema": {"type": "string", "pattern": schemas.PROJECT_ID.regex.pattern},
}
TOOL_NAME = {"in": "path", "name": "name", "required": True, "schema": {"type": "string"}}
KUBECONFIG = {
    "in": "header",
    "name": "X-Kubeconfig",
    "required": False,
    "schema": {"type": "string"},
    "description": "base64 kubeconfig; required where the server deploys to real "
    "clusters (kept in memory only)",
}
IDEMPOTENCY_KEY = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "schema": {"type": "string", "minLength": 1, "maxLength": 255, "pattern": r"^[\x21-\x7e]+$"},
    "description": "repeat the same request safely for 24 h: the first response "
    "is replayed with `Idempotent-Replayed: true`",
}


def _json(schema, description: str) -> dict:
    return {"description": description, "content": {"application/json": {"schema": schema}}}


def _errors(*statuses: int) -> dict:
    words = {
        400: "invalid request",
        401: "not signed in",
        403: "not allowed (operators only)",
        404: "not found",
        409: "conflict with the task's state",
        413: "body too large",
        415: "not JSON",
        422: "idempotency key reused",
        503: "shutting down",
    }
    return {str(s): _json("Error", words[s]) for s in statuses}


def _body(schema) -> dict:
    """A required JSON request body."""
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _sse(description: str) -> dict:
    return {
        "description": description,
        "content": {"text/event-stream": {"schema": {"type": "string"}}},
    }


SNAPSHOT_LINKS = {
    "GetTask": {"operationId": "getTask", "parameters": {"task_id": "$response.body#/id"}},
    "ListEvents": {"operationId": "listEvents", "parameters": {"task_id": "$response.body#/id"}},
    "CancelTask": {"operationId": "cancelTask", "parameters": {"task_id": "$response.body#/id"}},
}
#: A failed or cancelled task's redeploy: a new task naming it as its predecessor.
REDEPLOY_LINK = {
    "operationId": "createTask",
    "requestBody": {"predecessorTaskId": "$response.body#/id"},
}
WRITE_ERRORS = (400, 404, 409, 413, 415, 503)

#: endpoint -> (method -> operation). Every /api/v1 route must be here (spec() checks).
OPERATIONS = {
    "api.create_task": {
        "post": {
            "operationId": "createTask",
            "tags": ["tasks"],
            "summary": "Create a deployment task, or with predecessorTaskId a redeploy",
            "parameters": [IDEMPOTENCY_KEY, KUBECONFIG],
            "requestBody": _body(schemas.CreateTask),
            "responses": {
                "201": {
                    **_json("Task", "the task, already claimed and running"),
                    "links": SNAPSHOT_LINKS,
                },
                **_errors(*WRITE_ERRORS, 422),
            },
        }
    },
    "api.list_tasks": {
        "get": {
            "operationId": "listTasks",
            "tags": ["tasks"],
            "summary": "A page of tasks, newest first",
            "parameters": [{"in": "query", "schema": schemas.ListTasks}],
            "responses": {"200": _json("TaskPage", "a page"), **_errors(400)},
        }
    },
    "api.get_task": {
        "get": {
            "operationId": "getTask",
            "tags": ["tasks"],
            "summary": "One task; with waitFor=terminal, a long-poll until it ends or blocks",
            "parameters": [TASK_ID, {"in": "query", "schema": schemas.WaitForTask}],
            "responses": {
                "200": {
                    **_json("WaitedTask", "the snapshot"),
                    "links": {
                        "SubmitInputs": {
                            "operationId": "submitInputs",
                            "parameters": {"task_id": "$response.body#/id"},
                        },
                        "Redeploy": REDEPLOY_LINK,
                    },
                },
                **_errors(400, 404),
            },
        }
    },
    "api.list_events": {
        "get": {
            "operationId": "listEvents",
            "tags": ["tasks"],
            "summary": "A task's events, oldest first",
            "parameters": [TASK_ID, {"in": "query", "schema": schemas.ListEvents}],
            "responses": {"200": _json("EventPage", "a page"), **_errors(400, 404)},
        }
    },
    "api.submit_inputs": {
        "post": {
            "operationId": "submitInputs",
            "tags": ["tasks"],
            "summary": "Answer a blocked task's inputs; it resumes at once",
            "parameters": [TASK_ID, IDEMPOTENCY_KEY, KUBECONFIG],
            "requestBody": _body(schemas.SubmitInputs),
            "responses": {"200": _json("Task", "the resumed task"), **_errors(*WRITE_ERRORS, 422)},
        }
    },
    "api.cancel_task": {
        "post": {
            "operationId": "cancelTask",
            "tags": ["tasks"],
            "summary": "Cancel a task (a repeat is 200; a finished task 409 with its snapshot)",
            "parameters": [TASK_ID],
            "responses": {
                "200": {
                    **_json("Task", "the task"),
                    "links": {"Redeploy": REDEPLOY_LINK},
                },
                **_errors(404, 409),
            },
        }
    },
    "api.patch_canvas": {
        "patch": {
            "operationId": "patchCanvas",
            "tags": ["tasks"],
            "summary": "Save the task's placement on the canvas",
            "parameters": [TASK_ID],
            "requestBody": _body(schemas.CanvasPatch),
            "responses": {"200": _json("Task", "the task"), **_errors(400, 404, 413, 415)},
        }
    },
    "api.list_templates": {
        "get": {
            "operationId": "listTemplates",
            "tags": ["templates"],
            "summary": "The template catalog with each template's declared inputs",
            "responses": {"200": _json("TemplateList", "the catalog")},
        }
    },
    "tools.list_tools": {
        "get": {
            "operationId": "listTools",
            "tags": ["tools"],
            "summary": "The chat tools with their JSON Schema parameters",
            "responses": {"200": _json("ToolList", "the tools")},
        }
    },
    "tools.call_tool": {
        "post": {
            "operationId": "callTool",
            "tags": ["tools"],
            "summary": "Call a chat tool with its arguments as the body",
            "parameters": [TOOL_NAME, KUBECONFIG],
            "requestBody": _body({"type": "object"}),
            "responses": {
                "200": _json({"type": "object"}, "the tool's result"),
                "201": _json({"type": "object"}, "the created task"),
                **_errors(*WRITE_ERRORS, 422),
            },
        }
    },
    "streams.project_tasks_stream": {
        "get": {
            "operationId": "streamProjectTasks",
            "tags": ["streams"],
            "summary": "Server-sent events: the project's task projections, live",
            "parameters": [PROJECT_ID],
            "responses": {
                "200": _sse(
                    "`event: snapshot` (data: {items: [projection]}) first, then "
                    "`upsert` (a projection) and `remove` ({id}) per change; "
                    "comment keepalives every 15 s"
                ),
                **_errors(400),
            },
        }
    },
    "gateway_stream.gateway_stream": {
        "get": {
            "operationId": "streamTaskGateway",
            "tags": ["streams"],
            "summary": "Server-sent events: an AI task's model output, live",
            "parameters": [TASK_ID],
            "responses": {
                "200": _sse(
                    "`turn_started` ({turn, sessionId}), `delta` ({turn, offset, "
                    "text}) and `turn_done` ({turn, chars}) per model turn; "
                    "`end` when the task finishes"
                ),
                **_errors(404),
            },
        }
    },
    "auth.whoami": {
        "get": {
            "operationId": "whoAmI",
            "tags": ["meta"],
            "summary": "The caller's identity and the workspaces it may use",
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "required": ["user", "workspace"],
                        "properties": {
                            "user": {"type": "string"},
                            "display": {"type": ["string", "null"]},
                            "workspace": {"type": "string"},
                            "workspaces": {"type": "array", "items": {"type": "string"}},
                        },
                    },
                    "who is asking",
                )
            },
        }
    },
    "ops.admin_streaks": {
        "get": {
            "operationId": "listFailureStreaks",
            "tags": ["operators"],
            "summary": "What keeps failing right now (failure streaks), the longest-running first",
            "responses": {
                "200": _json(
                    {
                        "type": "object",
                        "required": ["items"],
                        "properties": {"items": {"type": "array", "items": {"type": "object"}}},
                    },
                    "the open streaks",
                ),
                **_errors(403),
            },
        }
    },
    "openapi.openapi_json": {
        "get": {
            "operationId": "getOpenApi",
            "tags": ["meta"],
            "summary": "This document",
            "responses": {"200": _json({"type": "object"}, "the OpenAPI document")},
        }
    },
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
        if isinstance(field, schemas.SourceField):
            out["oneOf"] = [self.schema2jsonschema(KINDS[name].schema) for name in sorted(KINDS)]
        if getattr(field, "json_schema", None):
            out.update(field.json_schema)
        for validator in field.validators:
            if isinstance(validator, validate.Equal):
                out["const"] = validator.comparable
        return out

    plugin.converter_extra = extras
    return plugin


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
    ):
        spec.components.schema(name, schema=getattr(responses, name))
    spec.components.schema("Error", schema=responses.Error)
    oidc = app.extensions["engine"].settings.auth_mode == "oidc"
    for rule in sorted(documented_rules(app), key=lambda r: r.rule):
        described = OPERATIONS[rule.endpoint]
        methods = {m.lower() for m in rule.methods} - {"head", "options"}
        operations = {m: dict(described[m]) for m in sorted(methods)}
        if oidc:
            for op in operations.values():
                op["security"] = [{"bearer": []}]
        spec.path(path=openapi_path(rule.rule), operations=operations)
    document = spec.to_dict()
    document["components"]["schemas"]["Error"]["properties"]["code"]["enum"] = error_codes()
    return document


@lru_cache(maxsize=8)
def _cached(app) -> dict:
    return build(app)


@bp.get("/api/v1/openapi.json")
def openapi_json():
    """The OpenAPI 3.1 document."""
    return jsonify(_cached(current_app._get_current_object()))


DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Deployment task engine API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{{ style }}"></head>
<body><div id="api-docs" data-spec-url="{{ spec }}"></div>
<script type="module" src="{{ start }}"></script></body></html>
"""


@bp.get("/api/docs")
def docs():
    """The document rendered for people (Redoc, served from static/vendor: no CDN)."""
    page = render_template_string(
        DOCS_PAGE,
        spec=url_for("openapi.openapi_json"),
        start=url_for("static", filename="api-docs.js"),
        style=url_for("static", filename="api-docs.css"),
    )
    return page, 200, {"Content-Security-Policy": DOCS_CONTENT_SECURITY_POLICY}
