"""Where deployments go and what runs talk to: the sandbox cluster, the devbox API and the
gateway, the Kubernetes backend (docs/configuration.md "Sandbox", "Devbox and gateway", "Real
cluster"). Part of Settings (engine/operations/config.py)."""

from dataclasses import dataclass

from engine.integrations.base import ENGINE_NAME
from engine.operations.setting_rules import AI, CLUSTER, KIB, MIB, SANDBOX, setting


@dataclass(frozen=True)
class TargetSettings:
    """The sandbox cluster, devbox and gateway, and the Kubernetes backend."""

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
