"""Whether a kubeconfig can deploy here, asked of the cluster before a deploy (read-only).

Reachable, its version (/version), who the credential is (SelfSubjectReview, where served), that
the target namespace exists, and a SelfSubjectAccessReview for each verb and resource the runners
use and each read the why-not-ready diagnosis makes. Nothing is created: the reviews are answered
and forgotten by the API server. The answer lists what is missing in plain words.
"""

from dataclasses import dataclass

from engine.abort import AbortSignal
from engine.integrations.base import (
    ClusterUnavailable,
    ClusterUnreachable,
    CredentialsRefused,
    IntegrationError,
)


@dataclass(frozen=True)
class Need:
    """One permission a deploy needs: RBAC's words, and what it is for."""

    verb: str
    resource: str
    group: str = ""
    subresource: str = ""
    why: str = "to deploy"

    def label(self) -> str:
        plural = f"{self.resource}/{self.subresource}" if self.subresource else self.resource
        return f"{plural}.{self.group}" if self.group else plural


#: Kinds the runners apply (image, database, template, prompt and GitHub sources).
APPLIED = (
    ("deployments", "apps"),
    ("statefulsets", "apps"),
    ("services", ""),
    ("secrets", ""),
    ("configmaps", ""),
    ("persistentvolumeclaims", ""),
    ("jobs", "batch"),
)
#: Server-side apply is a PATCH, and a create when the object is new.
NEEDS = (
    *(Need(verb, r, g) for r, g in APPLIED for verb in ("create", "patch")),
    *(Need("get", r, g, why="to wait for readiness") for r, g in APPLIED[:3] + APPLIED[-1:]),
    Need("list", "endpointslices", "discovery.k8s.io", why="to wait for a Service's endpoints"),
    Need("delete", "deployments", "apps", why="to clean up a failed template instance"),
    Need("list", "pods", why="to show why a workload is not ready"),
    Need("list", "events", why="to show why a workload is not ready"),
    Need("get", "pods", subresource="log", why="to show a crashing container's log"),
)


def check_access(cluster, namespace: str, *, abort: AbortSignal) -> dict:
    """{reachable, version, user, namespace, namespaceExists, missing, problems, cause} of a
    KubeCluster.

    `problems` are sentences a user acts on; empty means a deploy can go ahead. `cause` is the
    reason code of a call that failed (`cluster_unreachable`, `upstream_answer_too_large`, ...),
    else None."""
    report = {
        "reachable": False,
        "version": None,
        "user": None,
        "namespace": namespace,
        "namespaceExists": None,
        "missing": [],
        "problems": [],
        "cause": None,
    }
    try:
        report["version"] = cluster.server_version(abort=abort)
        report["reachable"] = True
        report["user"] = cluster.who_am_i(abort=abort)
        report["namespaceExists"] = cluster.namespace_exists(namespace, abort=abort)
        for need in NEEDS:
            if not cluster.can(
                need.verb,
                need.resource,
                group=need.group,
                subresource=need.subresource,
                namespace=namespace,
                abort=abort,
            ):
                report["missing"].append(
                    {
                        "verb": need.verb,
                        "resource": need.label(),
                        "namespace": namespace,
                        "why": need.why,
                    }
                )
    except (ClusterUnreachable, ClusterUnavailable) as exc:
        report["cause"] = exc.reason
        report["problems"].append(
            f"{_sentence(str(exc))} Check the kubeconfig's server address, "
            "that the cluster is up, and that this server can reach it."
        )
        return report
    except CredentialsRefused as exc:
        report["cause"] = exc.reason
        report["problems"].append(
            "The cluster does not accept this kubeconfig's credentials (token or client "
            "certificate): it may be expired or revoked."
        )
        return report
    except IntegrationError as exc:
        report["cause"] = exc.reason
        report["problems"].append(f"The cluster could not answer the check: {exc}.")
        return report
    if report["namespaceExists"] is False:
        report["problems"].append(
            f"Namespace {namespace} does not exist on the cluster: create it before deploying."
        )
    for missing in report["missing"]:
        report["problems"].append(
            f"Not allowed to {missing['verb']} {missing['resource']} in namespace {namespace} "
            f"(needed {missing['why']})."
        )
    return report


def _sentence(text: str) -> str:
    text = text.strip()
    return (text[:1].upper() + text[1:]).rstrip(".") + "."
