"""Versioned schema migrations: numbered files under migrations/, recorded in schema_migrations.

Boot calls upgrade(). On a current database it only reads the ledger (ACCESS SHARE on
schema_migrations, nothing else): no DDL and no advisory lock, so a boot beside running reapers and
cleanup workers can neither deadlock with them nor make them wait. Only when something is pending
does it take the advisory lock, re-read the ledger (another boot may have just finished) and apply
each pending file in numeric order, each in its own transaction together with its ledger row.
"""

import logging
import re
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import psycopg
from psycopg.rows import dict_row

from engine.operations.setting_rules import PROJECT_ROOT
from engine.sql import queries

log = logging.getLogger(__name__)

MIGRATIONS_DIR = PROJECT_ROOT / "migrations"
#: Serializes migrating boots (the migrator, never the engine, takes an advisory lock).
MIGRATION_LOCK_KEY = 0x7A5C_0001
#: The migration a database created before the ledger existed is adopted as.
INITIAL_VERSION = 1
#: Lets an operator (and the lock tests) tell the migrator's connection apart in pg_stat_activity.
APPLICATION_NAME = "deploy-engine-migrate"
_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    path: Path

    @property
    def sql(self) -> str:
        return self.path.read_text()


@dataclass(frozen=True)
class MigrationState:
    """One migration as a database sees it: applied_at None means pending."""

    version: int
    name: str
    applied_at: datetime | None = None
    adopted: bool = False
    #: Recorded in the database but no file of that number here (a newer release's migration).
    unknown: bool = False


def discover(directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Every migration file, in numeric order; a misnamed file or a repeated number is an error."""
    found: dict[int, Migration] = {}
    for path in sorted(directory.glob("*.sql")):
        match = _FILE.match(path.name)
        if not match:
            raise RuntimeError(f"migration file {path.name} is not named NNNN_name.sql")
        version = int(match.group(1))
        if version in found:
            raise RuntimeError(
                f"two migrations numbered {version:04d}: {found[version].path.name}, {path.name}"
            )
        found[version] = Migration(version, match.group(2), path)
    return [found[v] for v in sorted(found)]


def status(url: str, directory: Path = MIGRATIONS_DIR) -> list[MigrationState]:
    """Every known migration with when it was applied (None: pending), and unknown recorded ones."""
    with _connect(url) as conn:
        recorded = _recorded(conn)
    files = {m.version: m for m in discover(directory)}
    states = [
        MigrationState(m.version, m.name, recorded[v]["applied_at"], recorded[v]["adopted"])
        if v in recorded
        else MigrationState(m.version, m.name)
        for v, m in files.items()
    ]
    states += [
        MigrationState(v, r["name"], r["applied_at"], r["adopted"], unknown=True)
        for v, r in recorded.items()
        if v not in files
    ]
    return sorted(states, key=lambda s: s.version)


def pending(url: str, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """The migrations upgrade() would apply now."""
    with _connect(url) as conn:
        return _pending(conn, discover(directory))


def upgrade(url: str, directory: Path = MIGRATIONS_DIR) -> list[Migration]:
    """Apply every pending migration (see the module docstring); the ones this call applied."""
    migrations = discover(directory)
    with _connect(url) as conn:
        if not _pending(conn, migrations):
            return []
        conn.execute(queries["schema_migrations_lock"], {"key": MIGRATION_LOCK_KEY})
        try:
            return _apply_pending(conn, migrations)
        finally:
            conn.execute(queries["schema_migrations_unlock"], {"key": MIGRATION_LOCK_KEY})


def _apply_pending(conn: psycopg.Connection, migrations: list[Migration]) -> list[Migration]:
    state = conn.execute(queries["schema_migrations_state"]).fetchone()
    if not state["has_ledger"]:
        with conn.transaction():
            conn.execute(queries["schema_migrations_create"])
            if state["has_schema"]:
                # Created by the schema file that ran at every boot before migrations existed.
                initial = next(m for m in migrations if m.version == INITIAL_VERSION)
                conn.execute(
                    queries["schema_migrations_record"],
                    {"version": initial.version, "name": initial.name, "adopted": True},
                )
                log.info(
                    "adopted an existing schema as migration %04d_%s", initial.version, initial.name
                )
    applied = []
    for migration in _pending(conn, migrations):  # re-read: another boot may have applied some
        with conn.transaction():
            conn.execute(migration.sql)
            conn.execute(
                queries["schema_migrations_record"],
                {"version": migration.version, "name": migration.name, "adopted": False},
            )
        log.info("applied migration %04d_%s", migration.version, migration.name)
        applied.append(migration)
    return applied


def _pending(conn: psycopg.Connection, migrations: list[Migration]) -> list[Migration]:
    recorded = _recorded(conn)
    return [m for m in migrations if m.version not in recorded]


def _recorded(conn: psycopg.Connection) -> dict[int, dict]:
    if not conn.execute(queries["schema_migrations_state"]).fetchone()["has_ledger"]:
        return {}
    return {r["version"]: r for r in conn.execute(queries["schema_migrations_list"])}


def _connect(url: str) -> psycopg.Connection:
    return psycopg.connect(
        url, autocommit=True, row_factory=dict_row, application_name=APPLICATION_NAME
    )
