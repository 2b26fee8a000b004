"""Drive the MCP endpoint with the official `mcp` SDK client (asyncio, so it runs in a process of
its own, not in the gevent-patched test process). Prints one JSON report for the test to check.

usage: python tests/e2e/mcp_client.py http://127.0.0.1:PORT/mcp
"""

import asyncio
import json
import sys

from mcp import Client

IMAGE = {"kind": "image", "image": "nginx:1.27", "name": "web", "port": 80}
#: The sandbox cluster never readies a manifest that mentions this: the task stays applying.
HANGING = {"kind": "image", "image": "nginx:sandbox-never-ready", "name": "stuck", "port": 80}
#: ... and refuses one that mentions this: the task fails.
FAILING = {"kind": "image", "image": "nginx:sandbox-apply-error", "name": "broken"}


def result(call) -> dict:
    return {
        "isError": call.is_error,
        "structured": call.structured_content,
        "text": call.content[0].text if call.content else None,
    }


async def main(url: str) -> dict:
    report = {}
    async with Client(url) as client:
        report["protocolVersion"] = client.protocol_version
        tools = await client.list_tools()
        report["tools"] = {t.name: t.input_schema for t in tools.tools}

        created = await client.call_tool("create_deployment", {"projectId": "mcp", "source": IMAGE})
        report["created"] = result(created)
        task_id = created.structured_content["id"]
        report["waited"] = result(
            await client.call_tool("wait_for_deployment", {"taskId": task_id, "timeoutSeconds": 60})
        )

        hanging = await client.call_tool(
            "create_deployment", {"projectId": "mcp", "source": HANGING}
        )
        hanging_id = hanging.structured_content["id"]
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

        failing = await client.call_tool(
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
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1]))))
