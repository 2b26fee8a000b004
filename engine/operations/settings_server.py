"""The server's own settings: where it listens, its database, and the engine's cadences and
limits (docs/configuration.md "Server"). Part of Settings (engine/operations/config.py)."""

from dataclasses import dataclass
from pathlib import Path

from engine.integrations.kube.diagnosis import FAIL_FAST_DEFAULT
from engine.operations.setting_rules import PROJECT_ROOT, SERVER, setting


@dataclass(frozen=True)
class ServerSettings:
    """The server, its database and the engine's cadences."""

    # -- the server, its database and the engine's cadences (docs/configuration.md "Server") ---
    host: str = setting("127.0.0.1", "where `python app.py` and gunicorn listen", SERVER)
    port: int = setting(8000, "the port they listen on", SERVER, at_least=1, at_most=65535)
    trusted_hosts: str = setting(
        "",
        "`Host` names the server answers (comma-separated); any other is 400 `untrusted_host` "
        "(see [Security model](security.md))",
        SERVER,
        shown="`127.0.0.1,localhost,::1` + `HOST`",
    )
    public_origin: str = setting(
        "",
        "where users reach the site; websocket `Origin` and unsafe API requests must come from "
        "it; `https://` makes the session cookie `Secure`",
        SERVER,
        shown="`http://<trusted host>:PORT`",
    )
    database_url: str | None = setting(
        None, "PostgreSQL to use; unset starts the embedded server under `DATA_DIR`", SERVER
    )
    data_dir: Path = setting(
        PROJECT_ROOT / "instance",
        "where the embedded PostgreSQL keeps its data (`DATA_DIR/pgdata`)",
        SERVER,
    )
    db_pool_size: int = setting(20, "connections per process", SERVER, at_least=1)
    runner_db_slots: int = setting(
        0,
        "pool connections a process's runners may use at once; the rest stay free for requests "
        "(0: half of the pool)",
        SERVER,
        at_least=0,
        below="db_pool_size",
        shown="half of `DB_POOL_SIZE`",
    )
    max_runs_per_process: int = setting(
        200,
        "runs a process holds at once; a create or input resume beyond it is refused at once "
        "with 503 `overloaded` and `Retry-After`, writing nothing",
        SERVER,
        at_least=1,
    )
    runner_notice_interval_s: float = setting(
        0.05,
        "a process announces the tasks it created and its runners wrote to (steps, their own "
        "status moves) once per this tick, in one statement; the most a viewer on another "
        "process waits to see such a write",
        SERVER,
        above=0,
    )
    db_pooler: str = setting(
        "",
        "`pgbouncer`: `DATABASE_URL` is PgBouncer in transaction mode "
        "(see [Running at scale](scale.md))",
        SERVER,
        choices=("", "pgbouncer"),
    )
    listen_database_url: str | None = setting(
        None,
        "direct PostgreSQL connection for LISTEN and the schema at boot (never a pooler)",
        SERVER,
        shown="`DATABASE_URL`",
    )
    db_link_timeout_s: float = setting(
        30.0,
        "a silent database link is declared dead after this (TCP user timeout, keepalives, "
        "connect timeout)",
        SERVER,
        above=0,
    )
    db_retry_budget_s: float = setting(
        5.0,
        "how long a request's statement is retried through a database blip (connection lost or "
        "refused, a restart, a failover) before the request answers 503 `database_unavailable`; "
        "a runner's writes and renewals are retried until its lease would expire instead",
        SERVER,
        at_least=0,
    )
    cluster_backend: str = setting(
        "sandbox",
        "`sandbox` (local stand-in) or `kubernetes` (see [Real cluster](#real-cluster))",
        SERVER,
        choices=("sandbox", "kubernetes"),
    )
    template_catalog_dir: Path = setting(
        PROJECT_ROOT / "catalog", "the template catalog: a directory of template YAML files", SERVER
    )
    lease_ttl_s: float = setting(
        60.0, "lease length; a lease not renewed in time is lost", SERVER, above=0
    )
    lease_renew_interval_s: float = setting(
        20.0,
        "one renewal statement per process per tick",
        SERVER,
        above=0,
        below="lease_ttl_s",
    )
    reaper_interval_s: float = setting(30.0, "reaper sweep cadence", SERVER, above=0)
    cancel_ack_deadline_s: float = setting(
        90.0, "a cancel not acknowledged by then is forced to `cancelled`", SERVER, above=0
    )
    queued_start_deadline_s: float = setting(
        120.0, "a task still `queued` by then fails as never started", SERVER, above=0
    )
    max_run_s: float = setting(
        1800.0, "a run longer than this (since its last claim) fails as timed out", SERVER, above=0
    )
    readiness_timeout_s: float = setting(
        600.0,
        "readiness wait before `failed: readiness_timeout` (resources kept)",
        SERVER,
        above=0,
    )
    readiness_poll_s: float = setting(
        2.0, "readiness poll interval", SERVER, above=0, below="readiness_timeout_s"
    )
    readiness_fail_fast: str = setting(
        ",".join(FAIL_FAST_DEFAULT),
        "why-not-ready causes that fail a run at once instead of after the readiness timeout "
        "(comma-separated codes; empty: none; see [Troubleshooting](#troubleshooting))",
        SERVER,
    )
    stream_keepalive_s: float = setting(
        15.0,
        "silence after which every live stream (project SSE, gateway SSE, timeline websocket) "
        "sends a keepalive",
        SERVER,
        above=0,
    )
    drain_wait_s: float = setting(
        20.0,
        "how long a stopping process (SIGTERM) lets its runs in flight go on, their leases "
        "renewed and their cancels honoured, before it aborts what still runs as `failed: "
        "interrupted` (0: at once; see [Draining](operating.md#draining))",
        SERVER,
        at_least=0,
        below="graceful_timeout",
        plus="shutdown_grace_s",
    )
    shutdown_grace_s: float = setting(
        3.0,
        "how long the drain waits for aborted runners before failing their leases",
        SERVER,
        at_least=0,
        below="graceful_timeout",
    )
    retention_days: float = setting(
        30.0, "finished tasks are purged after this many days", SERVER, at_least=1
    )
    purge_batch: int = setting(
        300,
        "finished tasks one purge pass deletes at most "
        "(see [Cleanup and retention](operating.md#cleanup-and-retention))",
        SERVER,
        at_least=1,
    )
    cleanup_interval_s: float = setting(
        5.0,
        "how often the cleanup worker looks for due jobs (it goes on at once while it finds work)",
        SERVER,
        above=0,
    )
    devbox_pause_grace_s: float = setting(
        60.0,
        "how long after a task ends the reaper leaves its devbox to the task's own runner before "
        "enqueueing the pause (a dead host's runs: any live host pauses them)",
        SERVER,
        at_least=0,
    )
    cleanup_attempt_timeout_s: float = setting(
        300.0,
        "a claimed cleanup attempt not finished by then is abandoned and claimable again",
        SERVER,
        above=0,
    )
    runtime_stop_timeout_s: float = setting(
        5.0,
        "graceful window between SIGTERM and SIGKILL when a local process group is stopped",
        SERVER,
        above=0,
    )
    web_concurrency: int = setting(2, "gunicorn workers", SERVER, at_least=1)
    worker_connections: int = setting(
        2000, "open connections one gunicorn worker serves at once", SERVER, at_least=1
    )
    graceful_timeout: int = setting(
        35,
        "gunicorn graceful timeout (seconds): a stopping worker is killed after it, so keep it "
        "above `DRAIN_WAIT_S + SHUTDOWN_GRACE_S + RUNTIME_STOP_TIMEOUT_S + 4` and below "
        "Kubernetes' `terminationGracePeriodSeconds` minus the `preStop` pause",
        SERVER,
        at_least=1,
    )
