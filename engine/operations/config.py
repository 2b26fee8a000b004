"""Configuration from environment variables (documented in README.md)."""

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from engine.integrations.base import ENGINE_NAME

PROJECT_ROOT = Path(__file__).resolve().parents[2]


def _env(name: str, default, cast):
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    if cast is bool:
        return raw.strip().lower() in {"1", "true", "yes", "on"}
    return cast(raw)


@dataclass(frozen=True)
class Settings:
    host: str = "127.0.0.1"
    port: int = 8000
    #: Host names this server answers to (comma-separated); empty: 127.0.0.1, localhost, ::1, HOST.
    trusted_hosts: str = ""
    #: Where users reach the site (e.g. https://deploy.example.com): the websocket Origin and
    #: unsafe API requests must come from it; https makes the session cookie Secure. Empty:
    #: http://<trusted host>:PORT.
    public_origin: str = ""
    #: Unset: a private embedded PostgreSQL under data_dir.
    database_url: str | None = None
    data_dir: Path = PROJECT_ROOT / "instance"
    db_pool_size: int = 20
    #: How many of a process's pool connections its runners may use at once (0: half the pool).
    #: The rest stay free for requests, so a create never queues behind a burst of runner writes.
    runner_db_slots: int = 0
    #: How often a process announces the tasks its runners wrote to (engine/core/notices.py): the
    #: most a viewer waits to see a runner's write, and one statement per tick.
    runner_notice_interval_s: float = 0.05
    #: Where LISTEN (and the schema at boot) connects: straight to PostgreSQL, never through a
    #: transaction pooler. Unset: database_url.
    listen_database_url: str | None = None
    #: "pgbouncer": database_url is a transaction-mode pooler (no server-side prepared statements).
    db_pooler: str = ""
    #: How long a silent database link is trusted before its connections count as dead (TCP user
    #: timeout, keepalives, connect timeout): a vanished primary or a cut network is noticed.
    db_link_timeout_s: float = 30.0
    # Authentication (README "Authentication").
    #: "dev": one local user in namespace "default" (loopback only); "oidc": real users.
    auth_mode: str = "dev"
    #: Lets `dev` mode serve a non-loopback HOST (everyone who can reach it is the dev user).
    dev_auth_allow_network: bool = False
    #: Exact issuer URL; discovery at <issuer>/.well-known/openid-configuration.
    oidc_issuer: str | None = None
    oidc_client_id: str | None = None
    oidc_client_secret: str | None = field(default=None, repr=False)
    #: The `aud` bearer tokens must contain; unset: the client id.
    oidc_audience: str | None = None
    #: Signed claim listing the workspaces a user may use (a string or a list of strings).
    tenant_claim: str = "namespace"
    #: Signed claim naming the user.
    user_claim: str = "sub"
    #: Signs the session cookie (required in oidc mode; dev mode keeps one under data_dir).
    secret_key: str | None = field(default=None, repr=False)
    #: Absolute lifetime of a browser sign-in, however active the session is.
    session_lifetime_s: float = 8 * 3600.0
    #: "sandbox" (local stand-in, the zero-setup default) or "kubernetes".
    cluster_backend: str = "sandbox"
    #: The template catalog: a directory of template YAML files (README "Templates").
    template_catalog_dir: Path = PROJECT_ROOT / "catalog"
    # Cadences (seed 000 constants). Every one is tunable so tests and operators can shorten them.
    lease_ttl_s: float = 60.0
    lease_renew_interval_s: float = 20.0
    reaper_interval_s: float = 30.0
    cancel_ack_deadline_s: float = 90.0
    queued_start_deadline_s: float = 120.0
    max_run_s: float = 1800.0
    readiness_timeout_s: float = 600.0
    readiness_poll_s: float = 2.0
    #: How long the shutdown drain waits for aborted runners before failing their leases.
    shutdown_grace_s: float = 3.0
    retention_days: float = 30.0
    # Cleanup (seed 001; README "Cleanup and retention").
    #: How often the cleanup worker looks for due jobs (it loops at once while batches are full).
    cleanup_interval_s: float = 5.0
    #: A finished task's runner pauses its own devbox; the reaper enqueues the pause after this.
    devbox_pause_grace_s: float = 60.0
    #: Finished tasks past retention one reaper sweep enqueues, and one worker pass purges.
    purge_batch: int = 300
    #: Graceful window between SIGTERM and SIGKILL when stopping a local process group.
    runtime_stop_timeout_s: float = 5.0
    #: A claimed cleanup attempt not finished by then counts as abandoned (claimable again).
    cleanup_attempt_timeout_s: float = 300.0
    # Sandbox cluster behaviour (see README "Sandbox").
    sandbox_apply_delay_s: float = 0.2
    sandbox_ready_delay_s: float = 1.0
    sandbox_never_ready: bool = False
    sandbox_apply_error: str = ""
    #: Per-chunk delay of the sandbox gateway's streamed answer.
    sandbox_gateway_delay_s: float = 0.02
    # Devbox API (README "Devbox and gateway"); unset DEVBOX_URL: the sandbox devbox.
    devbox_url: str | None = None
    #: HS256 key the server signs its namespace-scoped devbox JWTs with (a secret: never logged).
    devbox_signing_key: str | None = field(default=None, repr=False)
    devbox_timeout_s: float = 30.0
    devbox_exec_timeout_s: float = 300.0
    # OpenAI-compatible chat-completions gateway; unset GATEWAY_URL: the sandbox gateway.
    gateway_url: str | None = None
    gateway_model: str | None = None
    gateway_api_key: str | None = field(default=None, repr=False)
    #: Attempts after the first, only before the first byte of an answer.
    gateway_retries: int = 2
    gateway_connect_timeout_s: float = 5.0
    #: Longest silence tolerated inside a streamed answer.
    gateway_idle_timeout_s: float = 120.0
    # Kubernetes backend (README "Real cluster"): used when cluster_backend is "kubernetes".
    kube_field_manager: str = ENGINE_NAME
    #: Per-attempt read timeout of one API call (connect: at most 10 s).
    kube_request_timeout_s: float = 30.0
    #: Attempts after the first, on 429, 5xx and connection errors.
    kube_max_retries: int = 4
    #: First backoff step between attempts (doubles, with jitter) unless Retry-After says.
    kube_retry_backoff_s: float = 0.5
    #: Comma-separated CIDRs a cluster server may be in although they are not publicly routable
    #: (loopback, private, link-local, ...). Empty: only public addresses (README "Security model").
    kube_allowed_networks: str = ""
    #: Allow `http://` cluster servers (credentials in clear on the wire): tests and labs only.
    kube_allow_http: bool = False
    # Operations (README "Operating").
    #: Set: GET /metrics requires `Authorization: Bearer <token>`.
    metrics_token: str | None = field(default=None, repr=False)
    #: Non-zero: /metrics is served only on this port (a second listener), not on PORT.
    metrics_port: int = 0
    #: Comma-separated users who may see the operator pages and API when AUTH_MODE is not dev.
    admin_users: str = ""
    #: How long /readyz waits for a database connection before it answers 503.
    ready_probe_db_timeout_s: float = 2.0
    #: How long a request's statement is retried through a database blip (connection lost or
    #: refused, a restart, a failover) before the request answers 503 database_unavailable. A
    #: runner's writes and renewals are retried until its lease would expire instead.
    db_retry_budget_s: float = 5.0
    #: Extra objects (fakes for tests) by name; never from the environment.
    overrides: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from the environment (each field's name in upper case, e.g. LEASE_TTL_S),
        then explicit overrides (tests)."""
        values = {}
        for f in fields(cls):
            if f.name == "overrides":
                continue
            if isinstance(f.default, bool):
                cast = bool
            elif isinstance(f.default, (int, float)):
                cast = type(f.default)
            elif isinstance(f.default, Path):
                cast = Path
            else:
                cast = str
            values[f.name] = _env(f.name.upper(), f.default, cast)
        return replace(cls(**values), **overrides)
