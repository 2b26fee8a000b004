"""Configuration from environment variables (documented in README.md)."""
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


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
    #: Unset: a private embedded PostgreSQL under data_dir.
    database_url: str | None = None
    data_dir: Path = PROJECT_ROOT / "instance"
    db_pool_size: int = 20
    #: "dev": one local user in namespace "default".
    auth_mode: str = "dev"
    #: "sandbox" (local stand-in, the zero-setup default) or "kubernetes".
    cluster_backend: str = "sandbox"
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
    # Sandbox cluster behaviour (see README "Sandbox").
    sandbox_apply_delay_s: float = 0.2
    sandbox_ready_delay_s: float = 1.0
    sandbox_never_ready: bool = False
    sandbox_apply_error: str = ""
    #: Extra objects (fakes for tests) by name; never from the environment.
    overrides: dict = field(default_factory=dict, compare=False)

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from the environment, then explicit overrides (tests)."""
        env_names = {
            "host": "HOST", "port": "PORT", "database_url": "DATABASE_URL", "data_dir": "DATA_DIR",
            "db_pool_size": "DB_POOL_SIZE", "auth_mode": "AUTH_MODE",
            "cluster_backend": "CLUSTER_BACKEND", "lease_ttl_s": "LEASE_TTL_S",
            "lease_renew_interval_s": "LEASE_RENEW_INTERVAL_S",
            "reaper_interval_s": "REAPER_INTERVAL_S",
            "cancel_ack_deadline_s": "CANCEL_ACK_DEADLINE_S",
            "queued_start_deadline_s": "QUEUED_START_DEADLINE_S", "max_run_s": "MAX_RUN_S",
            "readiness_timeout_s": "READINESS_TIMEOUT_S", "readiness_poll_s": "READINESS_POLL_S",
            "shutdown_grace_s": "SHUTDOWN_GRACE_S", "retention_days": "RETENTION_DAYS",
            "sandbox_apply_delay_s": "SANDBOX_APPLY_DELAY_S",
            "sandbox_ready_delay_s": "SANDBOX_READY_DELAY_S",
            "sandbox_never_ready": "SANDBOX_NEVER_READY",
            "sandbox_apply_error": "SANDBOX_APPLY_ERROR",
        }
        values = {}
        for f in fields(cls):
            if f.name not in env_names:
                continue
            cast = {int: int, float: float, bool: bool, Path: Path}.get(type(f.default), str)
            if f.name == "database_url":
                cast = str
            values[f.name] = _env(env_names[f.name], f.default, cast)
        return replace(cls(**values), **overrides)
