"""The operations of the OpenAPI document (blueprints/api/openapi_document.py builds it): each
/api/v1 endpoint's operations and the links between them, worded from the parts in
blueprints/api/openapi_parts.py.

One entry per route: a route without its entry in OPERATIONS fails the document's build.
"""

from blueprints import schemas
from blueprints.api.openapi_parts import (
    APP_KEY,
    IDEMPOTENCY_KEY,
    KUBECONFIG,
    PROJECT_ID,
    TASK_ID,
    answer,
    errors,
    request_body,
    sse_answer,
)

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
            "requestBody": request_body(schemas.CreateTask),
            "responses": {
                "201": {
                    **answer(
                        "Task",
                        "the task, already claimed and running",
                        "Location",
                        "Idempotent-Replayed",
                    ),
                    "links": SNAPSHOT_LINKS,
                },
                **errors(*WRITE_ERRORS, 422),
            },
        }
    },
    "api.list_tasks": {
        "get": {
            "operationId": "listTasks",
            "tags": ["tasks"],
            "summary": "A page of tasks, newest first",
            "parameters": [{"in": "query", "schema": schemas.ListTasks}],
            "responses": {"200": answer("TaskPage", "a page"), **errors(400)},
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
                    **answer("WaitedTask", "the snapshot"),
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
                **errors(400, 404),
            },
        }
    },
    "api.list_events": {
        "get": {
            "operationId": "listEvents",
            "tags": ["tasks"],
            "summary": "A task's events, oldest first",
            "parameters": [TASK_ID, {"in": "query", "schema": schemas.ListEvents}],
            "responses": {"200": answer("EventPage", "a page"), **errors(400, 404)},
        }
    },
    "api.submit_inputs": {
        "post": {
            "operationId": "submitInputs",
            "tags": ["tasks"],
            "summary": "Answer a blocked task's inputs; it resumes at once",
            "parameters": [TASK_ID, IDEMPOTENCY_KEY, KUBECONFIG],
            "requestBody": request_body(schemas.SubmitInputs),
            "responses": {
                "200": answer("Task", "the resumed task", "Idempotent-Replayed"),
                **errors(*WRITE_ERRORS, 422),
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
                    **answer("Task", "the task"),
                    "links": {
                        "Redeploy": REDEPLOY_LINK,
                        "RedeployDeployment": {
                            "operationId": "redeployDeployment",
                            "requestBody": {"taskId": "$response.body#/id"},
                        },
                    },
                },
                **errors(404, 409),
            },
        }
    },
    "api.patch_canvas": {
        "patch": {
            "operationId": "patchCanvas",
            "tags": ["tasks"],
            "summary": "Save the task's placement on the canvas",
            "parameters": [TASK_ID],
            "requestBody": request_body(schemas.CanvasPatch),
            "responses": {"200": answer("Task", "the task"), **errors(400, 404, 413, 415)},
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
                    **answer(
                        "Task",
                        "the new task, claimed and running (or blocked on secrets)",
                        "Location",
                        "Idempotent-Replayed",
                    ),
                    "links": SNAPSHOT_LINKS,
                },
                **errors(400, 404, 409, 422, 503),
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
                    **answer("AppList", "the apps"),
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
                **errors(400),
            },
        }
    },
    "api.get_app": {
        "get": {
            "operationId": "getApp",
            "tags": ["apps"],
            "summary": "One app: current resources, endpoints, and its history newest first",
            "parameters": [PROJECT_ID, APP_KEY, {"in": "query", "schema": schemas.AppHistory}],
            "responses": {"200": answer("AppDetail", "the app"), **errors(400, 404)},
        }
    },
    "api.list_templates": {
        "get": {
            "operationId": "listTemplates",
            "tags": ["templates"],
            "summary": "The template catalog with each template's declared inputs",
            "responses": {"200": answer("TemplateList", "the catalog")},
        }
    },
    "tools.list_tools": {
        "get": {
            "operationId": "listTools",
            "tags": ["tools"],
            "summary": "The chat tools with their JSON Schema parameters",
            "responses": {"200": answer("ToolList", "the tools")},
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
                "200": sse_answer(
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
                **errors(400),
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
                "200": sse_answer(
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
                **errors(404),
            },
        }
    },
    "cluster_access_api.check_by_api": {
        "post": {
            "operationId": "checkClusterAccess",
            "tags": ["clusters"],
            "summary": "Check a kubeconfig before deploying (read-only): the cluster it names and "
            "what the credential may not do in the project's namespace",
            # Any text gets a verdict: judging the kubeconfig is what the check is for.
            "parameters": [
                {**KUBECONFIG, "schema": {"type": "string"}, "description": "the one to check"}
            ],
            "requestBody": {**request_body(schemas.AccessCheck), "required": False},
            "responses": {"200": answer("AccessVerdict", "the verdict"), **errors(400, 413, 415)},
        }
    },
    "auth.whoami": {
        "get": {
            "operationId": "whoAmI",
            "tags": ["meta"],
            "summary": "The caller's identity and the workspaces it may use",
            "responses": {
                "200": answer(
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
                "200": answer(
                    {
                        "type": "object",
                        "required": ["items"],
                        "properties": {"items": {"type": "array", "items": {"type": "object"}}},
                    },
                    "the open streaks",
                ),
                **errors(403),
            },
        }
    },
    "openapi.openapi_json": {
        "get": {
            "operationId": "getOpenApi",
            "tags": ["meta"],
            "summary": "This document",
            "responses": {"200": answer({"type": "object"}, "the OpenAPI document")},
        }
    },
}
