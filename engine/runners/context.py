"""What a runner is handed: its TaskHandle (the only way to its task) and a RunContext (all in
memory; nothing here is persisted). The handle is a protocol here because runners import no
storage; engine/core/handle.py implements it, every write fenced on the lease."""

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from engine.abort import AbortSignal
from engine.core.status import Status
from engine.integrations.base import Cluster
from engine.integrations.kube.diagnosis import FAIL_FAST_DEFAULT

if TYPE_CHECKING:
    from engine.integrations import Integrations
    from engine.trust.secrets import StreamScrubber


class LocalProcess(Protocol):
    """A process group a runner started through its handle."""

    @property
    def pid(self) -> int: ...

    def wait(self, abort: AbortSignal) -> int:
        """The leader's exit code; on an abort the group is stopped and Aborted raised."""

    def stop(self) -> bool:
        """Stop the whole group and release its runtime row; whether the stop was confirmed."""


class TaskHandle(Protocol):
    """What a runner may do to its task while it holds the lease (engine/core/handle.py). Every
    write is fenced and doubles as a checkpoint: LeaseLost when the lease is gone, Aborted when a
    cancel is pending; call `checkpoint()` only where no write came just before (after a wait)."""

    task_id: UUID
    abort: AbortSignal
    #: The terminal or parked status this run reached through the handle, if any.
    outcome: Status | None

    def add_secret_values(self, values) -> None: ...
    def stream_scrubber(self) -> "StreamScrubber": ...
    def publish(self, kind: str, payload: dict) -> None: ...
    def checkpoint(self) -> None: ...
    def emit_event(self, kind: str, payload: dict | None = None) -> None: ...
    def update_timeline(
        self,
        step: str,
        state: str,
        detail: str | None = None,
        *,
        artifacts: dict | None = None,
        phase: str | None = None,
        **extra,
    ) -> None: ...
    def step(self, step: str, state: str, detail: str | None = None, **extra) -> dict: ...
    def record_steps(
        self, steps: list[dict], *, artifacts: dict | None = None, phase: str | None = None
    ) -> None: ...
    def set_state(
        self,
        *,
        status: Status | None = None,
        phase: str | None = None,
        steps: list[dict] = (),
        artifacts: dict | None = None,
    ) -> None: ...
    def set_artifacts(self, **patch) -> None: ...
    def strip_source_keys(self, field: str, names: list[str]) -> None: ...
    def start_local_process(
        self,
        argv: list[str],
        *,
        label: str | None = None,
        resume: dict | None = None,
        **popen_kwargs,
    ) -> LocalProcess: ...
    def record_devbox(self, devbox_id: str) -> None: ...
    def devbox_paused(self, devbox_id: str) -> None: ...
    def request_inputs(self, inputs: list[dict], message: str | None = None) -> None: ...
    def complete(self, steps: list[dict] = ()) -> None: ...
    def fail(self, reason: str, message: str) -> None: ...
    def acknowledge_cancel(self) -> None: ...


@dataclass
class RunContext:
    task_id: UUID
    project_id: str
    #: The persisted (secret-stripped) source.
    source: dict
    #: Submitted values, including secrets, for this run only.
    inputs: dict = field(default_factory=dict)
    #: Names recorded as sensitive on the task (values must come from `inputs`).
    sensitive_keys: list[str] = field(default_factory=list)
    #: resultIdentities recorded on the row (copied from a predecessor on a clone).
    result_identities: dict = field(default_factory=dict)
    cluster: Cluster | None = None
    #: The whole integrations boundary (devbox, gateway, templates), for runners that need more.
    integrations: "Integrations | None" = None
    #: The Kubernetes namespace the resources go to.
    target_namespace: str = "default"
    readiness_timeout_s: float = 600.0
    readiness_poll_s: float = 2.0
    #: Why-not-ready causes that end the run at once (waiting cannot heal them).
    fail_fast_causes: frozenset = frozenset(FAIL_FAST_DEFAULT)
    #: The artifact summary as claimed (e.g. aiSession, pendingInputs, for a resumed run).
    artifacts: dict = field(default_factory=dict)
    #: The tenant (the workspace); server devbox tokens are scoped to it.
    workspace: str = "default"


def resources(count: int) -> str:
    """A count of resources as a timeline line says it: "1 resource", "3 resources"."""
    return f"{count} resource" if count == 1 else f"{count} resources"
