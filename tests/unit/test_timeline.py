"""The timeline builder over synthetic events."""

from datetime import timedelta

from engine.readside import timeline


def ev(seq, kind, **payload):
    return {"seq": seq, "kind": kind, "payload": payload, "createdAt": None}


def test_steps_keep_their_first_order_and_their_latest_state():
    t = timeline.build(
        [
            ev(3, "step", step="apply", state="started", detail="Deployment/web"),
            ev(1, "step", step="render", state="started"),
            ev(2, "step", step="render", state="done", detail="2 resources"),
            ev(4, "step", step="apply", state="failed", detail="refused"),
        ]
    )
    assert [(s.key, s.state, s.detail) for s in t.ordered_steps()] == [
        ("render", "done", "2 resources"),
        ("apply", "failed", "refused"),
    ]
    assert [e.seq for e in t.entries] == [1, 2, 3, 4]


def test_an_event_is_taken_once_and_a_late_earlier_seq_is_sorted_in():
    t = timeline.Timeline()
    assert t.add(ev(5, "created", sourceKind="image")) is not None
    assert t.add(ev(5, "created", sourceKind="image")) is None
    t.add(ev(4, "cancel_requested", by="dev"))
    assert [e.seq for e in t.entries] == [4, 5] and 4 in t


def at(seq, second):
    return {**ev(seq, "created"), "createdAt": f"2026-01-01T00:00:{second:02d}+00:00"}


def test_a_live_reader_reads_on_after_the_settled_seq_only():
    t = timeline.build([at(1, 0), at(2, 5), at(3, 40), at(5, 50)])
    # Seq 4 may still commit: events that began within the window of the newest are re-read.
    assert t.settled_seq(window=timedelta(seconds=30)) == 2
    assert t.settled_seq(window=timedelta(seconds=5)) == 3
    assert t.settled_seq(window=timedelta(seconds=60)) == 0
    assert timeline.Timeline().settled_seq() == 0


def test_status_entries_name_the_move_the_reason_and_the_person():
    line = timeline.entry(
        ev(
            7,
            "status",
            **{"from": "running", "to": "cancelled", "verdict": "cancelled", "by": "dev"},
        )
    )
    assert line.title == "Running → Cancelled" and line.detail == "cancelled (by dev)"
    reaped = timeline.entry(
        ev(
            8,
            "status",
            **{
                "from": "running",
                "to": "failed",
                "verdict": "failed",
                "reason": "interrupted",
                "by": "reaper",
                "message": "the server stopped",
            },
        )
    )
    assert reaped.detail == "the server stopped (by reaper)"


def test_outcome_itemizes_a_cancelled_run():
    snap = {
        "status": "cancelled",
        "appliedResources": [{"kind": "Deployment", "name": "web"}],
        "plannedResources": [
            {"kind": "Deployment", "name": "web"},
            {"kind": "Service", "name": "web"},
        ],
        "cancellation": None,
    }
    out = timeline.outcome(snap)
    assert out.extent == "partially" and out.not_applied == [{"kind": "Service", "name": "web"}]
    assert timeline.outcome({**snap, "status": "running"}) is None
