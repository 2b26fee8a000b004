"""The integrations boundary: stateless, abort-aware adapters. Tests inject fakes here."""

from collections.abc import Callable
from dataclasses import dataclass

from engine.integrations.base import Cluster, Devbox, Gateway
from engine.integrations.templates import Templates


@dataclass
class Integrations:
    """What the runners may talk to. `cluster` builds a Cluster from a request's kubeconfig."""

    cluster: Callable[[dict | None], Cluster]
    #: Shown wherever the target appears, e.g. "sandbox".
    cluster_label: str
    #: The devbox API (server credential only); None where no devbox is configured.
    devbox: Devbox | None = None
    #: The OpenAI-compatible gateway; None where none is configured.
    gateway: Gateway | None = None
    #: The template catalog.
    templates: Templates | None = None
