-- Queries on mcp_sessions: the sessions of MCP's handshake revisions (blueprints/mcp.py).

-- mcp_session_delete --
-- End a session on its client's DELETE. No row back: not a live session of this caller.
DELETE FROM mcp_sessions
WHERE session_id = %(session_id)s AND workspace = %(workspace)s AND user_id = %(user)s
RETURNING session_id;

-- mcp_session_insert --
-- A new session for an `initialize`, and purge a batch of sessions idle past %(idle_s)s seconds
-- (initializes are rare next to tool calls: this keeps the table small).
WITH purged AS (
    DELETE FROM mcp_sessions WHERE session_id IN (
        SELECT session_id FROM mcp_sessions
        WHERE last_seen < coalesce(%(now)s, now()) - make_interval(secs => %(idle_s)s)
        LIMIT %(purge_limit)s)
)
INSERT INTO mcp_sessions (session_id, workspace, user_id, version, last_seen)
VALUES (%(session_id)s, %(workspace)s, %(user)s, %(version)s, coalesce(%(now)s, now()));

-- mcp_session_touch_if_live --
-- A request of a session: its revision, and the session kept alive, if it is this caller's and
-- was used within %(idle_s)s seconds. No row back: unknown, another caller's, ended or idle.
UPDATE mcp_sessions SET last_seen = coalesce(%(now)s, now())
WHERE session_id = %(session_id)s AND workspace = %(workspace)s AND user_id = %(user)s
  AND last_seen >= coalesce(%(now)s, now()) - make_interval(secs => %(idle_s)s)
RETURNING version;
