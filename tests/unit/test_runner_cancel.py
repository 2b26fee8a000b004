"""Runners against a fake TaskHandle: cooperative-cancel properties (the secondary seam)."""

import gevent
import pytest

from engine.abort import CANCEL, Aborted, AbortSignal
from engine.runners import direct
from engine.runners.context import RunContext
from tests.fakes import FakeCluster
from tests.helpers import wait_for


class FakeHandle:
    """The TaskHandle surface in memory: records every write; a pending cancel shows at a
    checkpoint and at the next write (which lands, then raises: a write doubles as a checkpoint).
    tests/integration/test_fencing.py holds the same properties against the real handle."""

    def __init__(self):
        self.abort = AbortSignal()
        self.writes: list[tuple] = []
        self.cancel_pending = False
        self.checkpoints_seeing_cancel = 0
        self.planned, self.applied = [], []
        self.outcome = None
        #: Steps held for the next write (TaskHandle.hold), which records them first.
        self.held: list[tuple] = []

    def checkpoint(self):
        self.abort.raise_if_aborted()
        if self.held:
            self.flush()  # the write that records what is held answers the same question
        self._saw_cancel("checkpoint")

    def _saw_cancel(self, where):
        if self.cancel_pending:
            self.checkpoints_seeing_cancel += 1
            self.writes.append((f"{where} saw the cancel",))
            self.abort.abort(CANCEL)
            raise Aborted(CANCEL)

    def _write(self, *what):
        assert not self.abort.aborted, f"write after the abort: {what}"
        if self.held:
            what, self.held = (*what, ("held", self.held)), []
        self.writes.append(what)
        self._saw_cancel("write")

    def hold(self, steps, *, artifacts=None, phase=None):
        self.held += [(s["step"], s["state"]) for s in steps]

    def flush(self):
        if self.held:
            self._write("flush")

    def emit_event(self, kind, payload=None):
        self._write("event", kind, payload)

    def update_timeline(self, step, state, detail=None, **extra):
        self._write("step", step, state)

    def step(self, step, state, detail=None, **extra):
        return {"step": step, "state": state}

    def record_steps(self, steps, *, artifacts=None, phase=None):
        self._write("steps", [(s["step"], s["state"]) for s in steps])

    def set_state(self, *, status=None, phase=None, steps=(), artifacts=None):
        self._write("state", status, phase, [(s["step"], s["state"]) for s in steps])

    def set_artifacts(self, **patch):
        self._write("artifacts", sorted(patch))

    def complete(self, steps=()):
        self._write("complete", [(s["step"], s["state"]) for s in steps])
        self.outcome = "completed"

    def fail(self, reason, message):
        self._write("fail", reason)
        self.outcome = "failed"

    def request_inputs(self, inputs, message=None):
        self._write("inputs")


def context(cluster):
    return RunContext(
        task_id="t",
        project_id="demo",
        target_namespace="demo",
        cluster=cluster,
        source={"kind": "image", "image": "nginx", "name": "web", "port": 80},
        readiness_timeout_s=30,
        readiness_poll_s=0.01,
    )


def test_after_a_checkpoint_sees_the_cancel_no_further_write_happens():
    cluster = FakeCluster(apply_delay_s=0.05)
    handle = FakeHandle()
    runner = gevent.spawn(direct.run, handle, context(cluster))
    wait_for(
        lambda: any(c.outcome == "ok" for c in cluster.calls), interval=0.005, message="an apply"
    )
    handle.cancel_pending = True
    applies_started = sum(c.op == "apply" for c in cluster.calls)
    runner.join(timeout=30)  # bounds a failure only
    assert isinstance(runner.exception, Aborted) and runner.exception.reason == CANCEL
    assert handle.checkpoints_seeing_cancel == 1
    # What saw the cancel is the last thing that happened: no write, no apply after (a read may
    # come between: after the last apply, the first readiness look is what leads to a write).
    assert handle.writes[-1] in {("checkpoint saw the cancel",), ("write saw the cancel",)}
    assert sum(c.op == "apply" for c in cluster.calls) == applies_started
    assert handle.outcome is None


def test_the_abort_reaches_an_in_flight_apply_at_once():
    cluster = FakeCluster(apply_delay_s=60)
    handle = FakeHandle()
    runner = gevent.spawn(direct.run, handle, context(cluster))
    wait_for(cluster.applying.is_set, interval=0.005, message="the apply to start")
    handle.abort.abort(CANCEL)
    runner.join(timeout=30)  # bounds a failure only
    assert runner.dead and isinstance(runner.exception, Aborted)
    assert [c.outcome for c in cluster.calls] == ["aborted"]


def test_the_abort_reaches_a_readiness_wait():
    cluster = FakeCluster(ready_after_polls="never")
    handle = FakeHandle()
    runner = gevent.spawn(direct.run, handle, context(cluster))
    wait_for(lambda: cluster.polls >= 3, interval=0.005, message="readiness polls")
    handle.abort.abort(CANCEL)
    runner.join(timeout=30)  # bounds a failure only
    assert isinstance(runner.exception, Aborted)
    assert handle.outcome is None


@pytest.mark.parametrize("never_ready", [False, True])
def test_the_runner_completes_only_when_ready(never_ready):
    cluster = FakeCluster(ready_after_polls="never" if never_ready else 3)
    handle = FakeHandle()
    ctx = context(cluster)
    ctx.readiness_timeout_s = 0.2
    direct.run(handle, ctx)
    assert handle.outcome == ("failed" if never_ready else "completed")
    if never_ready:
        assert ("fail", "readiness_timeout") in handle.writes


@pytest.mark.parametrize(("port", "words"), [(None, "1 resource"), (80, "2 resources")])
def test_the_render_step_counts_its_resources_in_words(port, words):
    details = []

    class DetailHandle(FakeHandle):
        def step(self, step, state, detail=None, **extra):
            details.append((step, state, detail))
            return super().step(step, state, detail, **extra)

    ctx = context(FakeCluster())
    ctx.source = {"kind": "image", "image": "nginx", "name": "web"}
    if port:
        ctx.source["port"] = port
    direct.run(DetailHandle(), ctx)
    assert ("render", "done", words) in details
