"""The AI runner's session and its devbox: what a resumed run re-attaches to (AiSession), the
devbox opened or re-attached and recorded before any use, a repository cloned into it (and why a
clone failed, in a user's words), and its pause on every terminal path (engine/runners/ai.py).
"""

import logging
import uuid
from dataclasses import dataclass, field

import gevent

from engine.abort import Aborted, AbortSignal
from engine.integrations.base import IntegrationError, NotFound
from engine.runners.context import RunContext, TaskHandle

log = logging.getLogger(__name__)

#: How long a terminal path waits for the devbox pause before leaving it to the reaper.
PAUSE_TIMEOUT_S = 10.0
CLONE_DIR = "/workspace/repo"
CLONE_TIMEOUT_S = 300.0
#: File names of a cloned repository shown to the model.
MAX_LISTED_FILES = 200
GITHUB_URL = "https://github.com/{repo}.git"


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


def open_devbox(handle: TaskHandle, ctx: RunContext, session: AiSession, opened: list[str]) -> None:
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


def prepare_workspace(handle: TaskHandle, ctx: RunContext, session: AiSession) -> list[str]:
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
