"""The one status-to-presentation mapping: every page, fragment and frame asks here.

Hues (seed 000, amendment "Status presentation unified"): running/applying blue, completed green,
blocked amber, failed red, queued/cancelled neutral. Timeline steps share the semantics; a result
resource card's `running` stays green (it reports a healthy resource, not progress). The browser
holds no mapping of its own: it only shows the classes and labels rendered from here (the
optimistic "Cancelling…" label included, carried on the cancel button). The words for statuses
and step states are the timeline's (engine/readside/timeline.py), which the explain tool speaks
too; the hues, CSS classes and the page's own labels are the web layer's, here.
"""

import re
from dataclasses import dataclass

from engine.core.status import ACTIVE, Status
from engine.readside import timeline
from engine.readside.explain import failure_help
from engine.runners.kinds import KINDS

BLUE, GREEN, AMBER, RED, NEUTRAL = "blue", "green", "amber", "red", "neutral"
TONES = (BLUE, GREEN, AMBER, RED, NEUTRAL)


@dataclass(frozen=True)
class Presentation:
    """How one status shows: its words, its hue, whether it is in progress."""

    label: str
    tone: str
    #: Work is under way (a spinner / pulse), as opposed to a settled state.
    busy: bool = False

    @property
    def css(self) -> str:
        """The CSS classes of a status badge."""
        return f"tone-{self.tone}" + (" is-busy" if self.busy else "")


#: status -> (hue, busy), before any modifier (phase, pending cancel).
STATUS_HUES: dict[Status, tuple[str, bool]] = {
    Status.QUEUED: (NEUTRAL, True),
    Status.RUNNING: (BLUE, True),
    Status.BLOCKED: (AMBER, False),
    Status.APPLYING: (BLUE, True),
    Status.COMPLETED: (GREEN, False),
    Status.FAILED: (RED, False),
    Status.CANCELLED: (NEUTRAL, False),
}
#: status -> presentation, before any modifier (phase, pending cancel).
STATUS: dict[Status, Presentation] = {
    status: Presentation(timeline.STATUS_WORDS[status], hue, busy)
    for status, (hue, busy) in STATUS_HUES.items()
}

#: An active task whose cancel was requested: server truth (cancelRequestedAt), and the label the
#: browser shows optimistically between the click and the response.
CANCELLING_LABEL = "Cancelling…"

#: Phases that read better than their status while applying (verify is a phase, not a status).
PHASE_LABELS = {"verify": "Verifying"}


def task(
    status: str, *, cancel_requested_at: str | None = None, phase: str | None = None
) -> Presentation:
    """How a task's status shows (dock chip, placeholder, timeline header)."""
    status = Status(status)
    base = STATUS[status]
    if status in ACTIVE and cancel_requested_at:
        return Presentation(CANCELLING_LABEL, base.tone, busy=True)
    if status is Status.APPLYING and phase in PHASE_LABELS:
        return Presentation(PHASE_LABELS[phase], base.tone, busy=True)
    return base


def of(item: dict) -> Presentation:
    """Presentation of a projection or snapshot dict."""
    return task(
        item["status"], cancel_requested_at=item.get("cancelRequestedAt"), phase=item.get("phase")
    )


#: Timeline step state -> (hue, busy) (same hues as task statuses).
STEP_HUES: dict[str, tuple[str, bool]] = {
    "started": (BLUE, True),
    "done": (GREEN, False),
    "failed": (RED, False),
    "skipped": (NEUTRAL, False),
    "waiting": (AMBER, False),
}

#: A step still in progress when its task ended (cancelled, failed, interrupted) stopped there.
STEP_STOPPED = Presentation("Stopped", NEUTRAL)


def step(state: str) -> Presentation:
    """How a timeline step's state shows."""
    hue, busy = STEP_HUES.get(state, (NEUTRAL, False))
    return Presentation(timeline.step_state_words(state), hue, busy)


def entry_tone(line: timeline.Entry) -> str:
    """The hue of a timeline line: its new status's, its step state's, else neutral."""
    if line.kind == "status":
        try:
            return STATUS[Status(line.state)].tone
        except ValueError:
            return NEUTRAL
    if line.kind == "step":
        return step(line.state or "").tone
    return NEUTRAL


def expected_steps(source_kind: str) -> int:
    """The "n" of "step k of n": the steps its runner declares (a run may add more)."""
    kind = KINDS.get(source_kind)
    return len(kind.steps) if kind else 0


def streamed(source_kind: str) -> bool:
    """Whether a run of this kind streams a model's text (the timeline's log shows it live)."""
    kind = KINDS.get(source_kind)
    return bool(kind and kind.streamed)


def resource(owner_status: str) -> Presentation:
    """How a result resource card shows, from the status of the task that last applied it."""
    status = Status(owner_status)
    if status is Status.COMPLETED:
        return Presentation("Running", GREEN)  # a healthy resource: green, never progress-blue
    if status in ACTIVE:
        return Presentation("Deploying", BLUE, busy=True)
    # Kept after a failed or cancelled run: it exists, its health is not vouched for.
    return Presentation("Applied", NEUTRAL)


#: Why a task asks for the user (engine/readside/store.py attention), in words.
ATTENTION_LABELS = {Status.FAILED: "Needs attention", Status.BLOCKED: "Waiting for your input"}


def attention_label(reason: Status | None) -> str | None:
    """The words of an attention reason, or None."""
    return ATTENTION_LABELS[reason] if reason else None


def failure(item: dict) -> dict | None:
    """A failed task's plain-language cause, next step and raw detail (the explain tool's words)."""
    return failure_help(item.get("failure"))


#: Field names whose words are not simply their parts.
FIELD_LABELS = {
    "env": "Environment variables",
    "args": "Arguments",
    "repo": "Repository",
    "ref": "Branch, tag or commit",
    "url": "URL",
    "id": "ID",
}


def field_label(name: str) -> str:
    """A form field's label from its name: `maxMemory` -> "Max memory", `ADMIN_PASSWORD` ->
    "Admin password"."""
    if name in FIELD_LABELS:
        return FIELD_LABELS[name]
    words = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name).replace("_", " ").replace("-", " ").split()
    if not words:
        return name
    return " ".join(words).lower().capitalize()
