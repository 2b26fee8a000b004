"""The parts the OpenAPI document's operations are worded from (blueprints/api/openapi_operations.py
lists the operations): path and header parameters, the headers the server answers with, and
builders that word each part the same way everywhere: an answer's JSON body and headers, the
errors an operation can give (the one Error body), a request body, an SSE stream per event.
"""

from blueprints import schemas
from engine.lifecycle import idempotency

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


def answer(schema, description: str, *header_names: str) -> dict:
    """A JSON answer: its body's schema and the headers it carries."""
    return {
        "description": description,
        "headers": _headers(*header_names),
        "content": {"application/json": {"schema": schema}},
    }


def errors(*statuses: int) -> dict:
    """The error answers of an operation, the one Error body each."""
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
    answers = {str(s): answer("Error", words[s], "Idempotent-Replayed") for s in statuses}
    if 503 in statuses:
        answers["503"]["headers"]["Retry-After"] = {
            "description": "seconds to wait before trying again (every 503 says)",
            "schema": {"type": "integer", "minimum": 0},
        }
    return answers


def request_body(schema) -> dict:
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


def sse_answer(description: str, events: dict[str, dict]) -> dict:
    return {
        "description": description,
        "headers": _headers(),
        "content": {
            "text/event-stream": {
                "schema": {"oneOf": [_event(name, data) for name, data in events.items()]}
            }
        },
    }
