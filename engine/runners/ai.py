"""The AI runner (prompt and GitHub sources): a devbox session plus gateway turns that produce a
deployment plan and manifests, then apply and verify exactly like the direct runner.

The model's protocol (answers, manifests, placeholders, sanitising) is
engine/runners/ai_answer.py; this module orchestrates: devbox, gateway turns, parking for inputs,
deploying.

Session: the devbox id and the gateway session id live in artifact_summary.aiSession, so a run
resumed after /input re-attaches to both. Every terminal path pauses the devbox (server
credential) and records it; a parked (blocked) task keeps its devbox as it is.
"""

import json
import logging
import time
import uuid
from dataclasses import dataclass, field

import gevent
import yaml

from engine.abort import Aborted, AbortSignal
from engine.core.status import Status
from engine.integrations.base import IntegrationError, NotFound, UpstreamAnswerTooLarge
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
#: How long a terminal path waits for the devbox pause before leaving it to the reaper.
PAUSE_TIMEOUT_S = 10.0
CLONE_DIR = "/workspace/repo"
CLONE_TIMEOUT_S = 300.0
#: File names of a cloned repository shown to the model.
MAX_LISTED_FILES = 200
GITHUB_URL = "https://github.com/{repo}.git"
#: The steps of a run, in order: a prompt's, and a repository's (cloned before the plan).
PROMPT_STEPS = ("devbox", "plan", *direct.STEPS)
GITHUB_STEPS = ("devbox", "clone", "plan", *direct.STEPS)


class CloneFailed(IntegrationError):
    """The repository could not be cloned; `reason` says why (not found, no access, no ref)."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason


#: git's words for each reason a clone fails, checked in order (its stderr, lower-cased).
CLONE_FAILURES = (
    (
        "repo_ref_not_found",
        ("remote branch", "couldn't find remote ref", "could not find remote branch"),
        "{ref} is not a branch or tag of {repo}",
    ),
    (
        "repo_no_access",
        (
            "could not read username",
            "authentication failed",
            "permission denied",
            "returned error: 403",
        ),
        "{repo} is private or needs credentials; this server clones public repositories "
        "without any",
    ),
    (
        "repo_not_found",
        ("not found", "does not exist"),
        "{repo} does not exist on GitHub (or is private: this server clones without credentials)",
    ),
)


def clone_failure(repo: str, ref: str | None, stderr: str, exit_code: int) -> CloneFailed:
    """Why `git clone` failed, in a user's words, with git's own last line."""
    said = (stderr.strip().splitlines() or [f"exit {exit_code}"])[-1]
    lowered = stderr.lower()
    for reason, marks, words in CLONE_FAILURES:
        if any(mark in lowered for mark in marks):
            text = words.format(repo=repo, ref=ref or "the default branch")
            return CloneFailed(f"cloning {repo} failed: {text} (git: {said})", reason)
    return CloneFailed(f"cloning {repo} failed: {said}", "clone_failed")


@dataclass
class AiSession:
    """What a resumed run re-attaches to (persisted as artifact_summary.aiSession)."""

    session_id: str
    devbox_id: str | None = None
    #: Gateway turns taken so far (numbering continues across resumes).
    turns: int = 0
    input_rounds: int = 0
    cloned: bool = False
    #: The declarations the model last asked for (sanitized; never values).
    asked: list = field(default_factory=list)

    @classmethod
    def from_artifacts(cls, artifacts: dict) -> "AiSession":
        raw = artifacts.get("aiSession") or {}
        if not raw.get("sessionId"):
            return cls(session_id=f"sess-{uuid.uuid4().hex}")
        return cls(
            session_id=raw["sessionId"],
            devbox_id=raw.get("devboxId"),
            turns=int(raw.get("turns") or 0),
            input_rounds=int(raw.get("inputRounds") or 0),
            cloned=bool(raw.get("cloned")),
            asked=list(raw.get("asked") or []),
        )

    def as_json(self) -> dict:
        return {
            "sessionId": self.session_id,
            "devboxId": self.devbox_id,
            "turns": self.turns,
            "inputRounds": self.input_rounds,
            "cloned": self.cloned,
            "asked": self.asked,
        }


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
        _open_devbox(handle, ctx, session, opened)
        files = _prepare_workspace(handle, ctx, session) if ctx.source.get("repo") else []
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


# -- the devbox ----------------------------------------------------------------------------------
def _open_devbox(
    handle: TaskHandle, ctx: RunContext, session: AiSession, opened: list[str]
) -> None:
    """Re-attach to the recorded devbox, or create one; recorded on the row before any use."""
    devbox = ctx.integrations.devbox
    if session.devbox_id:
        handle.update_timeline("devbox", "started", f"re-attaching to {session.devbox_id}")
        try:
            devbox.attach(session.devbox_id, workspace=ctx.workspace, abort=handle.abort)
        except NotFound:
            handle.update_timeline("devbox", "failed", f"{session.devbox_id} is gone; a new one")
            session.devbox_id, session.cloned = None, False
        else:
            opened.append(session.devbox_id)
            handle.record_devbox(session.devbox_id)
            handle.update_timeline("devbox", "done", f"re-attached to {session.devbox_id}")
            return
    handle.update_timeline("devbox", "started", "creating a devbox")
    devbox_id = devbox.create(workspace=ctx.workspace, task_id=str(ctx.task_id), abort=handle.abort)
    opened.append(devbox_id)
    handle.record_devbox(devbox_id)  # before any use: the engine can pause it if we die
    session.devbox_id = devbox_id
    handle.set_artifacts(aiSession=session.as_json())
    handle.update_timeline("devbox", "done", f"created {devbox_id}")


def _prepare_workspace(handle: TaskHandle, ctx: RunContext, session: AiSession) -> list[str]:
    """Clone the repository into the devbox (once per devbox); its file names."""
    devbox = ctx.integrations.devbox
    repo, ref = ctx.source["repo"], ctx.source.get("ref")
    if not session.cloned:
        handle.update_timeline("clone", "started", repo + (f"@{ref}" if ref else ""))
        command = (
            ["git", "clone", "--depth", "1"]
            + (["--branch", ref] if ref else [])
            + ["--", GITHUB_URL.format(repo=repo), CLONE_DIR]
        )
        result = devbox.exec(
            session.devbox_id,
            command,
            workspace=ctx.workspace,
            abort=handle.abort,
            timeout_s=CLONE_TIMEOUT_S,
        )
        if not result.ok:
            failure = clone_failure(repo, ref, result.stderr, result.exit_code)
            handle.update_timeline("clone", "failed", str(failure))
            raise failure
        session.cloned = True
        handle.set_artifacts(aiSession=session.as_json())
        handle.update_timeline("clone", "done", repo)
    listing = devbox.exec(
        session.devbox_id,
        ["git", "-C", CLONE_DIR, "ls-files"],
        workspace=ctx.workspace,
        abort=handle.abort,
    )
    return listing.stdout.splitlines()[:MAX_LISTED_FILES] if listing.ok else []


def pause_devbox(handle: TaskHandle, ctx: RunContext, devbox_id: str) -> None:
    """Pause with the server credential and record it; never writes status, never raises.

    Runs on abort paths too, so it takes a signal of its own, bounded by PAUSE_TIMEOUT_S; a pause
    that fails is left to the reaper (the row still says the devbox is unpaused).
    """
    signal = AbortSignal()
    timer = gevent.spawn_later(PAUSE_TIMEOUT_S, signal.abort, "timeout")
    try:
        ctx.integrations.devbox.pause(devbox_id, workspace=ctx.workspace, abort=signal)
    except NotFound:
        pass  # gone: nothing is left running
    except (IntegrationError, Aborted) as exc:
        log.warning(
            "task %s: pausing devbox %s failed (%s); the reaper retries",
            ctx.task_id,
            devbox_id,
            exc,
        )
        return
    except Exception:
        log.exception("task %s: pausing devbox %s failed", ctx.task_id, devbox_id)
        return
    finally:
        timer.kill(block=False)
    try:
        handle.devbox_paused(devbox_id)
    except Exception:
        log.exception("task %s: could not record the devbox pause", ctx.task_id)


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
