"""The methods the MCP endpoint answers (blueprints/mcp/transport.py carries them): ping and the
tools (tools/list, tools/call) in both eras; server/discover and the Tasks extension's tasks/get
and tasks/cancel in the stateless one. The tools are the JSON API's
(blueprints/api/tool_catalog.py), their output schemas the OpenAPI document's components."""

import uuid

from flask import current_app

from blueprints.api import openapi_document, tool_catalog
from blueprints.api.tool_schemas import schema_of
from blueprints.auth.gate import current_identity
from blueprints.mcp import tasks_extension
from blueprints.mcp.protocol import (
    INSTRUCTIONS,
    INVALID_PARAMS,
    METHOD_NOT_FOUND,
    STATELESS_VERSIONS,
    RpcError,
)
from blueprints.request_helpers import runtime
from engine.errors import DomainError
from engine.lifecycle import actions


def dispatch(method: str, params: dict, capabilities: dict | None) -> dict:
    """The result of `method`; `capabilities` are a stateless request's (None in a session)."""
    if method == "ping":
        return {}
    if method == "tools/list":
        return {"tools": [_definition(t) for t in tool_catalog.TOOLS.values()]}
    if method == "tools/call":
        return _call_tool(params, capabilities)
    if capabilities is not None:
        if method == "server/discover":
            return _discover()
        if method == "tasks/get":
            return tasks_extension.task_state(_task_row(params))
        if method == "tasks/cancel":
            row = _task_row(params)
            try:
                actions.cancel_task(runtime(), current_identity(), row["id"])
            except DomainError:
                pass  # already finished: its state says how
            return {}
    raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")


def _definition(tool: tool_catalog.Tool) -> dict:
    """A tool as tools/list shows it: input and output schemas, and its annotations."""
    components = openapi_document.cached_document(current_app._get_current_object())["components"]
    definition = {
        "name": tool.name,
        "description": tool.description,
        "inputSchema": schema_of(tool.arguments),
        "outputSchema": _inlined(components["schemas"][tool.output], components["schemas"]),
        "annotations": tool.annotations,
    }
    if tool.starts_task:
        definition["execution"] = {"taskSupport": "optional"}
    return definition


def _inlined(schema, schemas: dict):
    """`schema` with each `#/components/schemas/X` reference replaced by X: a tool's output
    schema stands alone."""
    if isinstance(schema, list):
        return [_inlined(item, schemas) for item in schema]
    if not isinstance(schema, dict):
        return schema
    ref = schema.get("$ref", "")
    if ref.startswith("#/components/schemas/"):
        return _inlined(schemas[ref.rsplit("/", 1)[1]], schemas)
    return {key: _inlined(value, schemas) for key, value in schema.items()}


def _call_tool(params: dict, capabilities: dict | None) -> dict:
    name = params.get("name")
    tool = tool_catalog.TOOLS.get(name) if isinstance(name, str) else None
    if tool is None:
        raise RpcError(INVALID_PARAMS, f"unknown tool: {name!r}"[:200])
    body, status, _ = tool_catalog.invoke(tool, params.get("arguments") or {})
    if status < 400 and tool.starts_task and tasks_extension.speaks_tasks(capabilities):
        return tasks_extension.task_state(_task_row({"taskId": body["id"]}))
    return tasks_extension.tool_result(body, is_error=status >= 400)


def _task_row(params: dict) -> dict:
    try:
        task_id = uuid.UUID(str(params.get("taskId")))
        return actions.get_task(runtime(), current_identity(), task_id)
    except (ValueError, DomainError):
        raise RpcError(INVALID_PARAMS, "unknown taskId") from None


def _discover() -> dict:
    return {
        "supportedVersions": list(STATELESS_VERSIONS),
        "capabilities": {
            "tools": {"listChanged": False},
            "extensions": {tasks_extension.TASKS_EXTENSION: {}},
        },
        "instructions": INSTRUCTIONS,
    }
