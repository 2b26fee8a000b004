"""A same-work peer of the service for bench/e2e_throughput.py: what a team would build from parts.

A Flask app (behind gunicorn, bench/peers/gunicorn_peer.py) whose create validates the service's
image-deployment body with marshmallow, commits a `deployments` row and hands a job to a worker;
the job marks the deployment running, writes four event rows (apply started/done, verify
started/done) and marks it completed, each its own transaction. PEER_QUEUE chooses the queue:

- `procrastinate`: the row and the job commit in one transaction (procrastinate's own
  `procrastinate_defer_jobs_v1`, the statement its defer runs, on the request's connection, so
  neither exists without the other); a procrastinate worker (LISTEN/NOTIFY) runs the job.
- `celery`: the row commits, then the job is published to Redis (PEER_BROKER_URL); a Celery
  worker with the gevent pool runs it.

Runs in the peers' venv (bench/requirements-peers.txt), never the app's, from this directory:
    python flask_peer.py setup                         # the tables (and procrastinate's schema)
    gunicorn -c gunicorn_peer.py flask_peer:app        # the HTTP service
    python flask_peer.py procrastinate-worker          # or, for celery:
    celery -A flask_peer:celery worker -P gevent -c 16 -Q deploy
Environment: DATABASE_URL (a libpq conninfo or URL), PEER_QUEUE, PEER_BROKER_URL.
"""

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
DEFER = (
    "SELECT procrastinate_defer_jobs_v1(ARRAY[ROW(%s, %s, 0, NULL, NULL, %s, NULL)"
    "::procrastinate_job_to_defer_v1])"
)
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


# -- the HTTP service ----------------------------------------------------------------------------

app = Flask(__name__)
_pool: ConnectionPool | None = None


def pool() -> ConnectionPool:
    """This worker's pool, opened on first use (after gunicorn forked and gevent patched)."""
    global _pool
    if _pool is None:
        _pool = ConnectionPool(DATABASE_URL, min_size=4, max_size=20, open=True)
    return _pool


@app.post("/deployments")
def create_deployment():
    """Validate, commit the row (with procrastinate, the job in the same transaction), hand on."""
    payload = request.get_json(silent=True)
    if not isinstance(payload, dict):
        return jsonify({"code": "malformed_json"}), 400
    try:
        body = CreateDeployment().load(payload)
    except ValidationError as exc:
        return jsonify({"code": "invalid_request", "fields": exc.messages}), 400
    deployment_id = str(uuid.uuid4())
    with pool().connection() as conn, conn.transaction():
        conn.execute(INSERT, (deployment_id, body["projectId"], Jsonb(body["source"])))
        if QUEUE == "procrastinate":
            conn.execute(DEFER, (JOB_QUEUE, TASK_NAME, Jsonb({"deployment_id": deployment_id})))
    if QUEUE == "celery":
        celery_task().delay(deployment_id)
    return jsonify({"id": deployment_id, "status": "queued"}), 201


@app.get("/healthz")
def healthz():
    return jsonify({"ok": True})


# -- procrastinate -------------------------------------------------------------------------------


def procrastinate_app():
    import procrastinate
    from psycopg_pool import AsyncConnectionPool

    papp = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DATABASE_URL))
    jobs_pool: list[AsyncConnectionPool] = []

    @papp.task(name=TASK_NAME, queue=JOB_QUEUE)
    async def run_deployment(deployment_id: str) -> None:
        if not jobs_pool:
            jobs_pool.append(
                AsyncConnectionPool(DATABASE_URL, min_size=4, max_size=CONCURRENCY, open=False)
            )
            await jobs_pool[0].open()
        for statement, params in job_statements(deployment_id):
            async with jobs_pool[0].connection() as conn:
                await conn.execute(statement, params)

    return papp


# -- Celery --------------------------------------------------------------------------------------

_celery = None


def celery_app():
    """The Celery app (broker Redis, results ignored), its one task registered."""
    global _celery
    if _celery is None:
        from celery import Celery

        _celery = Celery("flask_peer", broker=BROKER_URL)
        _celery.conf.update(
            task_ignore_result=True,
            task_default_queue=JOB_QUEUE,
            broker_connection_retry_on_startup=True,
            worker_hijack_root_logger=False,
        )

        @_celery.task(name=TASK_NAME)
        def run_deployment(deployment_id: str) -> None:
            for statement, params in job_statements(deployment_id):
                with pool().connection() as conn:
                    conn.execute(statement, params)

    return _celery


def celery_task():
    return celery_app().tasks[TASK_NAME]


if QUEUE == "celery":
    #: What `celery -A flask_peer` looks for.
    celery = celery_app()


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
            papp = procrastinate_app()
            async with papp.open_async():
                await papp.schema_manager.apply_schema_async()

        asyncio.run(apply())


if __name__ == "__main__":
    if sys.argv[1] == "setup":
        setup()
    elif sys.argv[1] == "procrastinate-worker":
        procrastinate_app().run_worker(queues=[JOB_QUEUE], concurrency=CONCURRENCY, wait=True)
    else:
        raise SystemExit(f"unknown command {sys.argv[1]!r}; see the docstring")
