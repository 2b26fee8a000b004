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
    """The names the page shows: current context, its cluster, and the server's host.

    In the sandbox nothing else has checked the document, so every level may be any shape; a
    level of the wrong shape shows as no name.
    """
    contexts = _list(kubeconfig.get("contexts"))
    name = kubeconfig.get("current-context")
    if not name and len(contexts) == 1 and isinstance(contexts[0], dict):
        name = contexts[0].get("name")
    context = _mapping(_named(contexts, name).get("context"))
    cluster_name = context.get("cluster")
    cluster = _mapping(_named(_list(kubeconfig.get("clusters")), cluster_name).get("cluster"))
    return {
        "context": _text(name),
        "cluster": _text(cluster_name),
        "server": _netloc(cluster.get("server")),
        "namespace": _text(context.get("namespace")),
    }


def _list(value) -> list:
    return value if isinstance(value, list) else []


def _mapping(value) -> dict:
    return value if isinstance(value, dict) else {}


def _named(entries: list, name) -> dict:
    return next((e for e in entries if isinstance(e, dict) and e.get("name") == name), {})


def _text(value) -> str:
    return value if isinstance(value, str) else ""


def _netloc(server) -> str:
    try:
        return urlsplit(server).netloc if isinstance(server, str) else ""
    except ValueError:  # an unclosed IPv6 bracket
        return ""
