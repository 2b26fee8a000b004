"""A request's kubeconfig, as the engine judges it before any task exists: whether a request
that starts or resumes a run must bring one, whether a run could use it, and what it names (the
cluster access dialog). Every read of a kubeconfig's fields is
engine/integrations/kube/kubeconfig.py's; where its server may be reached, kube/network.py's.
"""

from engine.integrations.kube import kubeconfig
from engine.integrations.kube.network import check_kubeconfig
from engine.process import EngineRuntime


def required(runtime: EngineRuntime) -> bool:
    """Whether runs reach real clusters with the caller's own credentials
    (CLUSTER_BACKEND=kubernetes): then every request that starts or resumes one brings a
    kubeconfig."""
    return runtime.cluster_network is not None


def check(runtime: EngineRuntime, document: dict) -> None:
    """Where runs reach real clusters, InvalidKubeconfig naming the field of a kubeconfig no run
    could use: its server's addresses are checked against the operator's networks and its TLS
    material loaded, with no connection opened (and again when a run builds its cluster)."""
    if runtime.cluster_network is not None:
        check_kubeconfig(document, runtime.cluster_network)


def describe(document: dict) -> dict:
    """{context, cluster, server, namespace}: what a kubeconfig names, for a person (never a
    credential; any shape of document gets an answer)."""
    return kubeconfig.names(document)
