"""The one status-to-presentation mapping: every page, fragment and frame asks here.

Hues (seed 000, amendment "Status presentation unified"): running/applying blue, completed green,
blocked amber, failed red, queued/cancelled neutral. Timeline steps share the semantics; a result
resource card's `running` stays green (it reports a healthy resource, not progress). The browser
holds no mapping of its own: it only shows the classes and labels rendered from here (the
optimistic "Cancelling…" label included, carried on the cancel button).
"""

import re
from dataclasses import dataclass

from engine.core.status import ACTIVE, Status

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


#: status -> presentation, before any modifier (phase, pending cancel).
STATUS: dict[Status, Presentation] = {
    Status.QUEUED: Presentation("Queued", NEUTRAL, busy=True),
    Status.RUNNING: Presentation("Running", BLUE, busy=True),
    Status.BLOCKED: Presentation("Needs input", AMBER),
    Status.APPLYING: Presentation("Applying", BLUE, busy=True),
    Status.COMPLETED: Presentation("Completed", GREEN),
    Status.FAILED: Presentation("Failed", RED),
    Status.CANCELLED: Presentation("Cancelled", NEUTRAL),
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


#: Timeline step state -> presentation (same hues as task statuses).
STEP: dict[str, Presentation] = {
    "started": Presentation("In progress", BLUE, busy=True),
    "done": Presentation("Done", GREEN),
    "failed": Presentation("Failed", RED),
    "skipped": Presentation("Skipped", NEUTRAL),
    "waiting": Presentation("Waiting", AMBER),
}


#: The steps a run of each source kind goes through (the "n" of "step k of n"; a run may add more).
EXPECTED_STEPS = {"image": 3, "database": 3, "template": 5, "prompt": 5, "github": 6}
#: Source kinds whose run streams a model's text (the timeline's log shows it live).
STREAMED_KINDS = {"prompt", "github"}

#: A step still in progress when its task ended (cancelled, failed, interrupted) stopped there.
STEP_STOPPED = Presentation("Stopped", NEUTRAL)


def step(state: str) -> Presentation:
    """How a timeline step's state shows."""
    return STEP.get(state, Presentation(state.capitalize() or "Unknown", NEUTRAL))


def resource(owner_status: str) -> Presentation:
    """How a result resource card shows, from the status of the task that last applied it."""
    status = Status(owner_status)
    if status is Status.COMPLETED:
        return Presentation("Running", GREEN)  # a healthy resource: green, never progress-blue
    if status in ACTIVE:
        return Presentation("Deploying", BLUE, busy=True)
    # Kept after a failed or cancelled run: it exists, its health is not vouched for.
    return Presentation("Applied", NEUTRAL)


#: Attention kinds, strongest first. Cancelled is never attention-needed (seed 000, US23).
FAILED_ATTENTION = "Needs attention"
BLOCKED_ATTENTION = "Waiting for your input"


def attention(item: dict, *, superseded: bool = False, dismissed: bool = False) -> str | None:
    """Why this task asks for the user (a failed run until dismissed or redeployed; a blocked one
    always), or None."""
    status = Status(item["status"])
    if status is Status.BLOCKED:
        return BLOCKED_ATTENTION
    if status is Status.FAILED and not superseded and not dismissed:
        return FAILED_ATTENTION
    return None


def failure(item: dict) -> dict | None:
    """A failed task's plain-language cause, next step and raw detail (the explain tool's words)."""
    from engine.readside.explain import (
        failure_help,  # explain builds on the timeline, which uses us
    )

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
