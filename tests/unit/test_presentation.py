"""The one status-to-presentation mapping."""

import pytest

from engine.core.status import Status
from engine.readside import presentation

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
    assert presentation.attention({"status": "failed"}) == presentation.FAILED_ATTENTION
    assert presentation.attention({"status": "failed"}, superseded=True) is None
    assert presentation.attention({"status": "failed"}, dismissed=True) is None
    assert presentation.attention({"status": "cancelled"}) is None
    assert presentation.attention({"status": "completed"}) is None
    assert (
        presentation.attention({"status": "blocked"}, dismissed=True)
        == presentation.BLOCKED_ATTENTION
    )
    assert presentation.attention({"status": "running"}) is None


def test_unknown_statuses_fail_loudly():
    with pytest.raises(ValueError):
        presentation.task("exploded")
