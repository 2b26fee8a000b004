"""What explain shows of the end of a task's history: recent lines and a failure's log tail."""

from engine.readside.explain import LOG_TAIL_CHARS, RECENT_LINES, explain, log_tail


def event(seq, kind, **payload):
    return {"seq": seq, "kind": kind, "payload": payload, "createdAt": None}


def snapshot(status, failure=None):
    return {
        "id": "t1",
        "status": status,
        "projectId": "demo",
        "retriedFromTaskId": None,
        "source": {"kind": "prompt", "prompt": "a blog"},
        "appliedResources": [],
        "failure": failure,
        "cancelRequestedAt": None,
    }


def test_a_failure_shows_the_end_of_the_model_output_in_order():
    deltas = [
        event(i, "gateway", type="delta", turn=1, offset=i * 1000, text=str(i % 10) * 1000)
        for i in range(1, 5)
    ]
    steps = [event(10, "step", step="apply", state="failed", detail="Service/web refused")]
    shuffled = [deltas[2], steps[0], deltas[0], deltas[3], deltas[1]]
    out = explain(
        snapshot("failed", {"reason": "apply_failed", "message": "refused"}), shuffled, shuffled
    )
    assert len(out["logTail"]) == LOG_TAIL_CHARS
    assert out["logTail"] == "3" * 1000 + "4" * 1000  # the end, in sequence order
    assert len(out["recent"]) == 1 and out["recent"][0].endswith("Service/web refused")


def test_without_model_output_the_tail_is_the_runners_messages():
    events = [
        event(1, "step", step="apply", state="started", detail="Deployment/web created"),
        event(2, "status", to="failed", message="applying Service/web failed: refused"),
    ]
    assert log_tail(events) == (
        "apply: Deployment/web created\napplying Service/web failed: refused"
    )
    assert log_tail([event(1, "step", step="apply", state="started")]) is None


def test_recent_keeps_the_last_lines_and_no_tail_unless_failed():
    events = [event(i, "step", step="apply", state="done", detail=f"line {i}") for i in range(30)]
    out = explain(snapshot("completed"), events)
    assert len(out["recent"]) == RECENT_LINES and out["recent"][-1].endswith("line 29")
    assert out["logTail"] is None
