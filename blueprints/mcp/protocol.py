"""What the Model Context Protocol's transport and methods here both speak: the revisions we
serve, who we are, and JSON-RPC's errors (blueprints/mcp/transport.py serves them at /mcp)."""

#: Handshake-era revisions we speak, oldest to newest; the newest is our counter-offer.
HANDSHAKE_VERSIONS = ("2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25")
#: Stateless revisions: every request carries its envelope in `params._meta`.
STATELESS_VERSIONS = ("2026-07-28",)
#: The one handshake revision whose transport carries JSON-RPC batches (2025-06-18 removed them).
BATCH_VERSION = "2025-03-26"
#: What a request without the version header is assumed to speak (the transport spec's rule).
DEFAULT_HEADER_VERSION = "2025-03-26"
SERVER_INFO = {"name": "deployment-task-engine", "version": "1"}
INSTRUCTIONS = (
    "Deploy sources into projects and follow them: create_deployment starts one, "
    "wait_for_deployment waits until it ends or needs inputs, explain_deployment "
    "says what happened and what to do next."
)

PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS = -32700, -32600, -32601, -32602
HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION = -32020, -32022


class RpcError(Exception):
    def __init__(self, code: int, message: str, data=None):
        super().__init__(message)
        self.code, self.message, self.data = code, message, data

    def body(self) -> dict:
        error = {"code": self.code, "message": self.message}
        if self.data is not None:
            error["data"] = self.data
        return error
