"""A Move's fields and the one status-write statement's parameters (engine/core/transitions.py)."""

import re
import uuid
from dataclasses import fields

from engine.core.status import Status
from engine.core.transitions import Fence, Move, Overdue, statement_params
from engine.sql import queries

#: The statement's parameters that only the reaper's sweep guard sets.
GUARDED = {
    "if_lease_expired",
    "cancel_older_than_s",
    "claimed_older_than_s",
    "created_older_than_s",
}


def params(move: Move) -> dict:
    return statement_params(move, notify=True, move_key="k")


def test_the_statement_takes_exactly_the_parameters_a_move_gives():
    named = set(re.findall(r"%\((\w+)\)s", queries["task_transition"]))
    assert "if_lease_expired" in named  # the control: the pattern reads the placeholders
    assert named == set(params(Move(uuid.uuid4(), Status.FAILED)))


def test_the_reapers_preconditions_are_one_sweep_guard_on_a_move():
    """The four preconditions only the reaper asks are one value (Overdue), not four fields of
    every Move; the statement's parameters are what they were."""
    assert {f.name for f in fields(Overdue)} == {
        "lease_expired",
        "cancel_older_than_s",
        "claimed_older_than_s",
        "created_older_than_s",
    }
    moved_by_guard = {f.name for f in fields(Move)} & (GUARDED | {f.name for f in fields(Overdue)})
    assert moved_by_guard == set()
    task = uuid.uuid4()
    unguarded = params(Move(task, Status.FAILED, fence=Fence(1, "me"), reason="x"))
    assert {name: unguarded[name] for name in GUARDED} == {
        "if_lease_expired": False,
        "cancel_older_than_s": None,
        "claimed_older_than_s": None,
        "created_older_than_s": None,
    }
    guard = Overdue(
        lease_expired=True,
        cancel_older_than_s=1.5,
        claimed_older_than_s=2.5,
        created_older_than_s=3.5,
    )
    swept = params(Move(task, Status.FAILED, reason="x", overdue=guard))
    assert {name: swept[name] for name in GUARDED} == {
        "if_lease_expired": True,
        "cancel_older_than_s": 1.5,
        "claimed_older_than_s": 2.5,
        "created_older_than_s": 3.5,
    }
