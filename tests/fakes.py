"""Fakes at the integrations boundary. They record every call and honour abort signals."""
import threading
from dataclasses import dataclass, field

from engine.abort import AbortSignal
from engine.integrations.base import ApplyError, AppliedResource, Readiness, ResourceRef


@dataclass
class Call:
    op: str
    ref: ResourceRef
    manifest: dict | None = None
    #: How the call ended: "ok", "error", "aborted".
    outcome: str = "pending"


@dataclass
class FakeCluster:
    """A cluster whose latency, readiness and failures a test scripts."""

    apply_delay_s: float = 0.0
    #: Kinds whose apply fails.
    fail_kinds: set = field(default_factory=set)
    #: None: ready at once; a number: ready after that many readiness polls; "never".
    ready_after_polls: int | str | None = None
    calls: list = field(default_factory=list)
    polls: int = 0
    #: Set while an apply is in flight (tests wait on it to cancel mid-call).
    applying: threading.Event = field(default_factory=threading.Event)

    def apply(self, manifest: dict, *, abort: AbortSignal) -> AppliedResource:
        ref = ResourceRef.of(manifest)
        call = Call("apply", ref, manifest)
        self.calls.append(call)
        self.applying.set()
        try:
            abort.sleep(self.apply_delay_s)
        except BaseException:
            call.outcome = "aborted"
            raise
        finally:
            self.applying.clear()
        if ref.kind in self.fail_kinds:
            call.outcome = "error"
            raise ApplyError(f"fake: {ref.kind} refused", ref)
        call.outcome = "ok"
        return AppliedResource(ref, "created")

    def readiness(self, ref: ResourceRef, *, abort: AbortSignal) -> Readiness:
        abort.raise_if_aborted()
        self.polls += 1
        self.calls.append(Call("readiness", ref, outcome="ok"))
        if self.ready_after_polls == "never":
            return Readiness(False, "never")
        if self.ready_after_polls is None or self.polls >= self.ready_after_polls:
            return Readiness(True, "ready")
        return Readiness(False, "waiting")

    def deletes(self) -> list[Call]:
        return [c for c in self.calls if c.op == "delete"]

    def applied(self) -> list[str]:
        return [c.ref.label() for c in self.calls if c.op == "apply" and c.outcome == "ok"]
