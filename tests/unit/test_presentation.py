"""The one status-to-presentation mapping (the web layer's)."""

import pytest

from blueprints.pages import presentation
from engine.core.status import Status
from engine.readside.store import attention
from engine.readside.timeline import entry

HUES = {
    "queued": "neutral",
    "running": "blue",
    "blocked": "amber",
    "applying": "blue",
    "completed": "green",
    "failed": "red",
    "cancelled": "neutral",
}


@pytest.mark.parametrize("status", list(Status))
def test_every_status_has_its_hue(status):
    shown = presentation.task(status)
    assert shown.tone == HUES[status]
    assert shown.css.startswith(f"tone-{HUES[status]}")
    assert shown.label


def test_in_progress_statuses_are_busy_and_settled_ones_are_not():
    assert {s for s in Status if presentation.task(s).busy} == {
        Status.QUEUED,
        Status.RUNNING,
        Status.APPLYING,
    }


@pytest.mark.parametrize("status", ["queued", "running", "blocked", "applying"])
def test_a_pending_cancel_shows_cancelling_on_active_tasks(status):
    shown = presentation.task(status, cancel_requested_at="2026-07-06T12:00:00+00:00")
    assert shown.label == presentation.CANCELLING_LABEL == "Cancelling…"
    assert shown.busy


@pytest.mark.parametrize("status", ["completed", "failed", "cancelled"])
def test_a_finished_task_shows_its_outcome_even_with_a_cancel_recorded(status):
    shown = presentation.task(status, cancel_requested_at="2026-07-06T12:00:00+00:00")
    assert shown.label == presentation.STATUS[Status(status)].label


def test_verify_phase_reads_as_verifying_but_keeps_the_applying_hue():
    shown = presentation.task("applying", phase="verify")
    assert (shown.label, shown.tone) == ("Verifying", "blue")
    assert presentation.task("running", phase="verify").label == "Running"


def test_of_reads_a_projection_dict():
    item = {"status": "applying", "cancelRequestedAt": "x", "phase": "apply"}
    assert presentation.of(item).label == "Cancelling…"


def test_steps_share_the_status_semantics():
    assert presentation.step("started").tone == "blue"
    assert presentation.step("done").tone == "green"
    assert presentation.step("failed").tone == "red"
    assert presentation.step("skipped").tone == "neutral"
    assert presentation.step("mystery").tone == "neutral"


def test_a_running_resource_card_is_green_not_progress_blue():
    assert presentation.task("running").tone == "blue"
    card = presentation.resource("completed")
    assert (card.label, card.tone) == ("Running", "green")
    assert presentation.resource("applying").tone == "blue"
    assert presentation.resource("failed").tone == "neutral"
    assert presentation.resource("cancelled").tone == "neutral"


def test_attention_rules():
    assert attention({"status": "failed"}) is Status.FAILED
    assert attention({"status": "failed"}, superseded=True) is None
    assert attention({"status": "failed"}, dismissed=True) is None
    assert attention({"status": "cancelled"}) is None
    assert attention({"status": "completed"}) is None
    assert attention({"status": "blocked"}, dismissed=True) is Status.BLOCKED
    assert attention({"status": "running"}) is None


def test_attention_reads_as_words():
    assert presentation.attention_label(Status.FAILED) == "Needs attention"
    assert presentation.attention_label(Status.BLOCKED) == "Waiting for your input"
    assert presentation.attention_label(None) is None


def test_a_timeline_line_takes_the_hue_of_its_new_status_or_step_state():
    def tone(kind, payload):
        return presentation.entry_tone(entry({"seq": 1, "kind": kind, "payload": payload}))

    assert tone("status", {"from": "running", "to": "failed"}) == "red"
    assert tone("status", {"from": "running", "to": "exploded"}) == "neutral"
    assert tone("step", {"step": "apply", "state": "done"}) == "green"
    assert tone("step", {"step": "apply", "state": "started"}) == "blue"
    assert tone("cancel_requested", {"by": "ana"}) == "neutral"


def test_unknown_statuses_fail_loudly():
    with pytest.raises(ValueError):
        presentation.task("exploded")
