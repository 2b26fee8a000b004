"""The cross-check of bench/peers/flask_peer.py's procrastinate peer: the same work, written apart.

As little as a team would write from procrastinate's quickstart and its documented settings, and
nothing taken from flask_peer.py, so that a handicap in one shows as a difference between them
(bench/e2e_throughput.py reports the two CPU costs per deployment side by side; they must agree
within 10%). The create validates the same image-deployment body, inserts the `deployments` row
and defers the job on the same connection in one transaction; the job, on a connection of
procrastinate's own pool, marks the row running, inserts four events and marks it completed,
six autocommit statements. Both pools are in autocommit; procrastinate's holds one connection
more than the worker runs jobs (its "Mind the size of your PostgreSQL pool").

Run from this directory in the peers' venv:
    python procrastinate_minimal.py setup
    gunicorn -c gunicorn_peer.py procrastinate_minimal:web
    procrastinate --app=procrastinate_minimal.tasks --log-level=warning worker \\
        --queues=deploy --concurrency=16
Environment: DATABASE_URL, PEER_CONCURRENCY.
"""

import functools
import os
import sys
import uuid

import procrastinate
from flask import Flask, jsonify, request
from marshmallow import Schema, ValidationError, fields, validate
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

URL = os.environ["DATABASE_URL"]
JOBS_AT_ONCE = int(os.environ.get("PEER_CONCURRENCY", "16"))


async def autocommit(conn) -> None:
    await conn.set_autocommit(True)


# `configure`, not kwargs={"autocommit": True}: procrastinate opens its LISTEN connection with
# the pool's kwargs plus its own autocommit=True, which would then be given twice.
tasks = procrastinate.App(
    connector=procrastinate.PsycopgConnector(
        conninfo=URL,
        configure=autocommit,
        min_size=JOBS_AT_ONCE + 1,
        max_size=JOBS_AT_ONCE + 1,
    )
)


@tasks.task(queue="deploy", pass_context=True)
async def deploy(context: procrastinate.JobContext, deployment: str) -> None:
    async with context.app.connector.pool.connection() as conn:
        await conn.execute(
            "UPDATE deployments SET status = 'running', started_at = now() "
            "WHERE id = %s AND status = 'queued'",
            (deployment,),
        )
        for step in ("apply_started", "apply_done", "verify_started", "verify_done"):
            await conn.execute(
                "INSERT INTO deployment_events (deployment_id, type) VALUES (%s, %s)",
                (deployment, step),
            )
        await conn.execute(
            "UPDATE deployments SET status = 'completed', finished_at = now() WHERE id = %s",
            (deployment,),
        )


label = validate.Regexp(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


class Source(Schema):
    kind = fields.String(required=True, validate=validate.Equal("image"))
    image = fields.String(
        required=True, validate=[validate.Length(1, 512), validate.Regexp(r"^\S+$")]
    )
    name = fields.String(required=True, validate=label)
    port = fields.Integer(required=True, strict=True, validate=validate.Range(1, 65535))
    replicas = fields.Integer(strict=True, validate=validate.Range(1, 100))
    env = fields.Dict(keys=fields.String(validate=validate.Length(1, 253)), values=fields.String())


class Create(Schema):
    projectId = fields.String(required=True, validate=label)
    source = fields.Nested(Source, required=True)


create_schema = Create()
web = Flask(__name__)


@functools.cache
def web_pool() -> ConnectionPool:
    return ConnectionPool(URL, kwargs={"autocommit": True}, max_size=20, open=True)


@web.post("/deployments")
def create():
    try:
        body = create_schema.load(request.get_json(force=True))
    except ValidationError as exc:
        return jsonify({"code": "invalid_request", "fields": exc.messages}), 400
    deployment = str(uuid.uuid4())
    with web_pool().connection() as conn, conn.transaction():
        conn.execute(
            "INSERT INTO deployments (id, project_id, source) VALUES (%s, %s, %s)",
            (deployment, body["projectId"], Jsonb(body["source"])),
        )
        deploy.configure(connection=conn).defer(deployment=deployment)
    return jsonify({"id": deployment, "status": "queued"}), 201


@web.get("/healthz")
def healthz():
    return jsonify({"ok": True})


DDL = [
    "CREATE TABLE deployments (id uuid PRIMARY KEY, project_id text NOT NULL, "
    "source jsonb NOT NULL, status text NOT NULL DEFAULT 'queued', "
    "created_at timestamptz NOT NULL DEFAULT now(), started_at timestamptz, "
    "finished_at timestamptz)",
    "CREATE INDEX ON deployments (project_id)",
    "CREATE TABLE deployment_events (id bigserial PRIMARY KEY, deployment_id uuid NOT NULL "
    "REFERENCES deployments (id) ON DELETE CASCADE, type text NOT NULL, "
    "at timestamptz NOT NULL DEFAULT now())",
    "CREATE INDEX ON deployment_events (deployment_id)",
]

if __name__ == "__main__" and sys.argv[1:] == ["setup"]:
    import psycopg

    with psycopg.connect(URL, autocommit=True) as conn:
        for statement in DDL:
            conn.execute(statement)
    with tasks.open():
        tasks.schema_manager.apply_schema()
