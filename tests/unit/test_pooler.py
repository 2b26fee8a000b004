"""Through a transaction-mode pooler (PgBouncer) a statement may run on any server session, so
nothing may rely on session state; LISTEN gets a direct connection. The suite's scale-out run
(tests/scaleout) proves it against a real PgBouncer; these pin the rules at their source."""

import re
from pathlib import Path

import psycopg
import pytest

from engine.db import Database, link_options
from engine.sql import queries

ROOT = Path(__file__).resolve().parents[2]
URL = "postgresql://engine@db.example:6432/deploy"


def test_link_options_bound_dead_link_detection_and_the_url_wins():
    info = psycopg.conninfo.conninfo_to_dict(link_options(URL, 9))
    assert info["tcp_user_timeout"] == "9000"
    assert int(info["keepalives_idle"]) + 2 * int(info["keepalives_interval"]) <= 9
    assert info["connect_timeout"] == "9"
    own = psycopg.conninfo.conninfo_to_dict(link_options(URL + "?connect_timeout=3", 9))
    assert own["connect_timeout"] == "3"
    assert link_options(URL, None) == URL


def test_a_pooled_statement_pool_never_prepares_and_listen_goes_direct():
    direct = "postgresql://engine@db.example:5432/deploy"
    pooled = Database(URL, pooler="pgbouncer", listen_url=direct)
    assert pooled.pool.kwargs["prepare_threshold"] is None
    assert pooled.listen_url == direct and pooled.url == URL
    plain = Database(URL)
    assert "prepare_threshold" not in plain.pool.kwargs  # psycopg's default: prepare
    assert plain.listen_url == URL
    with pytest.raises(ValueError, match="DB_POOLER"):
        Database(URL, pooler="pgpool")


#: Session state a pooled statement must never leave behind or rely on.
SESSION_STATE = [
    (r"pg_(try_)?advisory_lock(_shared)?\s*\(", "a session-level advisory lock"),
    (r"set_config\s*\([^;]*,\s*false\s*\)", "a session-level set_config"),
    (r"^(SET|RESET|PREPARE|LISTEN|DISCARD)\b", "a session statement"),
    (r"\bCREATE\s+TEMP(ORARY)?\b", "a temporary table"),
]


def statements(text: str) -> list[str]:
    """Each statement of a query, comments dropped, leading blanks stripped."""
    text = re.sub(r"--[^\n]*", "", text)
    return [part.strip() for part in text.split(";") if part.strip()]


def relies_on_session_state(text: str) -> list[str]:
    return [
        what
        for statement in statements(text)
        for pattern, what in SESSION_STATE
        if re.search(pattern, statement, re.IGNORECASE)
    ]


#: The schema migrator's queries run over the direct connection (LISTEN_DATABASE_URL), never
#: through the pooler: it may hold a session-level lock while it migrates.
DIRECT_ONLY_PREFIX = "schema_migrations_"


def test_no_named_query_relies_on_session_state():
    for name, text in queries.items():
        if not name.startswith(DIRECT_ONLY_PREFIX):
            assert not relies_on_session_state(text), name


def test_the_audit_detects_session_state():
    """Positive control: each rule catches what it names."""
    samples = [
        "SELECT pg_advisory_lock(1)",
        "SELECT set_config('x', 'y', false)",
        "SELECT 1;\n  -- why\n  SET statement_timeout = 0",
        "CREATE TEMP TABLE t (x int)",
    ]
    for sample, (_, what) in zip(samples, SESSION_STATE, strict=False):
        assert relies_on_session_state(sample) == [what]
    assert relies_on_session_state("UPDATE t\nSET x = 1 RETURNING set_config('a', 'b', true)") == []


def test_only_the_listener_issues_listen_and_only_on_the_direct_connection():
    hits = [
        p.relative_to(ROOT).as_posix()
        for p in (ROOT / "engine").rglob("*.py")
        if re.search(r"[\"']LISTEN\b", p.read_text())
    ]
    assert hits == ["engine/maintenance/listener.py"]
    assert "dedicated_connection()" in (ROOT / "engine/maintenance/listener.py").read_text()
