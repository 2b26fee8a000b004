"""Drive the MCP endpoint with the official `mcp` SDK client (asyncio, so it runs in a process of
its own, not in the gevent-patched test process). Prints one JSON report for the test to check.

usage: python tests/e2e/mcp_client.py MODE URL [URL ...]

MODE is `auto` (the SDK's default: `server/discover`, the stateless 2026-07-28 revision) or
`legacy` (the `initialize` handshake, 2025-11-25). With several URLs (server processes) each
client opens on the first and the Tasks flow polls on the others, so nothing may depend on
which process answers.
"""

import asyncio
import contextlib
import json
import sys
from typing import Any, Literal

from mcp import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import CallToolResult, Request, RequestParams, Result

IMAGE = {"kind": "image", "image": "nginx:1.27", "name": "web", "port": 80}
#: The sandbox cluster never readies a manifest that mentions this: the task stays applying.
HANGING = {"kind": "image", "image": "nginx:sandbox-never-ready", "name": "stuck", "port": 80}
#: ... and refuses one that mentions this: the task fails.
FAILING = {"kind": "image", "image": "nginx:sandbox-apply-error", "name": "broken"}
TASKS = "io.modelcontextprotocol/tasks"


class TaskParams(RequestParams):
    taskId: str


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskParams


class CancelTask(Request[TaskParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskParams


class TaskState(Result):
    """A task handle (the Tasks extension, 2026-07-28)."""

    result_type: Literal["task"] = "task"
    taskId: str
    status: str
    statusMessage: str | None = None
    pollInterval: int | None = None
    result: dict[str, Any] | None = None


class AnyResult(Result):
    model_config = {"extra": "allow"}


class FollowTasks(ClientExtension):
    """The requester side of the Tasks extension: poll tasks/get (on another server process)
    until the task ends, recording each status seen."""

    identifier = TASKS

    def __init__(self, pollers):
        self.pollers, self.seen = pollers, []

    def claims(self):
        return [ResultClaim(result_type="task", model=TaskState, resolve=self.resolve)]

    async def resolve(self, handle: TaskState, ctx: ClaimContext) -> CallToolResult:
        self.seen.append({"handle": handle.status, "taskId": handle.taskId})
        state = handle
        for turn in range(600):
            if state.status in ("completed", "failed", "cancelled"):
                break
            poller = self.pollers[turn % len(self.pollers)]
            await asyncio.sleep(min(state.pollInterval or 1000, 200) / 1000)
            params = TaskParams(taskId=handle.taskId)
            state = await poller.session.send_request(GetTask(params=params), TaskState)
            self.seen.append({"polled": state.status})
        return CallToolResult.model_validate(state.result)


def result(call) -> dict:
    return {
        "isError": call.is_error,
        "structured": call.structured_content,
        "text": call.content[0].text if call.content else None,
    }


async def main(mode: str, urls: list[str]) -> dict:
    report = {}
    async with contextlib.AsyncExitStack() as stack:
        pollers = [
            await stack.enter_async_context(Client(url, mode=mode)) for url in urls[1:] or urls
        ]
        await run(mode, urls[0], pollers, report)
    return report


async def run(mode: str, url: str, pollers: list, report: dict) -> None:
    follow = FollowTasks(pollers)
    extensions = [follow] if mode == "auto" else []
    async with Client(url, mode=mode, extensions=extensions) as client:
        report["protocolVersion"] = client.protocol_version
        tools = await client.list_tools()
        report["tools"] = {
            t.name: {
                "input": t.input_schema,
                "output": t.output_schema,
                "annotations": t.annotations.model_dump(by_alias=True, exclude_none=True),
            }
            for t in tools.tools
        }

        created = await client.call_tool("create_deployment", {"projectId": "mcp", "source": IMAGE})
        report["created"] = result(created)
        report["taskFlow"] = list(follow.seen)
        task_id = created.structured_content["id"]
        report["waited"] = result(
            await client.call_tool("wait_for_deployment", {"taskId": task_id, "timeoutSeconds": 60})
        )

        hanging = await pollers[0].call_tool(
            "create_deployment", {"projectId": "mcp", "source": HANGING}
        )
        hanging_id = hanging.structured_content["id"]
        report["hangingCreatedOnAnotherProcess"] = result(hanging)
        report["hangingWait"] = result(
            await client.call_tool(
                "wait_for_deployment", {"taskId": hanging_id, "timeoutSeconds": 1}
            )
        )
        report["cancelled"] = result(
            await client.call_tool("cancel_deployment", {"taskId": hanging_id})
        )
        report["cancelledWait"] = result(
            await client.call_tool(
                "wait_for_deployment", {"taskId": hanging_id, "timeoutSeconds": 60}
            )
        )
        report["explainedCancel"] = result(
            await client.call_tool("explain_deployment", {"taskId": hanging_id})
        )
        report["cancelAgain"] = result(
            await client.call_tool("cancel_deployment", {"taskId": hanging_id})
        )
        report["cancelCompleted"] = result(
            await client.call_tool("cancel_deployment", {"taskId": task_id})
        )

        failing = await pollers[0].call_tool(
            "create_deployment", {"projectId": "mcp", "source": FAILING}
        )
        failing_id = failing.structured_content["id"]
        await client.call_tool("wait_for_deployment", {"taskId": failing_id, "timeoutSeconds": 60})
        report["explainedFailure"] = result(
            await client.call_tool("explain_deployment", {"taskId": failing_id})
        )
        report["invalid"] = result(
            await client.call_tool("create_deployment", {"projectId": "Not Valid"})
        )


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2:]))))
