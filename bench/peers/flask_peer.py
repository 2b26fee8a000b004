"""A same-work peer of the service for bench/e2e_throughput.py: what a team would build from parts.

A Flask app (behind gunicorn, bench/peers/gunicorn_peer.py) whose create validates the service's
image-deployment body with marshmallow, commits a `deployments` row and hands a job to a worker;
the job marks the deployment running, writes four event rows (apply started/done, verify
started/done) and marks it completed, each its own transaction. PEER_QUEUE chooses the queue:

- `procrastinate`: the row and the job commit in one transaction (the task's
  `configure(connection=conn).defer(...)` on the request's connection, procrastinate's way to
  defer inside the caller's transaction, so neither exists without the other); a procrastinate
  worker (asyncio, LISTEN/NOTIFY, PEER_CONCURRENCY jobs at once) runs the job.
- `celery`: the row commits, then the job is published to Redis (PEER_BROKER_URL); a Celery
  worker with the gevent pool runs it.

Written for throughput as the libraries' documentation says, with nothing a competent team
would not do (bench/peers/__init__.py lists each choice and its source):
- every pool is in autocommit, so a single statement is one round trip (not BEGIN, the
  statement, COMMIT); the create's two statements are one explicit transaction;
- one marshmallow schema instance per process (instances are reusable; building one per
  request cost 80 us of its 110);
- the worker's pool holds one connection per job it runs at once and one more (procrastinate's
  "Mind the size of your PostgreSQL pool": short jobs need as many as the concurrency, plus
  one), and lends them without a check each time, as the service's pool does;
- a job holds one connection of that pool for its six statements;
- the queue workers freeze what they loaded out of the collector's scans, as the service's
  workers do (gunicorn_peer.py does it for the peers' web workers);
- Celery prefetches many messages per slot (its "Optimizing" guide: for many short tasks a
  large multiplier) and its broker pool covers every greenlet that publishes.

Runs in the peers' venv (bench/requirements-peers.txt), never the app's, from this directory:
    python flask_peer.py setup                         # the tables (and procrastinate's schema)
    gunicorn -c gunicorn_peer.py flask_peer:app        # the HTTP service
    python flask_peer.py procrastinate-worker          # or, for celery:
    celery -A flask_peer:celery worker -P gevent -c 16 -Q deploy
Environment: DATABASE_URL (a libpq conninfo or URL), PEER_QUEUE, PEER_BROKER_URL,
PEER_CONCURRENCY.
"""

import gc
import os
import sys
import uuid

from flask import Flask, jsonify, request
from marshmallow import Schema, ValidationError, fields, validate
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

DATABASE_URL = os.environ["DATABASE_URL"]
QUEUE = os.environ.get("PEER_QUEUE", "procrastinate")
BROKER_URL = os.environ.get("PEER_BROKER_URL", "redis://127.0.0.1:6379/15")
#: Jobs a worker runs at once (procrastinate's concurrency, Celery's gevent pool).
CONCURRENCY = int(os.environ.get("PEER_CONCURRENCY", "16"))
#: Connections of a web worker's pool at most: the service's own limit (engine/db.py).
WEB_POOL_MAX = 20
#: Celery's prefetch multiplier: its "Optimizing" guide's figure for many short tasks.
CELERY_PREFETCH_MULTIPLIER = 64
AUTOCOMMIT = {"autocommit": True}
JOB_QUEUE = "deploy"
TASK_NAME = "run_deployment"

SCHEMA = """
CREATE TABLE IF NOT EXISTS deployments (
    id uuid PRIMARY KEY,
    project_id text NOT NULL,
    source jsonb NOT NULL,
    status text NOT NULL DEFAULT 'queued',
    created_at timestamptz NOT NULL DEFAULT now(),
    started_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS deployments_by_project ON deployments (project_id);
CREATE TABLE IF NOT EXISTS deployment_events (
    id bigserial PRIMARY KEY,
    deployment_id uuid NOT NULL REFERENCES deployments (id) ON DELETE CASCADE,
    type text NOT NULL,
    at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS deployment_events_by_deployment ON deployment_events (deployment_id);
"""
INSERT = "INSERT INTO deployments (id, project_id, source) VALUES (%s, %s, %s)"
MARK_RUNNING = (
    "UPDATE deployments SET status = 'running', started_at = now() "
    "WHERE id = %s AND status = 'queued'"
)
EVENT = "INSERT INTO deployment_events (deployment_id, type) VALUES (%s, %s)"
MARK_COMPLETED = "UPDATE deployments SET status = 'completed', finished_at = now() WHERE id = %s"
EVENTS = ("apply_started", "apply_done", "verify_started", "verify_done")


def job_statements(deployment_id: str):
    """The job's six statements, each committed on its own."""
    yield MARK_RUNNING, (deployment_id,)
    for event in EVENTS:
        yield EVENT, (deployment_id, event)
    yield MARK_COMPLETED, (deployment_id,)


# -- the create body: the service's image source, validated the same way -------------------------

NAME = validate.Regexp(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$", error="a DNS label")
IMAGE = validate.And(
    validate.Length(min=1, max=512), validate.Regexp(r"^[^\s]+$", error="no whitespace")
)


class ImageSource(Schema):
    kind = fields.String(required=True, validate=validate.Equal("image"))
    image = fields.String(required=True, validate=IMAGE)
    name = fields.String(required=True, validate=NAME)
    port = fields.Integer(required=True, strict=True, validate=validate.Range(1, 65535))
    replicas = fields.Integer(strict=True, validate=validate.Range(1, 100))
    env = fields.Dict(keys=fields.String(validate=validate.Length(1, 253)), values=fields.String())


class CreateDeployment(Schema):
    projectId = fields.String(required=True, validate=NAME)
    source = fields.Nested(ImageSource, required=True)


CREATE_DEPLOYMENT = CreateDeployment()

# -- the HTTP service ----------------------------------------------------------------------------


def _freeze_what_is_loaded() -> None:
    """Collect once and freeze what is loaded, as the service's workers and the peers' gunicorn
    workers do: a full collection no longer scans it."""
    gc.collect()
    gc.freeze()


app = Flask(__name__)
_pool: ConnectionPool | None = None


def pool() -> ConnectionPool:
    """This process's pool, opened on first use (after gunicorn forked and gevent patched)."""
    global _pool
    if _pool is None:
        _pool = ConnectionPool(
            DATABASE_URL, min_size=4, max_size=WEB_POOL_MAX, kwargs=AUTOCOMMIT, open=True
        )
    return _pool


@app.post("/deployments")
def create_deployment():
    """Validate, commit the row (with procrastinate, the job in the same transaction), hand on."""
    payload = request.get_json(silent=True)
    if not isinstance(payload, dict):
        return jsonify({"code": "malformed_json"}), 400
    try:
        body = CREATE_DEPLOYMENT.load(payload)
    except ValidationError as exc:
        return jsonify({"code": "invalid_request", "fields": exc.messages}), 400
    deployment_id = str(uuid.uuid4())
    row = (deployment_id, body["projectId"], Jsonb(body["source"]))
    with pool().connection() as conn:
        if QUEUE == "procrastinate":
            with conn.transaction():
                conn.execute(INSERT, row)
                deploy_task.configure(connection=conn).defer(deployment_id=deployment_id)
        else:
            conn.execute(INSERT, row)
    if QUEUE == "celery":
        celery.tasks[TASK_NAME].delay(deployment_id)
    return jsonify({"id": deployment_id, "status": "queued"}), 201


@app.get("/healthz")
def healthz():
    return jsonify({"ok": True})


# -- procrastinate -------------------------------------------------------------------------------

if QUEUE == "procrastinate":
    import procrastinate
    from psycopg_pool import AsyncConnectionPool

    #: In the web, never opened: a defer runs on the request's connection. The worker opens it
    #: on a pool of its own (run_procrastinate_worker).
    procrastinate_app = procrastinate.App(connector=procrastinate.PsycopgConnector())

    @procrastinate_app.task(name=TASK_NAME, queue=JOB_QUEUE)
    async def deploy_task(deployment_id: str) -> None:
        async with procrastinate_app.connector.pool.connection() as conn:
            for statement, params in job_statements(deployment_id):
                await conn.execute(statement, params)

    async def _autocommit(conn) -> None:
        await conn.set_autocommit(True)

    async def run_procrastinate_worker() -> None:
        """The worker on one pool for procrastinate's fetch and finish and the jobs' statements:
        a connection per job at once and one for the fetch. The pool is the peer's own
        (procrastinate's "Use an external pool"): procrastinate's would check every connection
        it lends with an empty query, a round trip per fetch and per finish, which the
        service's pool does not do. Autocommit by `configure`: with kwargs, procrastinate's
        LISTEN connection would get autocommit twice (a TypeError in 3.10.0)."""
        async with AsyncConnectionPool(
            DATABASE_URL,
            min_size=CONCURRENCY + 1,
            max_size=CONCURRENCY + 1,
            configure=_autocommit,
            open=False,
        ) as pool:
            await pool.wait()
            _freeze_what_is_loaded()
            async with procrastinate_app.open_async(pool=pool):
                await procrastinate_app.run_worker_async(
                    queues=[JOB_QUEUE], concurrency=CONCURRENCY, wait=True
                )


# -- Celery --------------------------------------------------------------------------------------

if QUEUE == "celery":
    from celery import Celery

    #: What `celery -A flask_peer` looks for.
    celery = Celery("flask_peer", broker=BROKER_URL)
    celery.conf.update(
        task_ignore_result=True,
        task_default_queue=JOB_QUEUE,
        # Every greenlet of a web worker that publishes at once gets a connection without
        # waiting (Celery's "Optimizing": size it to the active green threads).
        broker_pool_limit=WEB_POOL_MAX,
        worker_prefetch_multiplier=CELERY_PREFETCH_MULTIPLIER,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    from celery.signals import worker_ready

    @worker_ready.connect
    def _freeze(**_) -> None:
        _freeze_what_is_loaded()

    @celery.task(name=TASK_NAME)
    def run_deployment(deployment_id: str) -> None:
        with pool().connection() as conn:
            for statement, params in job_statements(deployment_id):
                conn.execute(statement, params)


def setup() -> None:
    """The tables, and for procrastinate its schema (once per database)."""
    import psycopg

    with psycopg.connect(DATABASE_URL, autocommit=True) as conn:
        for statement in filter(str.strip, SCHEMA.split(";")):
            conn.execute(statement)
        exists = conn.execute("SELECT to_regclass('procrastinate_jobs')").fetchone()[0]
    if QUEUE == "procrastinate" and exists is None:
        import asyncio

        async def apply():
            async with (
                AsyncConnectionPool(DATABASE_URL, min_size=1, open=False) as pool,
                procrastinate_app.open_async(pool=pool),
            ):
                await procrastinate_app.schema_manager.apply_schema_async()

        asyncio.run(apply())


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup()
    elif sys.argv[1] == "procrastinate-worker":
        import asyncio

        asyncio.run(run_procrastinate_worker())
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}; see the docstring")
