"""MCP's Tasks extension (io.modelcontextprotocol/tasks, revision 2026-07-28): a deployment task
is the protocol's task, its id the task's id, so any process answers for it. And the one shape of
a tool's result, which a finished task carries too. blueprints/mcp/ speaks the protocol."""

import json

from engine.core.status import Status
from engine.readside import dto

TASKS_EXTENSION = "io.modelcontextprotocol/tasks"
#: How often an assistant following a deployment task should poll (tasks/get), and how long the
#: task stays readable after it ends (the purge, 30 days).
POLL_INTERVAL_MS = 2000
TASK_TTL_MS = 30 * 24 * 3600 * 1000

#: Our status -> the Tasks extension's.
TASK_STATUS = {
    Status.QUEUED: "working",
    Status.RUNNING: "working",
    Status.APPLYING: "working",
    Status.BLOCKED: "input_required",
    Status.COMPLETED: "completed",
    Status.FAILED: "failed",
    Status.CANCELLED: "cancelled",
}


def speaks_tasks(capabilities: dict | None) -> bool:
    extensions = (capabilities or {}).get("extensions")
    return isinstance(extensions, dict) and TASKS_EXTENSION in extensions


def task_state(row: dict) -> dict:
    """The extension's task (resultType "task") for a deployment task; once it ended, with the
    result the tool gives without the extension (the task's snapshot)."""
    snapshot = dto.snapshot(row)
    status = TASK_STATUS[Status(row["status"])]
    state = {
        "resultType": "task",
        "taskId": snapshot["id"],
        "status": status,
        "statusMessage": status_message(snapshot),
        "createdAt": snapshot["createdAt"],
        "lastUpdatedAt": snapshot["updatedAt"],
        "ttl": TASK_TTL_MS,
        "pollInterval": POLL_INTERVAL_MS,
    }
    if status in ("completed", "failed", "cancelled"):
        state["result"] = tool_result(snapshot, is_error=False)
    return state


def status_message(snapshot: dict) -> str:
    if snapshot["status"] == Status.BLOCKED:
        names = ", ".join(i["name"] for i in snapshot["pendingInputs"] or [])
        return f"waiting for inputs ({names}): answer with submit_deployment_inputs"
    if snapshot["status"] == Status.FAILED:
        return (snapshot["failure"] or {}).get("message") or "failed"
    return f"deployment {snapshot['status']}"


def tool_result(body: dict, *, is_error: bool) -> dict:
    """A CallToolResult; an error one is for the model to read and correct its call."""
    text = json.dumps(body)
    if is_error:
        text = f"{body['code']}: {body['message']}\n{text}"
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": body,
        "isError": is_error,
    }
