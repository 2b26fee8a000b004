"""Chat tools over REST: `GET /api/v1/tools` lists them (blueprints/api/tool_catalog.py);
`POST /api/v1/tools/<name>` calls one with its arguments as the JSON body."""

from flask import Blueprint, jsonify

from blueprints.api.calls import json_answer
from blueprints.api.tool_catalog import TOOLS, invoke
from blueprints.api.tool_schemas import schema_of
from blueprints.errors import UnknownTool
from blueprints.request_helpers import json_body

bp = Blueprint("tools", __name__, url_prefix="/api/v1/tools")

#: wait_for_deployment's longest wait: a minute under the read timeouts assistants' HTTP clients
#: use by default (300 s in the MCP SDK and most gateways), so the answer always arrives; a
#: longer deployment answers `timeout` and the assistant calls again.
MAX_TOOL_WAIT_S = 240


@bp.get("")
def list_tools():
    """Every tool with its JSON Schema parameters."""
    return jsonify(
        {
            "items": [
                {"name": t.name, "description": t.description, "parameters": schema_of(t.arguments)}
                for t in TOOLS.values()
            ]
        }
    )


@bp.post("/<name>")
def call_tool(name):
    """Call a tool with its arguments as the JSON body."""
    tool = TOOLS.get(name)
    if tool is None:
        raise UnknownTool()
    return json_answer(*invoke(tool, json_body()))
