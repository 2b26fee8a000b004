"""A plain-language account of a task, built from its row and events (the explain tool)."""

import re

from engine.core.status import Status
from engine.readside import timeline
from engine.runners.kinds import KINDS

NEXT_STEPS = {
    "readiness_timeout": "Check the workload's pods (image pull, crash loop, probes); "
    "the resources were kept. Redeploy once the cause is fixed.",
    "interrupted": "The server running it stopped mid-run. Redeploy: it converges on the same "
    "resources.",
    "timeout": "The run exceeded its maximum duration. Redeploy, and check what it waited on.",
    "never_started": "The task was never started (the server failed right after accepting it). "
    "Redeploy it.",
    "apply_failed": "The cluster refused a resource; fix the source (edit & redeploy).",
    "unknown_kind": "The cluster does not serve one of the resource kinds; fix the source.",
    # The cluster and the credential (the source is fine: redeploy as it is once they are).
    "cluster_unreachable": "Check the kubeconfig's server address, that the cluster is up, and "
    "that this server's network reaches it (firewall, VPN, KUBE_ALLOWED_NETWORKS); then redeploy "
    "as it is.",
    "cluster_unavailable": "The cluster's API server kept failing; wait until it is healthy "
    "again, then redeploy as it is.",
    "cluster_unauthorized": "The kubeconfig's token or certificate is expired or revoked: set "
    "cluster access again with a fresh kubeconfig, then redeploy.",
    "cluster_forbidden": "Ask the cluster's administrator for the missing permission (Check in "
    "the cluster access dialog lists it), or use a kubeconfig that has it; then redeploy.",
    "namespace_not_found": "Create the namespace on the cluster (kubectl create namespace), or "
    "deploy into a project whose namespace exists.",
    "resource_conflict": "An object of that name belongs to someone else: rename yours (edit & "
    "redeploy) or remove the other one first.",
    "invalid_manifest": "Fix the named field (edit & redeploy).",
    "admission_denied": "A policy of the cluster refused it: change the source to satisfy the "
    "quoted rule (edit & redeploy), or ask the cluster's administrator.",
    "upstream_answer_malformed": "Check that the kubeconfig's server address is the cluster's "
    "API server (not a proxy or another service answering there); then redeploy as it is.",
    # Why a workload never became ready.
    "image_not_found": "Check the image name and tag (edit & redeploy); the resources were kept.",
    "invalid_image_name": "Fix the image reference (edit & redeploy); the resources were kept.",
    "image_pull_failed": "Check that the registry is reachable and the cluster may pull from "
    "it (imagePullSecrets); then redeploy.",
    "container_config_error": "Create what the container refers to (a Secret or ConfigMap "
    "key), or fix the reference (edit & redeploy).",
    "crash_loop": "The application exits at start: read its last log lines, fix its "
    "configuration or image, then redeploy.",
    "oom_killed": "Give the container more memory (a higher limit) or make it use less, then "
    "redeploy.",
    "unschedulable": "No node can run the pod: lower its requests, or ask for capacity; then "
    "redeploy.",
    "volume_unbound": "The volume claim never bound: check its storage class and that the "
    "cluster can provision volumes.",
    "readiness_probe_failed": "The container runs but its readiness probe fails: check the "
    "probe's path and port and the application's health.",
    # Cloning a GitHub repository.
    "repo_not_found": "Check the repository's owner/name (edit & redeploy).",
    "repo_no_access": "Use a public repository; this server clones without credentials.",
    "repo_ref_not_found": "Check the branch, tag or commit (edit & redeploy).",
    "clone_failed": "Check that the repository can be cloned, then redeploy.",
    # Any server it talks to (the cluster, the devbox API, the gateway).
    "upstream_answer_too_large": "Check what answers at that address: a server sent more, or "
    "took longer, than this server reads. If the answer is genuine, the operator can raise the "
    "setting the message names; then redeploy.",
}


#: The cause of a failure, in plain words (what the page shows first; the raw detail is a toggle).
CAUSES = {
    "readiness_timeout": "The workload never became ready in time.",
    "interrupted": "The server running this deployment stopped mid-run.",
    "timeout": "The run took longer than allowed.",
    "never_started": "The deployment was never started.",
    "apply_failed": "The cluster refused one of the resources.",
    "unknown_kind": "The cluster does not serve one of the resource kinds.",
    "cluster_unreachable": "The cluster could not be reached.",
    "cluster_unavailable": "The cluster's API server kept failing.",
    "cluster_unauthorized": "The cluster does not accept the kubeconfig's credentials.",
    "cluster_forbidden": "The credential is not allowed to do this.",
    "namespace_not_found": "The target namespace does not exist.",
    "resource_conflict": "An object of the same name belongs to someone else.",
    "invalid_manifest": "The cluster rejected a resource as invalid.",
    "admission_denied": "A policy of the cluster refused a resource.",
    "upstream_answer_malformed": "A server answered with something its API never sends.",
    "image_not_found": "The image does not exist.",
    "invalid_image_name": "The image name is not valid.",
    "image_pull_failed": "The image cannot be pulled.",
    "container_config_error": "The container cannot be created.",
    "crash_loop": "The container keeps crashing.",
    "oom_killed": "The container runs out of memory.",
    "unschedulable": "The pod cannot be scheduled.",
    "volume_unbound": "The pod waits for a volume that never binds.",
    "readiness_probe_failed": "The readiness probe keeps failing.",
    "repo_not_found": "The repository was not found.",
    "repo_no_access": "The repository cannot be read without credentials.",
    "repo_ref_not_found": "The branch or tag does not exist.",
    "clone_failed": "The repository could not be cloned.",
    "upstream_answer_too_large": "A server's answer was too large or too slow.",
}
#: Reasons whose message says the specifics in a user's words: the cause quotes them.
SPECIFIC = frozenset(CAUSES) - {
    "readiness_timeout",
    "interrupted",
    "timeout",
    "never_started",
    "apply_failed",
    "unknown_kind",
}
_REFUSED = re.compile(r"applying (\S+/\S+) failed")
#: The runner's lead-in before the adapter's own words ("applying Deployment/web failed: ").
_LEAD_IN = re.compile(
    r"^(?:applying \S+ failed|cloning \S+ failed|checking readiness failed"
    r"|instantiating .+? failed at \S+|not ready after \S+: [^:]+|[^:]+ cannot become ready): "
)
_KEPT = "; resources were kept"
#: Reasons about the cluster as a whole, not the one document it was applying.
_WHOLE_CLUSTER = frozenset({"cluster_unreachable", "cluster_unavailable", "cluster_unauthorized"})


def failure_help(failure: dict | None) -> dict | None:
    """{cause, next, raw} of a failure: a plain-language cause, the next step the explain tool
    gives, and the raw reason and message; None without a failure."""
    if not failure:
        return None
    reason, message = failure.get("reason"), failure.get("message") or ""
    cause = CAUSES.get(reason, "The deployment failed.")
    refused = _REFUSED.search(message)
    if reason == "apply_failed" and refused:
        cause = f"The cluster refused {refused.group(1)}."
    elif reason in SPECIFIC and message:
        said = _LEAD_IN.sub("", message).split("\n")[0].split("; last log lines")[0]
        said = said.removesuffix(_KEPT)
        where = f" ({refused.group(1)})" if refused and reason not in _WHOLE_CLUSTER else ""
        cause = f"{cause[:-1]}{where}: {said}"
    return {
        "cause": cause,
        "next": NEXT_STEPS.get(reason, "Look at the failed step, then redeploy."),
        "raw": f"{reason}: {message}" if reason else message,
    }


#: How much of the end of a task's history explain shows.
RECENT_LINES = 10
LOG_TAIL_CHARS = 2000


def explain(snapshot: dict, events: list[dict], tail: list[dict] | None = None) -> dict:
    """{taskId, status, summary, steps, applied, nextSteps, recent, logTail} for a snapshot, its
    events from the start and `tail`, its last events (any order; default: `events`)."""
    source = snapshot["source"]
    what = _describe_source(source)
    lines = [f"{what} into project {snapshot['projectId']}."]
    if snapshot["retriedFromTaskId"]:
        lines.append(f"It redeploys task {snapshot['retriedFromTaskId']}.")
    steps = [
        _describe_step(e) for e in events if e["kind"] in ("step", "status", "cancel_requested")
    ]
    applied = [f"{r['kind']}/{r['name']}" for r in snapshot["appliedResources"]]
    status = snapshot["status"]
    next_steps: list[str] = []
    if status == Status.COMPLETED:
        lines.append("It completed: every required resource became ready.")
    elif status == Status.FAILED:
        failure = snapshot["failure"] or {}
        lines.append(f"It failed ({failure.get('reason')}): {failure.get('message')}.")
        next_steps.append(failure_help(failure)["next"])
    elif status == Status.CANCELLED:
        extent = (snapshot.get("cancellation") or {}).get("applied", "nothing")
        lines.append(f"It was cancelled; {extent} applied. Nothing was deleted or rolled back.")
        next_steps.append("Keep or clean up the applied resources on the canvas, or redeploy.")
    elif status == Status.BLOCKED:
        names = [i["name"] for i in snapshot.get("pendingInputs") or []]
        lines.append(f"It is waiting for inputs: {', '.join(names) or 'see the form'}.")
        next_steps.append("Submit the inputs to resume it, or cancel it.")
    else:
        lines.append(
            f"It is {status}" + (" and cancelling." if snapshot["cancelRequestedAt"] else ".")
        )
        next_steps.append("Wait for it to finish, or cancel it.")
    if applied:
        lines.append(f"Applied: {', '.join(applied)}.")
    tail = sorted(events if tail is None else tail, key=lambda e: int(e["seq"]))
    recent = [_describe_step(e) for e in tail if e["kind"] != "gateway"][-RECENT_LINES:]
    return {
        "taskId": snapshot["id"],
        "status": status,
        "summary": " ".join(lines),
        "steps": steps,
        "applied": applied,
        "nextSteps": next_steps,
        "recent": recent,
        "logTail": log_tail(tail) if status == Status.FAILED else None,
    }


def log_tail(events: list[dict]) -> str | None:
    """The end of what the runner reported: the model's streamed output when it had one, else
    its step messages (apply results). Runner events are scrubbed of secrets when written."""
    model = "".join(
        str((e["payload"] or {}).get("text") or "")
        for e in events
        if e["kind"] == "gateway" and (e["payload"] or {}).get("type") == "delta"
    )
    if model:
        return model[-LOG_TAIL_CHARS:]
    messages = []
    for event in events:
        payload = event["payload"] or {}
        if event["kind"] == "step" and payload.get("detail"):
            messages.append(f"{payload.get('step')}: {payload['detail']}")
        elif event["kind"] == "status" and payload.get("message"):
            messages.append(str(payload["message"]))
    return "\n".join(messages)[-LOG_TAIL_CHARS:] or None


def _describe_source(source: dict) -> str:
    kind = KINDS.get(source.get("kind"))
    return kind.describe(source) if kind else f"Deploying a {source.get('kind')} source"


def _describe_step(event: dict) -> str:
    line = timeline.entry(event)
    return f"{line.title}: {line.detail}" if line.detail else line.title
