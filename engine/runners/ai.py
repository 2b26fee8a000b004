"""The AI runner (prompt and GitHub sources): a devbox session plus gateway turns that produce a
deployment plan and manifests, then apply and verify exactly like the direct runner.

The model's protocol (answers, manifests, placeholders, sanitising) is
engine/runners/ai_answer.py; the session and its devbox (open, clone, pause) are
engine/runners/ai_session.py; this module orchestrates: gateway turns, parking for inputs,
deploying.

Session: the devbox id and the gateway session id live in artifact_summary.aiSession, so a run
resumed after /input re-attaches to both. Every terminal path pauses the devbox (server
credential) and records it; a parked (blocked) task keeps its devbox as it is.
"""

import json
import logging
import time

import yaml

from engine.core.status import Status
from engine.integrations.base import IntegrationError, UpstreamAnswerTooLarge
from engine.runners import direct
from engine.runners.ai_answer import (
    MAX_ANSWER_CHARS,
    PROTOCOL,
    MalformedAnswer,
    check_secret_placement,
    missing_inputs,
    parse_answer,
    placeholders,
    sanitize,
    sanitize_declaration,
    substitute,
)
from engine.runners.ai_session import (
    CLONE_DIR,
    AiSession,
    CloneFailed,
    open_devbox,
    pause_devbox,
    prepare_workspace,
)
from engine.runners.context import RunContext, TaskHandle, resources
from engine.trust import secrets

log = logging.getLogger(__name__)

#: Model turns one run may take (a turn that asks for inputs we already hold costs one more).
MAX_TURNS_PER_RUN = 3
#: Times a task may park asking for inputs before the runner gives up on the model.
MAX_INPUT_ROUNDS = 3
#: Streamed text is persisted as `gateway` events in batches this large, or this old.
BATCH_CHARS = 2048
BATCH_INTERVAL_S = 0.5
#: The steps of a run, in order: a prompt's, and a repository's (cloned before the plan).
PROMPT_STEPS = ("devbox", "plan", *direct.STEPS)
GITHUB_STEPS = ("devbox", "clone", "plan", *direct.STEPS)


def run(handle: TaskHandle, ctx: RunContext) -> None:
    """One run of an AI task: plan with the model, then apply and verify (or park blocked)."""
    integrations = ctx.integrations
    if (
        getattr(integrations, "devbox", None) is None
        or getattr(integrations, "gateway", None) is None
    ):
        handle.fail("ai_unavailable", "no devbox or gateway is configured on this server")
        return
    session = AiSession.from_artifacts(ctx.artifacts)
    sensitive = sensitive_names(ctx, session.asked)
    handle.add_secret_values([v for k, v in ctx.inputs.items() if k in sensitive])
    opened: list[str] = []  # the devbox id once one exists, so the finally can pause it
    try:
        _run(handle, ctx, session, sensitive, opened)
    finally:
        # Every terminal path (completed, failed, cancelled, aborted, crashed) pauses; a parked
        # task keeps its devbox for the resume. The pause never writes status.
        if opened and handle.outcome is not Status.BLOCKED:
            pause_devbox(handle, ctx, opened[-1])


def _run(
    handle, ctx: RunContext, session: AiSession, sensitive: set[str], opened: list[str]
) -> None:
    try:
        open_devbox(handle, ctx, session, opened)
        files = prepare_workspace(handle, ctx, session) if ctx.source.get("repo") else []
    except CloneFailed as exc:
        handle.abort.raise_if_aborted()
        handle.fail(exc.reason, str(exc))
        return
    except IntegrationError as exc:
        handle.abort.raise_if_aborted()
        # An answer over its cap names itself; any other devbox failure is the devbox's.
        reason = exc.reason if isinstance(exc, UpstreamAnswerTooLarge) else "devbox_error"
        handle.fail(reason, f"the devbox failed: {exc}")
        return

    if session.asked:
        still_missing = missing_inputs(session.asked, ctx.inputs)
        if still_missing:
            handle.request_inputs(session.asked, "still missing: " + ", ".join(still_missing))
            return
    messages = conversation(ctx, session, files, sensitive)
    for _ in range(MAX_TURNS_PER_RUN):
        try:
            text = gateway_turn(handle, ctx, session, messages)
            answer = parse_answer(text)
        except IntegrationError as exc:
            handle.abort.raise_if_aborted()
            handle.update_timeline("plan", "failed", str(exc))
            handle.fail(exc.reason, f"the gateway failed: {exc}")
            return
        except MalformedAnswer as exc:
            handle.update_timeline("plan", "failed", str(exc))
            handle.fail("malformed_answer", f"the model's answer is not a usable plan: {exc}")
            return
        if "needInputs" in answer:
            declared = answer["needInputs"]
        else:
            unknown = sorted({n for n in placeholders(answer["manifests"]) if n not in ctx.inputs})
            if not unknown:
                try:
                    check_secret_placement(answer["manifests"], sensitive)
                except MalformedAnswer as exc:
                    handle.update_timeline("plan", "failed", str(exc))
                    handle.fail(
                        "malformed_answer", f"the model's answer is not a usable plan: {exc}"
                    )
                    return
                _deploy(handle, ctx, session, answer, sensitive)
                return
            # The plan needs values nobody provided: ask for them as the model should have.
            declared = [sanitize_declaration({"name": n, "required": True}) for n in unknown]
        missing = missing_inputs(declared, ctx.inputs)
        if missing:
            if session.input_rounds >= MAX_INPUT_ROUNDS:
                handle.fail(
                    "too_many_input_rounds",
                    f"the model asked for inputs {MAX_INPUT_ROUNDS + 1} times",
                )
                return
            session.input_rounds += 1
            session.asked = declared
            handle.set_artifacts(aiSession=session.as_json())
            handle.update_timeline("plan", "done", "inputs needed: " + ", ".join(missing))
            handle.request_inputs(declared, "the model needs: " + ", ".join(missing))
            return
        # It asked for what we already hold: tell it so and take another turn.
        sensitive |= {d["name"] for d in declared if d["sensitive"]}
        handle.add_secret_values([v for k, v in ctx.inputs.items() if k in sensitive])
        messages += [
            {"role": "assistant", "content": json.dumps({"needInputs": declared})},
            {
                "role": "user",
                "content": inputs_text(ctx, sensitive)
                + "\nAll of them are provided. Answer with the plan and manifests now.",
            },
        ]
    handle.fail("malformed_answer", f"no plan after {MAX_TURNS_PER_RUN} turns")


# -- the gateway turn -----------------------------------------------------------------------------
def conversation(
    ctx: RunContext, session: AiSession, files: list[str], sensitive: set[str]
) -> list[dict]:
    """The messages of the next turn: the task, and on a resume the question and its answers."""
    source = ctx.source
    if source.get("repo"):  # a GitHub repository's source; a prompt's has none
        ref = f" (ref {source['ref']})" if source.get("ref") else ""
        task = (
            f"Repository: {source['repo']}{ref}\nCloned into the devbox at {CLONE_DIR}. "
            "Files:\n" + "\n".join(files)
        )
    else:
        task = f"Prompt: {source['prompt']}"
    task += f"\nTarget: Kubernetes namespace {ctx.target_namespace}."
    messages = [{"role": "system", "content": PROTOCOL}]
    if session.asked:
        messages += [
            {"role": "user", "content": task},
            {"role": "assistant", "content": json.dumps({"needInputs": session.asked})},
            {
                "role": "user",
                "content": inputs_text(ctx, sensitive)
                + "\nAnswer with the plan and manifests now.",
            },
        ]
    elif ctx.inputs:
        messages.append({"role": "user", "content": task + "\n" + inputs_text(ctx, sensitive)})
    else:
        messages.append({"role": "user", "content": task})
    return messages


def inputs_text(ctx: RunContext, sensitive: set[str]) -> str:
    """The provided inputs as the model may see them: sensitive ones by name only."""
    lines = []
    for name in sorted(ctx.inputs):
        if name in sensitive:
            lines.append(f"- {name}: sensitive, not shown; write ${{input:{name}}} where it goes")
        else:
            lines.append(f"- {name} = {json.dumps(ctx.inputs[name])}")
    return "Inputs provided:\n" + "\n".join(lines)


def gateway_turn(
    handle: TaskHandle, ctx: RunContext, session: AiSession, messages: list[dict]
) -> str:
    """Stream one turn: every piece goes live to viewers (scrubbed) and is persisted in batches
    as `gateway` events; the raw answer stays in memory."""
    session.turns += 1
    turn = session.turns
    handle.set_artifacts(aiSession=session.as_json())
    handle.update_timeline("plan", "started", f"gateway turn {turn}")
    handle.emit_event(
        "gateway", {"type": "turn_started", "turn": turn, "sessionId": session.session_id}
    )
    scrubber = handle.stream_scrubber()
    raw: list[str] = []
    batch = _Batch(handle, turn)
    stream = ctx.integrations.gateway.stream_chat(
        messages, session_id=session.session_id, abort=handle.abort
    )
    received = 0
    try:
        for piece in stream:
            received += len(piece)
            if received > MAX_ANSWER_CHARS:
                # Stop reading: an endless answer must not fill this worker's memory.
                raise MalformedAnswer(f"the answer is longer than {MAX_ANSWER_CHARS} characters")
            raw.append(piece)
            batch.add(scrubber.feed(piece))
    finally:
        close = getattr(stream, "close", None)
        if close is not None:
            close()  # a checkpoint that stopped us mid-stream must not leave the socket open
    batch.add(scrubber.flush())
    batch.flush()
    handle.emit_event("gateway", {"type": "turn_done", "turn": turn, "chars": batch.offset})
    return "".join(raw)


class _Batch:
    """Scrubbed text of one turn: shown live at once, persisted every BATCH_CHARS or
    BATCH_INTERVAL_S (with a checkpoint, so a cancel from anywhere is seen mid-stream)."""

    def __init__(self, handle: TaskHandle, turn: int):
        self.handle, self.turn = handle, turn
        self.offset = 0  # scrubbed characters shown so far
        self.pending: list[str] = []
        self.pending_start = 0
        self.flushed_at = time.monotonic()

    def add(self, text: str) -> None:
        if not text:
            return
        self.handle.publish(
            "gateway", {"type": "delta", "turn": self.turn, "offset": self.offset, "text": text}
        )
        self.pending.append(text)
        self.offset += len(text)
        if (
            self.offset - self.pending_start >= BATCH_CHARS
            or time.monotonic() - self.flushed_at >= BATCH_INTERVAL_S
        ):
            self.flush()
            self.handle.checkpoint()

    def flush(self) -> None:
        if self.pending:
            self.handle.emit_event(
                "gateway",
                {
                    "type": "delta",
                    "turn": self.turn,
                    "offset": self.pending_start,
                    "text": "".join(self.pending),
                },
            )
        self.pending, self.pending_start = [], self.offset
        self.flushed_at = time.monotonic()


def sensitive_names(ctx: RunContext, declared: list[dict]) -> set[str]:
    """Input names whose values are secrets: recorded, declared by the model, or named so."""
    names = set(ctx.sensitive_keys) | {d["name"] for d in declared if d.get("sensitive")}
    return names | {k for k in ctx.inputs if secrets.is_sensitive(k, declared=names)}


# -- deploy ---------------------------------------------------------------------------------------
def _deploy(
    handle: TaskHandle, ctx: RunContext, session: AiSession, answer: dict, sensitive: set[str]
) -> None:
    """Persist the sanitized plan, then apply (substituted in memory) and verify like direct."""
    manifests = [_own(doc, ctx) for doc in answer["manifests"]]
    persisted = [sanitize(doc, sensitive) for doc in manifests]
    session.asked = []
    # The plan and its step: one fenced write, before anything reaches the cluster.
    handle.update_timeline(
        "plan",
        "done",
        f"{resources(len(manifests))} planned",
        artifacts={
            "aiSession": session.as_json(),
            "deploymentPlan": sanitize(answer["plan"], sensitive),
            "resourceYamls": [yaml.safe_dump(doc, sort_keys=False) for doc in persisted],
        },
    )
    applied = [substitute(doc, ctx.inputs) for doc in manifests]
    direct.apply_and_verify(handle, ctx, lambda _ctx: applied)


def _own(doc: dict, ctx: RunContext) -> dict:
    """The document in the task's namespace, labelled as ours."""
    doc = json.loads(json.dumps(doc))  # a deep copy the model's answer does not share
    meta = doc["metadata"]
    meta["namespace"] = ctx.target_namespace
    labels = meta.get("labels") if isinstance(meta.get("labels"), dict) else {}
    meta["labels"] = {**labels, "app.kubernetes.io/managed-by": direct.FIELD_MANAGER}
    return doc
