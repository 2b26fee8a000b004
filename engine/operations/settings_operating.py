"""Who gets in and how the service is watched: authentication, metrics, admins, logs and
probes (docs/configuration.md "Authentication", "Operating"). Part of Settings
(engine/operations/config.py)."""

from dataclasses import dataclass

from engine.operations.setting_rules import AUTH, KIB, OPERATING, setting


@dataclass(frozen=True)
class OperatingSettings:
    """Authentication, and what operators watch the service with."""

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
