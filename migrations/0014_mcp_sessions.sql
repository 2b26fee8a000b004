-- MCP sessions of the handshake revisions (2024-11-05 .. 2025-11-25): one row per `initialize`,
-- so a session is told apart from every other, ends on the client's DELETE, and ends by itself
-- after MCP_SESSION_IDLE_S without a request. Any process of any host reads the same row. The
-- stateless revision (2026-07-28) has no sessions and never touches this table.
CREATE TABLE IF NOT EXISTS mcp_sessions (
    session_id text PRIMARY KEY,
    workspace  text NOT NULL,
    user_id    text NOT NULL,
    -- The protocol revision its `initialize` agreed.
    version    text NOT NULL,
    last_seen  timestamptz NOT NULL DEFAULT now()
);
-- The purge of idle sessions (each `initialize` removes a batch).
CREATE INDEX IF NOT EXISTS mcp_sessions_by_last_seen ON mcp_sessions (last_seen);
