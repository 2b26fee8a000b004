"""Every setting, defined once: its name, type, default, allowed range and one-line doc.

Each `Settings` field is read from the environment variable of its name in upper case
(`lease_ttl_s` from LEASE_TTL_S), checked against its range at boot, and listed in
docs/configuration.md's settings tables, which are generated from these definitions (`python -m
engine.operations.settings_readme` rewrites them; tests/unit/test_config.py keeps them equal). What
a setting is (its rule, `setting()`, its Definition) is setting_rules.py's.

Adding a setting is one statement in `Settings`, e.g.

    stream_keepalive_s: float = setting(15.0, "a stream's comment line cadence", SERVER, above=0)

then run the command above to put its row into docs/configuration.md. A field declared without
setting() stops the import: it would never be read from the environment or checked.
"""

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from engine.integrations.base import ENGINE_NAME
from engine.integrations.kube.diagnosis import CAUSES, FAIL_FAST_DEFAULT
from engine.operations.setting_rules import (
    AI,
    AUTH,
    CLUSTER,
    OPERATING,
    PROJECT_ROOT,
    SANDBOX,
    SERVER,
    ConfigurationError,
    Definition,
    definitions_of,
    setting,
    shown,
)

KIB, MIB = 1024, 1024 * 1024


@dataclass(frozen=True)
class Settings:
    """The server's settings (see the module docstring for how they are read and checked)."""

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
        15,
        "gunicorn graceful timeout (seconds); keep it below Kubernetes' "
        "`terminationGracePeriodSeconds`",
        SERVER,
        at_least=1,
    )

    # -- the sandbox cluster (docs/configuration.md "Sandbox") --------------------------------
    sandbox_apply_delay_s: float = setting(
        0.2, "latency of each document's apply", SANDBOX, at_least=0
    )
    sandbox_ready_delay_s: float = setting(
        1.0, "time from apply until a workload is ready", SANDBOX, at_least=0
    )
    sandbox_never_ready: bool = setting(
        False, "workloads never become ready (readiness timeout)", SANDBOX
    )
    sandbox_apply_error: str = setting(
        "", "apply of this kind fails (`Service`, `Deployment`, ... or `all`)", SANDBOX
    )

    # -- devbox and gateway (docs/configuration.md "Devbox and gateway") ----------------------
    devbox_url: str | None = setting(None, "devbox API base URL; unset: the sandbox devbox", AI)
    devbox_signing_key: str | None = setting(
        None,
        "HS256 key for the devbox JWTs, at least 32 bytes (required with `DEVBOX_URL`)",
        AI,
        secret=True,
    )
    devbox_timeout_s: float = setting(
        30.0, "connect and read timeout of one devbox call", AI, above=0
    )
    devbox_exec_timeout_s: float = setting(
        300.0, "longest command run inside a devbox", AI, above=0
    )
    gateway_url: str | None = setting(
        None, "chat-completions base URL; unset: the sandbox gateway", AI
    )
    gateway_model: str | None = setting(None, "model name (required with `GATEWAY_URL`)", AI)
    gateway_api_key: str | None = setting(
        None, "bearer key for the gateway, if it needs one", AI, secret=True
    )
    gateway_retries: int = setting(
        2, "attempts after the first, before the first byte only", AI, at_least=0
    )
    gateway_connect_timeout_s: float = setting(5.0, "connect timeout of a turn", AI, above=0)
    gateway_idle_timeout_s: float = setting(
        120.0,
        "longest silence tolerated while waiting for or reading an answer",
        AI,
        above=0,
    )
    devbox_answer_max_bytes: int = setting(
        MIB,
        "most bytes of one devbox answer after decompression",
        AI,
        at_least=64 * KIB,
        shown="`1048576` (1 MiB)",
    )
    devbox_answer_max_s: float = setting(
        60.0, "most seconds one devbox call may take (an exec: beyond its command's)", AI, above=0
    )
    gateway_event_max_bytes: int = setting(
        MIB,
        "most bytes of one streamed event of a turn (or an error answer)",
        AI,
        at_least=KIB,
        shown="`1048576` (1 MiB)",
    )
    gateway_answer_max_bytes: int = setting(
        16 * MIB,
        "most bytes of one turn's whole stream",
        AI,
        at_least=64 * KIB,
        shown="`16777216` (16 MiB)",
    )
    gateway_answer_max_s: float = setting(600.0, "most seconds one turn may take", AI, above=0)
    sandbox_gateway_delay_s: float = setting(
        0.02, "the sandbox gateway's delay per streamed piece", AI, at_least=0
    )

    # -- the Kubernetes backend (docs/configuration.md "Real cluster") ------------------------
    kube_field_manager: str = setting(
        ENGINE_NAME, "server-side apply field manager (and User-Agent)", CLUSTER
    )
    kube_request_timeout_s: float = setting(
        30.0,
        "read timeout of one API call attempt (connect: at most 10 s)",
        CLUSTER,
        above=0,
    )
    kube_max_retries: int = setting(
        4, "attempts after the first on 429, 5xx and connection errors", CLUSTER, at_least=0
    )
    kube_retry_backoff_s: float = setting(
        0.5,
        "first backoff step (doubles with jitter, at most 8 s; `Retry-After` wins, at most 60 s)",
        CLUSTER,
        above=0,
    )
    kube_answer_max_bytes: int = setting(
        2 * MIB,
        "most bytes of one API answer after decompression; a larger one fails the call "
        "(`upstream_answer_too_large`)",
        CLUSTER,
        at_least=64 * KIB,
        shown="`2097152` (2 MiB)",
    )
    kube_log_max_bytes: int = setting(
        64 * KIB,
        "most bytes of a container log read for a diagnosis",
        CLUSTER,
        at_least=16 * KIB,
        shown="`65536` (64 KiB)",
    )
    kube_answer_max_s: float = setting(
        60.0, "most seconds one API call attempt may take, request to last byte", CLUSTER, above=0
    )
    kube_allowed_networks: str = setting(
        "",
        "comma-separated CIDRs a kubeconfig `server` may resolve into although not publicly "
        "routable (loopback, private, link-local, CGNAT, unique-local); "
        "see [Security model](security.md)",
        CLUSTER,
    )
    kube_allow_http: bool = setting(
        False, "accept `http://` cluster servers (tests and labs only)", CLUSTER
    )

    # -- authentication (docs/configuration.md "Authentication") ------------------------------
    auth_mode: str = setting(
        "dev",
        "`dev`: one local user in workspace `default` (loopback only); `oidc`: real users",
        AUTH,
        choices=("dev", "oidc"),
    )
    dev_auth_allow_network: bool = setting(
        False,
        "lets `dev` mode serve a non-loopback `HOST` (everyone who can reach it is the dev user)",
        AUTH,
    )
    oidc_issuer: str | None = setting(
        None,
        "exact issuer URL (required with `oidc`); `<issuer>/.well-known/openid-configuration` is "
        "read at boot and must name this very issuer. https only (http for loopback hosts)",
        AUTH,
    )
    oidc_client_id: str | None = setting(
        None,
        "the browser sign-in's client (required with `oidc`; register "
        "`https://<site>/auth/callback` as its redirect URI)",
        AUTH,
    )
    oidc_client_secret: str | None = setting(None, "that client's secret", AUTH, secret=True)
    oidc_audience: str | None = setting(
        None, "what a bearer token's `aud` must contain", AUTH, shown="the client id"
    )
    oidc_answer_max_bytes: int = setting(
        256 * KIB,
        "most bytes of one answer of the issuer (discovery, key set, token) after decompression",
        AUTH,
        at_least=16 * KIB,
        shown="`262144` (256 KiB)",
    )
    oidc_answer_max_s: float = setting(
        10.0, "most seconds one request to the issuer may take", AUTH, above=0
    )
    tenant_claim: str = setting(
        "namespace",
        "signed claim with the user's workspaces: a string or a list (names "
        "`[A-Za-z0-9][A-Za-z0-9._-]{0,62}`); the default is the identity provider's claim name",
        AUTH,
    )
    user_claim: str = setting(
        "sub",
        "signed claim naming the user (shown as `preferred_username` or `email` when present)",
        AUTH,
    )
    secret_key: str | None = setting(
        None,
        "signs the session cookie; the same on every host (required with `oidc`; `dev` keeps "
        "one under `DATA_DIR`)",
        AUTH,
        secret=True,
    )
    session_lifetime_s: float = setting(
        8 * 3600.0,
        "a browser sign-in ends this long after it began, however active",
        AUTH,
        above=0,
    )
    session_recheck_s: float = setting(
        30.0,
        "how often a long-lived stream (SSE, websocket) of a browser session re-checks that the "
        "session was not signed out and has not expired; it closes once it has",
        AUTH,
        above=0,
    )
    mcp_session_idle_s: float = setting(
        3600.0,
        "an MCP session (`Mcp-Session-Id`, the handshake revisions) ends after this long "
        "without a request; a client's DELETE ends it at once",
        AUTH,
        above=0,
    )

    # -- operating (docs/configuration.md "Operating") ----------------------------------------
    metrics_token: str | None = setting(
        None, "set: `GET /metrics` needs `Authorization: Bearer <token>`", OPERATING, secret=True
    )
    metrics_port: int = setting(
        0,
        "non-zero: `/metrics` answers only on this second listener, not on `PORT`",
        OPERATING,
        at_least=0,
        at_most=65535,
    )
    admin_users: str = setting(
        "",
        "comma-separated users who may see the operator pages and API when `AUTH_MODE` is not "
        "`dev`",
        OPERATING,
    )
    ready_probe_db_timeout_s: float = setting(
        2.0,
        "how long `/readyz` waits for a database connection before it answers 503",
        OPERATING,
        above=0,
    )
    log_format: str = setting(
        "text",
        "`json`: one JSON object per line (see [Logs](operating.md#logs))",
        OPERATING,
        choices=("text", "json"),
    )
    log_level: str = setting(
        "INFO",
        "the lowest level logged",
        OPERATING,
        choices=("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"),
    )
    access_log: str = setting(
        "", "under gunicorn, `-`: one access line per request to standard output", OPERATING
    )
    prometheus_multiproc_dir: str = setting(
        "",
        "where gunicorn's workers keep their metrics (emptied when the master starts)",
        OPERATING,
        shown="a fresh temporary directory",
    )

    #: Extra objects (fakes for tests) by name; never from the environment.
    overrides: dict = field(default_factory=dict, compare=False)

    @property
    def fail_fast_causes(self) -> frozenset[str]:
        """READINESS_FAIL_FAST as a set; ValueError naming a code that is not a cause."""
        causes = frozenset(c.strip() for c in self.readiness_fail_fast.split(",") if c.strip())
        unknown = sorted(causes - set(CAUSES))
        if unknown:
            raise ValueError(
                f"READINESS_FAIL_FAST: {', '.join(unknown)} not among {', '.join(CAUSES)}"
            )
        return causes

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from the environment, checked (ConfigurationError naming every bad
        variable), then explicit overrides (tests; not checked, so a test may switch a loop off
        with an interval no operator should use)."""
        values, problems = {}, []
        for name in DEFINITIONS:
            try:
                values[name] = read(name)
            except ConfigurationError as exc:
                problems.append(str(exc))
        if not problems:
            problems = cls(**values).problems()
        if problems:
            raise ConfigurationError("; ".join(problems))
        return replace(cls(**values), **overrides)

    def problems(self) -> list[str]:
        """What is out of range, one sentence per variable naming the range."""
        found = []
        for name, definition in DEFINITIONS.items():
            value, rule = getattr(self, name), definition.rule
            if not definition.allows(value) or (
                rule.below is not None and not value < getattr(self, rule.below)
            ):
                found.append(
                    f"{definition.variable}={shown(value)} is out of range "
                    f"(allowed: {definition.allowed()})"
                )
        try:
            _ = self.fail_fast_causes
        except ValueError as exc:
            found.append(str(exc))
        return found


#: Every setting by field name, in the order Settings declares them.
DEFINITIONS: dict[str, Definition] = definitions_of(Settings)


def read(name: str, environ=None):
    """One setting's value from the environment (its default when unset or empty), checked on
    its own (Settings.problems() adds the checks between settings); ConfigurationError."""
    definition = DEFINITIONS[name]
    raw = (os.environ if environ is None else environ).get(definition.variable)
    if raw is None or raw == "":
        return definition.default
    value = definition.parse(raw)
    if not definition.allows(value):
        raise ConfigurationError(
            f"{definition.variable}={shown(value)} is out of range "
            f"(allowed: {definition.allowed()})"
        )
    return value
