"""The chat tools over the Model Context Protocol's Streamable HTTP transport, at /mcp.

Two eras of the protocol share the endpoint, told apart per request:

- 2026-07-28, stateless: no handshake and no session; every request carries its own envelope in
  `params._meta` (protocol version, client capabilities) echoed by the `MCP-Protocol-Version` and
  `Mcp-Method` headers. `server/discover` says what we speak. create_deployment and
  redeploy_deployment answer a task handle when the client speaks the Tasks extension
  (io.modelcontextprotocol/tasks): `tasks/get` polls it, `tasks/cancel` cancels the deployment.
  The handle is the deployment task's id, so any process of any host answers any request.
- 2024-11-05 to 2025-11-25, the `initialize` handshake: each handshake gets a session id of its
  own (signed, naming the version and the caller); later requests must carry it and a matching
  version header. Sessions live in the database (engine/lifecycle/sessions.py), so any process
  serves them; the client's DELETE ends one, and so do MCP_SESSION_IDLE_S without a request (404:
  the client initializes again, as the transport spec has it).

Each request is answered with one JSON body, or one SSE event when the client accepts only
`text/event-stream`. The server offers no server-initiated stream (GET is 405). Tools, their input
schemas, auth and workspace scoping are the ones of blueprints/api/tool_catalog.py; a failing tool
is an MCP tool error (`isError`) whose text starts with the stable error code. The methods are
blueprints/mcp/methods.py's, the protocol's words blueprints/mcp/protocol.py's.
"""

import json
import logging
import re

from flask import Blueprint, Response, current_app, jsonify, request

from blueprints.auth.edge import origin_allowed
from blueprints.auth.gate import current_identity
from blueprints.mcp.methods import dispatch
from blueprints.mcp.protocol import (
    BATCH_VERSION,
    HANDSHAKE_VERSIONS,
    HEADER_MISMATCH,
    INSTRUCTIONS,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_INFO,
    STATELESS_VERSIONS,
    UNSUPPORTED_PROTOCOL_VERSION,
    RpcError,
)
from blueprints.request_helpers import runtime
from engine.lifecycle import sessions
from engine.trust.untrusted import load_json

log = logging.getLogger(__name__)

bp = Blueprint("mcp", __name__)

SESSION_HEADER = "Mcp-Session-Id"
#: What a session id may be (the transport spec: visible ASCII; ours are 32 characters). Any
#: other value names no session and is refused before a lookup: a NUL in it reached
#: PostgreSQL's text and answered 500.
SESSION_ID = re.compile(r"[\x21-\x7e]{1,200}")
NOT_A_SESSION_ID = f"{SESSION_HEADER} is not a session id (visible ASCII, at most 200 characters)"
VERSION_HEADER = "MCP-Protocol-Version"
METHOD_HEADER = "Mcp-Method"
NAME_HEADER = "Mcp-Name"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
#: Stateless results that carry caching directives (the 2026-07-28 CacheableResult).
CACHEABLE = frozenset({"server/discover", "tools/list"})
#: The HTTP status of a stateless request's error (the 2026-07-28 transport's table).
STATELESS_ERROR_STATUS = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    UNSUPPORTED_PROTOCOL_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}


def _rpc_error(message_id, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": message_id, "error": {"code": code, "message": message}}


def _http_error(status: int, code: int, message: str, message_id=None) -> Response:
    response = jsonify(_rpc_error(message_id, code, message))
    response.status_code = status
    return response


def _accepted() -> Response:
    """202 for a notification or a client's response: no body, so no content type either."""
    response = Response(status=202)
    del response.headers["Content-Type"]
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
    if isinstance(message, list):
        return _batch(message)
    refused = _malformed(message)
    if refused is not None:
        return _http_error(400, INVALID_REQUEST, refused, _id_of(message))
    if "method" not in message:  # a client's response to a server request: none are sent
        return _accepted()
    if _is_stateless(message):
        return _stateless(message)
    return _handshake_era(message)


def _id_of(message):
    return message.get("id") if isinstance(message, dict) else None


def _malformed(message) -> str | None:
    """Why `message` is not a JSON-RPC 2.0 request, notification or response, or None."""
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        return "the body must be a JSON-RPC 2.0 message"
    if (
        "id" in message
        and not isinstance(message["id"], (str, int))
        or isinstance(message.get("id"), bool)
    ):
        return "id must be a string or an integer"
    if "method" in message:
        if not isinstance(message["method"], str):
            return "method must be a string"
        if "params" in message and not isinstance(message["params"], dict):
            return "params must be an object"
        return None
    # No method: only a response (with result or error) may omit it.
    if "id" not in message or ("result" in message) == ("error" in message):
        return "a message without a method must be a response carrying result or error"
    return None


# -- 2026-07-28: stateless ---------------------------------------------------------------------


def _is_stateless(message: dict) -> bool:
    meta = (message.get("params") or {}).get("_meta")
    return (
        message["method"] == "server/discover"
        or (isinstance(meta, dict) and META_VERSION in meta)
        or request.headers.get(VERSION_HEADER) in STATELESS_VERSIONS
    )


def _stateless(message: dict) -> Response:
    message_id = message.get("id")
    if "id" not in message:  # the stateless core defines no client notifications
        return _accepted()
    try:
        capabilities = _envelope(message)
        result = dispatch(message["method"], message.get("params") or {}, capabilities)
    except RpcError as exc:
        status = STATELESS_ERROR_STATUS.get(exc.code, 200)
        return _answer(message_id, error=exc.body(), status=status)
    result.setdefault("resultType", "complete")
    if message["method"] in CACHEABLE:
        # The same for every caller of this deployment; a client may keep it for a minute.
        result.update(ttlMs=60_000, cacheScope="private")
    result.setdefault("_meta", {})[META_SERVER_INFO] = SERVER_INFO
    return _answer(message_id, result)


def _envelope(message: dict) -> dict:
    """The client's capabilities from a stateless request's `_meta`, once the envelope, its
    headers and its version agree; RpcError otherwise."""
    meta = message.get("params", {}).get("_meta")
    if not isinstance(meta, dict) or META_VERSION not in meta or META_CAPABILITIES not in meta:
        raise RpcError(
            INVALID_PARAMS, f"params._meta must carry {META_VERSION} and {META_CAPABILITIES}"
        )
    version = meta[META_VERSION]
    if request.headers.get(VERSION_HEADER) != version:
        raise RpcError(HEADER_MISMATCH, f"{VERSION_HEADER} does not match params._meta")
    if request.headers.get(METHOD_HEADER) != message["method"]:
        raise RpcError(HEADER_MISMATCH, f"{METHOD_HEADER} does not match the method")
    name = request.headers.get(NAME_HEADER)
    if name is not None and message["method"] == "tools/call":
        if name != message["params"].get("name"):
            raise RpcError(HEADER_MISMATCH, f"{NAME_HEADER} does not match params.name")
    if version not in STATELESS_VERSIONS:
        raise RpcError(
            UNSUPPORTED_PROTOCOL_VERSION,
            "unsupported protocol version",
            {"supported": list(STATELESS_VERSIONS), "requested": version},
        )
    capabilities = meta[META_CAPABILITIES]
    if not isinstance(capabilities, dict):
        raise RpcError(INVALID_PARAMS, f"{META_CAPABILITIES} must be an object")
    return capabilities


# -- the handshake era: 2024-11-05 .. 2025-11-25 ----------------------------------------------


def _handshake_era(message: dict) -> Response:
    method, message_id = message["method"], message.get("id")
    identity = current_identity()
    if method == "initialize":
        if "id" not in message:
            return _http_error(400, INVALID_REQUEST, "initialize is a request: it needs an id")
        version = _negotiate(message.get("params"))
        # A session of its own per handshake, kept in the database (any process serves it),
        # ended by the client's DELETE or after MCP_SESSION_IDLE_S without a request.
        session = sessions.open_mcp_session(runtime().db, identity, version, idle_s=_idle_s())
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
    session, refused = _session(identity)
    if refused is not None:
        return refused
    if "id" not in message:  # notifications (initialized, cancelled, ...): nothing to say
        return _accepted()
    try:
        result = dispatch(method, message.get("params") or {}, None)
    except RpcError as exc:
        return _answer(message_id, error=exc.body())
    return _answer(message_id, result)


def _batch(messages: list) -> Response:
    """A JSON-RPC batch: served only in a 2025-03-26 session (its transport requires them);
    every other revision's transport has one message per POST."""
    session, refused = _session(current_identity())
    if refused is not None:
        return refused
    if session["v"] != BATCH_VERSION or not messages:
        return _http_error(400, INVALID_REQUEST, "batches are not supported in this revision")
    answers = []
    for message in messages:
        why = _malformed(message)
        if why is not None:
            answers.append(_rpc_error(_id_of(message), INVALID_REQUEST, why))
        elif "method" in message and "id" in message:
            try:
                result = dispatch(message["method"], message.get("params") or {}, None)
                answers.append({"jsonrpc": "2.0", "id": message["id"], "result": result})
            except RpcError as exc:
                answers.append({"jsonrpc": "2.0", "id": message["id"], "error": exc.body()})
    return jsonify(answers) if answers else _accepted()


@bp.get("/mcp")
def no_stream():
    """No server-initiated stream to open: 405 (the spec's way)."""
    response = _http_error(405, INVALID_REQUEST, "only POST and DELETE are served here")
    response.headers["Allow"] = "POST, DELETE"
    return response


@bp.delete("/mcp")
def end_session():
    """The client ends its session (a handshake revision's): 204, or 404 when it is not a live
    session of the caller; 400 without one."""
    origin = request.headers.get("Origin")
    if origin and not origin_allowed(origin):
        return _http_error(403, INVALID_REQUEST, "cross-origin requests are refused")
    sent = request.headers.get(SESSION_HEADER)
    if not sent:
        return _http_error(400, INVALID_REQUEST, f"{SESSION_HEADER} is required")
    if not SESSION_ID.fullmatch(sent):
        return _http_error(400, INVALID_REQUEST, NOT_A_SESSION_ID)
    if not sessions.close_mcp_session(runtime().db, current_identity(), sent):
        return _http_error(404, INVALID_REQUEST, "unknown or ended session")
    return Response(status=204)


def _negotiate(params) -> str:
    """The client's version when we speak it, else our newest (the client then decides)."""
    requested = params.get("protocolVersion") if isinstance(params, dict) else None
    return requested if requested in HANDSHAKE_VERSIONS else HANDSHAKE_VERSIONS[-1]


def _session(identity) -> tuple[dict | None, Response | None]:
    """(session, None), or (None, refusal): 400 without a session or with a version header other
    than the session's; 404 for a session that is not a live one of this caller (unknown,
    another caller's, ended by DELETE, idle past MCP_SESSION_IDLE_S), so the client starts anew."""
    sent = request.headers.get(SESSION_HEADER)
    if not sent:
        refusal = _http_error(400, INVALID_REQUEST, f"{SESSION_HEADER} is required; initialize")
        return None, refusal
    if not SESSION_ID.fullmatch(sent):
        return None, _http_error(400, INVALID_REQUEST, NOT_A_SESSION_ID)
    known = sessions.touch_mcp_session(runtime().db, identity, sent, idle_s=_idle_s())
    if known is None:
        return None, _http_error(404, INVALID_REQUEST, "unknown or ended session; initialize again")
    version = request.headers.get(VERSION_HEADER)
    # Before 2025-06-18 clients did not send the header; from then on it must be the session's.
    if version is None and known in ("2024-11-05", "2025-03-26"):
        version = known
    if version != known:
        message = f"{VERSION_HEADER} must be the session's ({known})"
        return None, _http_error(400, INVALID_REQUEST, message)
    return {"v": known}, None


def _idle_s() -> float:
    return current_app.extensions["engine"].settings.mcp_session_idle_s


def _answer(
    message_id,
    result: dict | None = None,
    *,
    error: dict | None = None,
    headers: dict | None = None,
    status: int = 200,
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
    response.status_code = status
    response.headers.update(headers or {})
    return response
