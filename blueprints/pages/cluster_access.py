"""Cluster access from the browser: check a kubeconfig the page holds, by the API's own checks,
then by asking the cluster itself.

The page keeps the kubeconfig in its tab's sessionStorage only and sends it as X-Kubeconfig on the
requests that start or resume a run (deploy, redeploy, input). This route lets the "Cluster
access" dialog check it first: which cluster and context it names, and (read-only, through the
same address guard as a run) whether the cluster answers, who the credential is and what it may
not do in the project's namespace. Nothing is stored: the header is parsed in memory and only
names and verdicts (never credentials) are answered.

The page's route checks its CSRF token; the same check is in the JSON API
(`POST /api/v1/cluster-access/check`, guarded like every API write, and in its document). The
body is validated as every body is (schemas.AccessCheck): a project id that is no project id is
a 400 before the cluster is asked (a lone surrogate reached the cluster request and answered
500), while any kubeconfig at all gets a verdict, since judging it is what the check is for.
"""

import gevent
from flask import Blueprint, current_app, jsonify, request

from blueprints import schemas
from blueprints.auth import csrf
from blueprints.request_helpers import json_body, kubeconfig_from_header, load
from engine.abort import Aborted, AbortSignal
from engine.errors import DomainError, InvalidRequest
from engine.integrations.kube.access import check_access
from engine.lifecycle import kubeconfigs

#: How long the check may ask the cluster before it answers "no answer" (a person waits).
ACCESS_CHECK_TIMEOUT_S = 20.0
ACCESS_CHECK_ABORT = "access check timed out"

bp = Blueprint("cluster_access", __name__)
csrf.protect(bp)
#: The same check for API clients (the JSON API's cross-site refusal guards it: no CSRF token).
api = Blueprint("cluster_access_api", __name__, url_prefix="/api/v1")


@bp.post("/cluster-access/check")
def check():
    """The verdict on X-Kubeconfig (see verdict())."""
    return verdict()


@api.post("/cluster-access/check")
def check_by_api():
    """The verdict on X-Kubeconfig (see verdict())."""
    return verdict()


def verdict():
    """{ok: true, context, cluster, server, namespace, access}, or {ok: false, code, message}
    for a kubeconfig that is missing or unusable (200 either way: the check itself went
    through). `access` is the cluster's own answer for the namespace of the body's projectId
    (kube/access.py). A body that is not an AccessCheck is refused first (4xx, like any body)."""
    project = load(schemas.AccessCheck, json_body()).get("projectId") if has_body() else None
    try:
        kubeconfig = kubeconfig_from_header()
        if kubeconfig is None:
            raise InvalidRequest("paste or upload a kubeconfig first")
        names = kubeconfigs.describe(kubeconfig)
        access = ask_cluster(kubeconfig, project or names["namespace"] or "default")
        return jsonify({"ok": True, **names, "access": access})
    except DomainError as exc:
        return jsonify({"ok": False, "code": exc.code, "message": exc.message})


def has_body() -> bool:
    """Whether the request carries a body, sized or chunked (its size is checked at the edge)."""
    return bool(request.get_data(cache=True))


def ask_cluster(kubeconfig: dict, namespace: str) -> dict | None:
    """The cluster's answer (kube/access.py check_access), bounded in time; None for a target that
    is not a real cluster (the sandbox needs no access)."""
    cluster = current_app.extensions["engine"].integrations.cluster(kubeconfig)
    if not hasattr(cluster, "server_version"):
        return None
    abort = AbortSignal()
    timer = gevent.spawn_later(ACCESS_CHECK_TIMEOUT_S, abort.abort, ACCESS_CHECK_ABORT)
    try:
        return check_access(cluster, namespace, abort=abort)
    except Aborted:
        return {
            "reachable": False,
            "namespace": namespace,
            "missing": [],
            "problems": [
                f"The cluster did not answer within {ACCESS_CHECK_TIMEOUT_S:g} s: check the "
                "kubeconfig's server address and that this server can reach it."
            ],
        }
    finally:
        timer.kill()
        cluster.close()
