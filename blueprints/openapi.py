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
from marshmallow import fields, validate

from blueprints import responses, schemas, toolbox
from blueprints.jsonschema import schema_of
from engine.core.errors import DomainError
from engine.lifecycle import idempotency
from engine.runners.kinds import KINDS
from engine.trust.untrusted import STORABLE_TEXT_PATTERN

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
APP_KEY = {
    "in": "path",
    "name": "app_key",
    "required": True,
    "schema": {"type": "string", "pattern": schemas.APP_KEY.regex.pattern},
    "description": "the app: `template:<instance>`, `image:<name>` or `database:<name>`",
}
TOOL_NAME = {"in": "path", "name": "name", "required": True, "schema": {"type": "string"}}
KUBECONFIG = {
    "in": "header",
    "name": "X-Kubeconfig",
    "required": False,
    # What request_helpers.kubeconfig_from_header accepts: strict base64 (then YAML).
    "schema": {"type": "string", "minLength": 1, "pattern": r"^[A-Za-z0-9+/]+={0,2}$"},
    "description": "base64 kubeconfig; required where the server deploys to real "
    "clusters (kept in memory only)",
}
IDEMPOTENCY_KEY = {
    "in": "header",
    "name": "Idempotency-Key",
    "required": False,
    "schema": {"type": "string", "pattern": idempotency.KEY.pattern, "maxLength": 255},
    "description": "repeat the same request safely for 24 h: the first response "
    "is replayed with `Idempotent-Replayed: true`",
}


#: Response headers the server sends (components.headers), by name.
HEADERS = {
    "X-Served-By": {
        "description": "which server process answered (every response)",
        "required": True,
        "schema": {"type": "string"},
    },
    "Idempotent-Replayed": {
        "description": "`true` when this is the stored answer to an earlier request with the "
        "same Idempotency-Key",
        "schema": {"type": "string", "enum": ["true"]},
    },
    "Location": {
        "description": "the created task's URL",
        "schema": {"type": "string", "format": "uri-reference"},
    },
}


def _headers(*names: str) -> dict:
    return {n: {"$ref": f"#/components/headers/{n}"} for n in ("X-Served-By", *names)}


def _json(schema, description: str, *headers: str) -> dict:
    return {
        "description": description,
        "headers": _headers(*headers),
        "content": {"application/json": {"schema": schema}},
    }


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
        503: "shutting down (`shutting_down`: retry on another server), or this server already "
        "runs as many deployments as it can (`overloaded`: retry after `Retry-After` seconds; "
        "nothing was written)",
    }
    answers = {str(s): _json("Error", words[s], "Idempotent-Replayed") for s in statuses}
    if 503 in statuses:
        answers["503"]["headers"]["Retry-After"] = {
            "description": "seconds to wait before trying again (every 503 says)",
            "schema": {"type": "integer", "minimum": 0},
        }
    return answers


def _body(schema) -> dict:
    """A required JSON request body."""
    return {"required": True, "content": {"application/json": {"schema": schema}}}


def _event(name: str, data: dict) -> dict:
    """One server-sent event: its name and its JSON data (OpenAPI 3.1: `schema` of an event
    stream describes each event)."""
    return {
        "type": "object",
        "required": ["event", "data"],
        "properties": {
            "event": {"const": name},
            "data": {
                "type": "string",
                "contentMediaType": "application/json",
                "contentSchema": data,
            },
            "id": {"type": "string"},
            "retry": {"type": "integer"},
        },
    }


def _sse(description: str, events: dict[str, dict]) -> dict:
    return {
        "description": description,
        "headers": _headers(),
        "content": {
            "text/event-stream": {
                "schema": {"oneOf": [_event(name, data) for name, data in events.items()]}
            }
        },
    }


PROJECTION = {"type": "object", "required": ["id"], "properties": {"id": {"type": "string"}}}


SNAPSHOT_LINKS = {
    "GetTask": {"operationId": "getTask", "parameters": {"task_id": "$response.body#/id"}},
    "ListEvents": {"operationId": "listEvents", "parameters": {"task_id": "$response.body#/id"}},
    "CancelTask": {"operationId": "cancelTask", "parameters": {"task_id": "$response.body#/id"}},
    # The apps of the task's project, this task's app among them.
    "ListApps": {
        "operationId": "listApps",
        "parameters": {"project_id": "$response.body#/projectId"},
    },
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
                    **_json(
                        "Task",
                        "the task, already claimed and running",
                        "Location",
                        "Idempotent-Replayed",
                    ),
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
                        "Rollback": {
                            "operationId": "rollbackTask",
                            "parameters": {"task_id": "$response.body#/id"},
                        },
                        # The same source again into the same project, through the tool.
                        "DeployAgain": {
                            "operationId": "createDeployment",
                            "requestBody": {
                                "projectId": "$response.body#/projectId",
                                "source": "$response.body#/source",
                            },
                        },
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
            "responses": {
                "200": _json("Task", "the resumed task", "Idempotent-Replayed"),
                **_errors(*WRITE_ERRORS, 422),
            },
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
                    "links": {
                        "Redeploy": REDEPLOY_LINK,
                        "RedeployDeployment": {
                            "operationId": "redeployDeployment",
                            "requestBody": {"taskId": "$response.body#/id"},
                        },
                    },
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
    "api.rollback_task": {
        "post": {
            "operationId": "rollbackTask",
            "tags": ["apps"],
            "summary": "Roll the task's app back to this completed task's plan (a new task); "
            "409 when it did not complete or the app has an active deployment",
            "parameters": [TASK_ID, IDEMPOTENCY_KEY, KUBECONFIG],
            "responses": {
                "201": {
                    **_json("Task", "the new task, claimed and running (or blocked on secrets)"),
                    "links": SNAPSHOT_LINKS,
                },
                **_errors(400, 404, 409, 422, 503),
            },
        }
    },
    "api.list_apps": {
        "get": {
            "operationId": "listApps",
            "tags": ["apps"],
            "summary": "The project's apps: deployments converging on the same resources",
            "parameters": [PROJECT_ID],
            "responses": {
                "200": {
                    **_json("AppList", "the apps"),
                    "links": {
                        "GetApp": {
                            "operationId": "getApp",
                            "parameters": {
                                "project_id": "$request.path.project_id",
                                "app_key": "$response.body#/items/0/key",
                            },
                        }
                    },
                },
                **_errors(400),
            },
        }
    },
    "api.get_app": {
        "get": {
            "operationId": "getApp",
            "tags": ["apps"],
            "summary": "One app: current resources, endpoints, and its history newest first",
            "parameters": [PROJECT_ID, APP_KEY, {"in": "query", "schema": schemas.AppHistory}],
            "responses": {"200": _json("AppDetail", "the app"), **_errors(400, 404)},
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
    # Documented once per tool (tool_operations): each has its own body and answer.
    "tools.call_tool": {},
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
                    "comment keepalives every 15 s",
                    {
                        "snapshot": {
                            "type": "object",
                            "required": ["items"],
                            "properties": {"items": {"type": "array", "items": PROJECTION}},
                        },
                        "upsert": PROJECTION,
                        "remove": PROJECTION,
                    },
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
                    "`end` when the task finishes",
                    {
                        "turn_started": {"type": "object", "required": ["turn"]},
                        "delta": {"type": "object", "required": ["turn", "text"]},
                        "turn_done": {"type": "object", "required": ["turn"]},
                        "end": {
                            "type": "object",
                            "required": ["status"],
                            "properties": {"status": {"type": ["string", "null"]}},
                        },
                    },
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


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(word.title() for word in rest)


def tool_operations() -> dict[str, dict]:
    """POST /api/v1/tools/<name> for each tool: its arguments as the body (the JSON Schema the
    server validates with), its answer as the response, its links as the task's."""
    paths = {}
    for tool in toolbox.TOOLS.values():
        status = "201" if tool.starts_task else "200"
        answer = {**_json(tool.output, "the tool's result"), **_tool_links(tool)}
        paths[f"/api/v1/tools/{tool.name}"] = {
            "post": {
                "operationId": _camel(tool.name),
                "tags": ["tools"],
                "summary": tool.description.split(". ")[0].rstrip("."),
                "description": tool.description,
                "parameters": [KUBECONFIG] if tool.annotations.get("openWorldHint") else [],
                "requestBody": _body(schema_of(tool.arguments)),
                "responses": {status: answer, **_errors(*WRITE_ERRORS, 422)},
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
    ):
        spec.components.schema(name, schema=getattr(responses, name))
    spec.components.schema("Error", schema=responses.Error)
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
