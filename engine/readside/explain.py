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
}


#: The cause of a failure, in plain words (what the page shows first; the raw detail is a toggle).
CAUSES = {
    "readiness_timeout": "The workload never became ready in time.",
    "interrupted": "The server running this deployment stopped mid-run.",
    "timeout": "The run took longer than allowed.",
    "never_started": "The deployment was never started.",
    "apply_failed": "The cluster refused one of the resources.",
    "unknown_kind": "The cluster does not serve one of the resource kinds.",
}
_REFUSED = re.compile(r"applying (\S+/\S+) failed")


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
