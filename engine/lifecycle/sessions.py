"""Browser sessions ended on the server: a sign-out any process of any host honours.

The session cookie is signed, so a copy of it stays valid until its lifetime ends unless the
server itself remembers that it was signed out. Each sign-in gets a random session id; a
sign-out records it in `session_revocations` until the moment the session would have expired
anyway; every request of a signed-in browser session checks it (one primary-key probe). Bearer
tokens and dev mode never reach this module.
"""

import secrets
from datetime import UTC, datetime

from engine.db import Database

#: Expired revocations one sign-out purges at most.
PURGE_BATCH = 100


def new_session_id() -> str:
    """A random id for a fresh sign-in (names nobody)."""
    return secrets.token_urlsafe(18)


def revoke(db: Database, session_id: str, *, expires_at: float, now: datetime | None = None):
    """Sign `session_id` out everywhere until `expires_at` (epoch seconds)."""
    db.execute(
        "session_revocation_insert",
        session_id=session_id,
        expires_at=datetime.fromtimestamp(expires_at, UTC),
        now=now,
        purge_limit=PURGE_BATCH,
    )


def is_revoked(db: Database, session_id: str) -> bool:
    """Whether `session_id` was signed out."""
    return bool(db.one("session_revocation_exists", session_id=session_id)["revoked"])


# -- MCP sessions (the handshake revisions of the protocol; blueprints/mcp.py) ------------------


def open_mcp_session(db: Database, identity, version: str, *, idle_s: float) -> str:
    """A new MCP session of `identity` speaking `version`; its id (random, names nobody)."""
    session_id = secrets.token_urlsafe(24)
    db.execute(
        "mcp_session_insert",
        session_id=session_id,
        workspace=identity.workspace,
        user=identity.user,
        version=version,
        idle_s=idle_s,
        now=None,
        purge_limit=PURGE_BATCH,
    )
    return session_id


def touch_mcp_session(db: Database, identity, session_id: str, *, idle_s: float) -> str | None:
    """The revision of a live session of `identity` (kept alive by this request), or None."""
    row = db.one(
        "mcp_session_touch_if_live",
        session_id=session_id,
        workspace=identity.workspace,
        user=identity.user,
        idle_s=idle_s,
        now=None,
    )
    return None if row is None else row["version"]


def close_mcp_session(db: Database, identity, session_id: str) -> bool:
    """End a session of `identity` (its client's DELETE); whether there was one to end."""
    row = db.one(
        "mcp_session_delete",
        session_id=session_id,
        workspace=identity.workspace,
        user=identity.user,
    )
    return row is not None
