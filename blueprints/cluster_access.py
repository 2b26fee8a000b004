"""Cluster access from the browser: check a kubeconfig the page holds, by the API's own checks.

The page keeps the kubeconfig in its tab's sessionStorage only and sends it as X-Kubeconfig on the
requests that start or resume a run (deploy, redeploy, input). This route lets the "Cluster
access" dialog check it first and show which cluster and context it names. Nothing is stored:
the header is parsed in memory and only names (never credentials) are answered.
"""

from urllib.parse import urlsplit

from flask import Blueprint, jsonify

from blueprints import csrf
from blueprints.request_helpers import kubeconfig_from_header
from engine.core.errors import DomainError, InvalidRequest

bp = Blueprint("cluster_access", __name__)
csrf.protect(bp)


@bp.post("/cluster-access/check")
def check():
    """The verdict on X-Kubeconfig: {ok: true, context, cluster, server, namespace}, or {ok: false,
    code, message} (200 either way: the check itself went through)."""
    try:
        kubeconfig = kubeconfig_from_header()
        if kubeconfig is None:
            raise InvalidRequest("paste or upload a kubeconfig first")
        return jsonify({"ok": True, **describe(kubeconfig)})
    except DomainError as exc:
        return jsonify({"ok": False, "code": exc.code, "message": exc.message})


def describe(kubeconfig: dict) -> dict:
    """The names the page shows: current context, its cluster, and the server's host."""
    contexts = kubeconfig.get("contexts") or []
    name = kubeconfig.get("current-context")
    if not name and len(contexts) == 1 and isinstance(contexts[0], dict):
        name = contexts[0].get("name")
    context = next(
        (c.get("context") or {} for c in contexts if isinstance(c, dict) and c.get("name") == name),
        {},
    )
    cluster_name = context.get("cluster") if isinstance(context, dict) else None
    cluster = next(
        (
            c.get("cluster") or {}
            for c in kubeconfig.get("clusters") or []
            if isinstance(c, dict) and c.get("name") == cluster_name
        ),
        {},
    )
    server = cluster.get("server") if isinstance(cluster, dict) else None
    return {
        "context": str(name or ""),
        "cluster": str(cluster_name or ""),
        "server": urlsplit(server).netloc if isinstance(server, str) else "",
        "namespace": str(context.get("namespace") or "") if isinstance(context, dict) else "",
    }
