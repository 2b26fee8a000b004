"""The chat tools over the Model Context Protocol's Streamable HTTP transport, at /mcp.

JSON-RPC 2.0 over POST: `initialize` (protocol version negotiation), `ping`, `tools/list`,
`tools/call`; notifications and client responses are accepted with 202. Each request is answered
with one JSON body, or one SSE event when the client accepts only `text/event-stream`. The
server offers no server-initiated stream (GET is 405) and keeps no session state: the
`Mcp-Session-Id` is a signed, timestamped token naming the negotiated version and the caller, so
any worker of any process can serve the next request. It expires MCP_SESSION_TTL_S after its
`initialize` (404: the client initializes again, as the transport spec has it). Tools, their
input schemas, auth and workspace scoping are the ones of blueprints/toolbox.py; a failing tool is
an MCP tool error (`isError`) whose text starts with the stable error code.
"""

import json
import logging

from flask import Blueprint, Response, current_app, jsonify, request
from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from blueprints import toolbox
from blueprints.auth import current_identity
from blueprints.edge import origin_allowed
from blueprints.jsonschema import schema_of
from engine.trust.untrusted import load_json

log = logging.getLogger(__name__)

bp = Blueprint("mcp", __name__)

#: Handshake-era revisions we speak, oldest to newest; the newest is our counter-offer.
PROTOCOL_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: What a request without the version header is assumed to speak (the transport spec's rule).
DEFAULT_HEADER_VERSION = "2025-03-26"
SESSION_HEADER = "Mcp-Session-Id"
VERSION_HEADER = "MCP-Protocol-Version"
SERVER_INFO = {"name": "deployment-task-engine", "version": "1"}
INSTRUCTIONS = (
    "Deploy sources into projects and follow them: create_deployment starts one, "
    "wait_for_deployment waits until it ends or needs inputs, explain_deployment "
    "says what happened and what to do next."
)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602


class RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def _serializer() -> URLSafeTimedSerializer:
    return URLSafeTimedSerializer(current_app.secret_key, salt="mcp-session")


def _rpc_error(message_id, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}


def _http_error(status: int, code: int, message: str) -> Response:
    response = jsonify(_rpc_error(None, code, message))
    response.status_code = status
    return response


@bp.post("/mcp")
def endpoint():
    origin = request.headers.get("Origin")
    # A browser page may only reach us from this site's public origin (DNS rebinding guard).
    if origin and not origin_allowed(origin):
        return _http_error(403, INVALID_REQUEST, "cross-origin requests are refused")
    accept = request.headers.get("Accept", "")
    if "application/json" not in accept and "text/event-stream" not in accept:
        return _http_error(
            406, INVALID_REQUEST, "Accept must include application/json or text/event-stream"
        )
    try:
        message = load_json(request.get_data())  # depth-limited, like every JSON body
    except ValueError:
        return _http_error(400, PARSE_ERROR, "the body is not JSON")
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return _http_error(400, INVALID_REQUEST, "the body must be one JSON-RPC 2.0 message")

    if "method" not in message:  # a client's response to a server request: none are sent
        return Response(status=202)
    method, message_id = message["method"], message.get("id")
    if not isinstance(method, str):
        return _http_error(400, INVALID_REQUEST, "method must be a string")
    identity = current_identity()
    if method == "initialize":
        version = _negotiate(message.get("params"))
        # "ns" holds the workspace: the key is older than the name, and live sessions carry it.
        session = _serializer().dumps({"v": version, "ns": identity.workspace, "u": identity.user})
        return _answer(
            message_id,
            {
                "protocolVersion": version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": SERVER_INFO,
                "instructions": INSTRUCTIONS,
            },
            headers={SESSION_HEADER: session},
        )

    refused = _check_session(identity)
    if refused is not None:
        return refused
    if "id" not in message:  # notifications (initialized, cancelled, ...): nothing to say
        return Response(status=202)
    try:
        result = _dispatch(method, message.get("params") or {})
    except RpcError as exc:
        return _answer(message_id, error={"code": exc.code, "message": exc.message})
    return _answer(message_id, result)


@bp.route("/mcp", methods=["GET", "DELETE"])
def no_stream():
    """No server-initiated stream to open and no session state to delete: 405 (the spec's way)."""
    response = _http_error(405, INVALID_REQUEST, "only POST is served here")
    response.headers["Allow"] = "POST"
    return response


def _negotiate(params) -> str:
    """The client's version when we speak it, else our newest (the client then decides)."""
    requested = params.get("protocolVersion") if isinstance(params, dict) else None
    return requested if requested in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[-1]


def _check_session(identity) -> Response | None:
    """400 without a session or with an unsupported version header; 404 for a session that is
    not ours (forged, another server's key, or another caller's), so the client starts anew."""
    sent = request.headers.get(SESSION_HEADER)
    if not sent:
        return _http_error(400, INVALID_REQUEST, f"{SESSION_HEADER} is required; initialize first")
    try:
        session = _serializer().loads(
            sent, max_age=current_app.extensions["engine"].settings.mcp_session_ttl_s
        )
    except SignatureExpired:
        return _http_error(404, INVALID_REQUEST, "the session expired; initialize again")
    except BadSignature:
        return _http_error(404, INVALID_REQUEST, "unknown session; initialize again")
    if session.get("ns") != identity.workspace or session.get("u") != identity.user:
        return _http_error(404, INVALID_REQUEST, "unknown session; initialize again")
    version = request.headers.get(VERSION_HEADER, DEFAULT_HEADER_VERSION)
    if version not in PROTOCOL_VERSIONS:
        return _http_error(400, INVALID_REQUEST, f"unsupported {VERSION_HEADER}: {version}")
    return None


def _dispatch(method: str, params: dict) -> dict:
    if not isinstance(params, dict):
        raise RpcError(INVALID_PARAMS, "params must be an object")
    if method == "ping":
        return {}
    if method == "tools/list":
        return {
            "tools": [
                {
                    "name": t.name,
                    "description": t.description,
                    "inputSchema": schema_of(t.arguments),
                }
                for t in toolbox.TOOLS.values()
            ]
        }
    if method == "tools/call":
        return _call_tool(params)
    raise RpcError(METHOD_NOT_FOUND, f"method not found: {method}")


def _call_tool(params: dict) -> dict:
    name = params.get("name")
    if not isinstance(name, str):  # any JSON value may come; a list is not even hashable
        raise RpcError(INVALID_PARAMS, "params.name must be a string naming a tool")
    tool = toolbox.TOOLS.get(name)
    if tool is None:
        raise RpcError(INVALID_PARAMS, f"unknown tool: {name}")
    body, status, _ = toolbox.invoke(tool, params.get("arguments") or {})
    if status >= 400:
        # A tool error, not a protocol error: the model sees it and can correct its call.
        return {
            "content": [
                {"type": "text", "text": f"{body['code']}: {body['message']}\n" + json.dumps(body)}
            ],
            "structuredContent": body,
            "isError": True,
        }
    return {
        "content": [{"type": "text", "text": json.dumps(body)}],
        "structuredContent": body,
        "isError": False,
    }


def _answer(
    message_id,
    result: dict | None = None,
    *,
    error: dict | None = None,
    headers: dict | None = None,
) -> Response:
    """One JSON-RPC response: JSON, or a one-event SSE stream for a client that accepts only
    that."""
    body = {"jsonrpc": "2.0", "id": message_id}
    body.update({"error": error} if error is not None else {"result": result})
    if "application/json" in request.headers.get("Accept", ""):
        response = jsonify(body)
    else:
        response = Response(
            f"event: message\ndata: {json.dumps(body)}\n\n",
            mimetype="text/event-stream",
            headers={"Cache-Control": "no-cache"},
        )
    response.headers.update(headers or {})
    return response
