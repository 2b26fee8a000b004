"""What a runner is handed besides its TaskHandle (all in memory; nothing here is persisted)."""
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

from engine.integrations.base import Cluster


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
    integrations: Any = None
    #: The Kubernetes namespace the resources go to.
    target_namespace: str = "default"
    readiness_timeout_s: float = 600.0
    readiness_poll_s: float = 2.0
    #: The artifact summary as claimed (e.g. aiSession, pendingInputs, for a resumed run).
    artifacts: dict = field(default_factory=dict)
    #: The tenant (workspace) namespace; server devbox tokens are scoped to it.
    namespace: str = "default"
