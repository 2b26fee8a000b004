"""The task timeline (ADR 0028: timelines are task-owned): entries and steps built from events.

Pure logic over event dicts (`dto.event` shape: seq, kind, payload, createdAt). A Timeline is
built once from a bootstrap read, then fed one event at a time as the stream delivers them, so a
live frame carries exactly one entry and the one step it changed.
"""

from dataclasses import dataclass
from datetime import datetime, timedelta

from engine.core.status import Status
from engine.readside import dto

#: Each status in words: the timeline's lines, the explain tool's, and every status badge.
STATUS_WORDS = {
    Status.QUEUED: "Queued",
    Status.RUNNING: "Running",
    Status.BLOCKED: "Needs input",
    Status.APPLYING: "Applying",
    Status.COMPLETED: "Completed",
    Status.FAILED: "Failed",
    Status.CANCELLED: "Cancelled",
}
#: Each state of a step in words (the runners record these states).
STEP_STATE_WORDS = {
    "started": "In progress",
    "done": "Done",
    "failed": "Failed",
    "skipped": "Skipped",
    "waiting": "Waiting",
}
#: Known step keys, with the words the timeline shows; others show capitalized.
STEP_LABELS = {
    "render": "Render manifests",
    "plan": "Plan",
    "apply": "Apply resources",
    "verify": "Verify readiness",
    "inputs": "Collect inputs",
    "devbox": "Devbox",
    "instantiate": "Instantiate template",
    "allocate": "Allocate identities",
}
#: Most events a timeline reads (the bootstrap page size).
MAX_EVENTS = 1000
#: Sequence numbers come from one global sequence, so an event can commit after events with later
#: numbers (its transaction took its number first). Events are appended by single short
#: statements: one whose transaction began this long before the newest event has committed.
LATE_COMMIT_WINDOW = timedelta(seconds=30)


@dataclass(frozen=True)
class Entry:
    """One line of the timeline's history."""

    seq: int
    kind: str
    title: str
    detail: str | None
    #: The status a status line moved to, the state a step line reports; else None.
    state: str | None
    at: str | None


@dataclass(frozen=True)
class Step:
    """Where one step of the run stands (its latest state wins)."""

    key: str
    label: str
    state: str
    detail: str | None
    order: int
    #: When the step started, and when it reached its current state (event times, ISO).
    started_at: str | None = None
    at: str | None = None

    @property
    def ended(self) -> bool:
        return self.state not in ("started", "waiting")


def status_words(value) -> str:
    """A status in words (an unknown one as it is spelled)."""
    try:
        return STATUS_WORDS[Status(value)]
    except ValueError:
        return str(value)


def step_state_words(state: str) -> str:
    """A step's state in words (an unknown one capitalized)."""
    return STEP_STATE_WORDS.get(state, state.capitalize() or "Unknown")


def entry(event: dict) -> Entry:
    """The history line of one event."""
    kind, payload = event["kind"], event.get("payload") or {}
    title, detail, state = kind.replace("_", " ").capitalize(), None, None
    if kind == "created":
        title = "Redeploy created" if payload.get("retriedFromTaskId") else "Created"
        detail = f"{payload.get('sourceKind', '')} source".strip()
        if payload.get("retriedFromTaskId"):
            detail += f"; redeploys {str(payload['retriedFromTaskId'])[:8]}"
    elif kind == "status":
        to = payload.get("to")
        title = f"{status_words(payload.get('from'))} → {status_words(to)}"
        detail = payload.get("message") or payload.get("reason") or payload.get("verdict")
        if payload.get("by") and payload["by"] not in ("runner", "engine"):
            detail = f"{detail} (by {payload['by']})" if detail else f"by {payload['by']}"
        state = str(to) if to is not None else None
    elif kind == "cancel_requested":
        title = "Cancel requested"
        detail = f"by {payload['by']}" if payload.get("by") else None
    elif kind == "step":
        step = payload.get("step", "")
        state = payload.get("state", "")
        title = f"{STEP_LABELS.get(step, step.capitalize())}: {step_state_words(state).lower()}"
        detail = payload.get("detail")
    else:
        detail = payload.get("message") or payload.get("detail")
    return Entry(
        seq=int(event["seq"]),
        kind=kind,
        title=title,
        detail=str(detail) if detail is not None else None,
        state=state,
        at=event.get("createdAt"),
    )


class Timeline:
    """Entries in sequence order and each step's latest state."""

    def __init__(self):
        self.entries: list[Entry] = []
        self.steps: dict[str, Step] = {}
        self._seen: set[int] = set()

    def add(self, event: dict) -> tuple[Entry, Step | None] | None:
        """Take one event: its entry and the step it changed; None when already seen."""
        seq = int(event["seq"])
        if seq in self._seen:
            return None
        self._seen.add(seq)
        line = entry(event)
        self.entries.append(line)
        if len(self.entries) > 1 and seq < self.entries[-2].seq:
            self.entries.sort(key=lambda e: e.seq)  # a late commit of an earlier sequence number
        changed = None
        payload = event.get("payload") or {}
        if event["kind"] == "step" and payload.get("step"):
            key = payload["step"]
            previous = self.steps.get(key)
            changed = Step(
                key=key,
                label=STEP_LABELS.get(key, key.capitalize()),
                state=payload.get("state", ""),
                detail=payload.get("detail"),
                order=previous.order if previous else len(self.steps),
                started_at=(
                    previous.started_at
                    if previous and previous.started_at
                    else event.get("createdAt")
                ),
                at=event.get("createdAt"),
            )
            self.steps[key] = changed
        return line, changed

    def settled_seq(self, window: timedelta = LATE_COMMIT_WINDOW) -> int:
        """A seq to read on after: every event this timeline lacks has a later one (so a live
        reader re-reads the last `window` of events, never the whole history)."""
        if not self.entries or not self.entries[-1].at:
            return 0
        horizon = datetime.fromisoformat(self.entries[-1].at) - window
        for line in reversed(self.entries):
            if line.at and datetime.fromisoformat(line.at) < horizon:
                return line.seq
        return 0

    def __contains__(self, seq: int) -> bool:
        return seq in self._seen

    def ordered_steps(self) -> list[Step]:
        return sorted(self.steps.values(), key=lambda s: s.order)


def build(events: list[dict]) -> Timeline:
    """A timeline from a task's events (any order)."""
    timeline = Timeline()
    for event in sorted(events, key=lambda e: int(e["seq"])):
        timeline.add(event)
    return timeline


@dataclass(frozen=True)
class Outcome:
    """What a finished run left in the cluster (US6: itemized, never deleted)."""

    extent: str
    applied: list[dict]
    not_applied: list[dict]


def outcome(snapshot: dict) -> Outcome | None:
    """The applied-resource itemization of a finished task, or None while it runs."""
    status = Status(snapshot["status"])
    if status not in (Status.CANCELLED, Status.FAILED, Status.COMPLETED):
        return None
    cancellation = snapshot.get("cancellation") or {}
    applied = cancellation.get("appliedResources") or snapshot.get("appliedResources") or []
    if "notAppliedResources" in cancellation:
        not_applied = cancellation["notAppliedResources"]
    else:
        names = {(r.get("kind"), r.get("name")) for r in applied}
        not_applied = [
            r
            for r in snapshot.get("plannedResources") or []
            if (r.get("kind"), r.get("name")) not in names
        ]
    extent = cancellation.get("applied") or (
        "nothing" if not applied else "partially" if not_applied else "fully"
    )
    return Outcome(extent=extent, applied=list(applied), not_applied=list(not_applied))


def read_events(
    db, workspace: str, task_id, *, after_seq: int = 0, limit: int = MAX_EVENTS
) -> list[dict]:
    """A task's events after `after_seq`, oldest first (`dto.event` shape)."""
    rows = db.all(
        "event_list_for_task",
        task_id=task_id,
        workspace=workspace,
        after_seq=after_seq,
        limit=limit,
    )
    return [dto.event(r) for r in rows]


def read_event_tail(db, workspace: str, task_id, *, limit: int) -> list[dict]:
    """A task's last `limit` events, newest first (`dto.event` shape)."""
    rows = db.all("event_list_tail_for_task", task_id=task_id, workspace=workspace, limit=limit)
    return [dto.event(r) for r in rows]
