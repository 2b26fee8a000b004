"""FencedHandle: the TaskHandle a runner is given (engine/runners/context.py), its only capability
surface. Every write is fenced on the lease epoch."""

import logging
import time
from contextlib import contextmanager
from uuid import UUID

from gevent.lock import BoundedSemaphore
from psycopg.types.json import Jsonb

from engine.abort import CANCEL, LEASE_LOST, Aborted, AbortSignal
from engine.cleanup import task_runtimes as runtimes
from engine.core.status import CANCEL_REFUSES, Status
from engine.core.transitions import Fence, Move, transition
from engine.db import Database, Leased, write_key
from engine.errors import DatabaseUnavailable, LeaseLost
from engine.trust import secrets

log = logging.getLogger(__name__)

#: Longest failure message and timeline detail stored (cut after scrubbing, never before).
MESSAGE_MAX_CHARS = 500
DETAIL_MAX_CHARS = 300


class FencedHandle:
    """What a runner may do to its task while it holds the lease (epoch `epoch`, owner `owner`).

    A write that finds the lease gone fires the abort signal and raises LeaseLost: a zombie runner
    stops at its next write and can never overwrite what the reaper or a new claim decided.
    Everything written is scrubbed of this run's known secret values first.
    """

    def __init__(
        self,
        db: Database,
        task_id: UUID,
        *,
        epoch: int,
        owner: str,
        abort: AbortSignal,
        secret_values: list[str] = (),
        live=None,
        notices=None,
        runtime_stop_timeout_s: float = 5.0,
        slots: BoundedSemaphore | None = None,
        lease_deadline: float | None = None,
    ):
        #: When this run's lease expires at the latest, by this process's clock
        #: (time.monotonic()): the time before the statement that claimed or last renewed it,
        #: plus the TTL. Every write is retried through a database blip until then and none is
        #: sent after it: the lease is this run's only right to write. None: no lease clock
        #: (a bare handle), statements retry for the database's default budget.
        self.lease_deadline = lease_deadline
        #: With `slots` (EngineRuntime.runner_slots), every statement of this run waits for one:
        #: runs in flight never hold every pool connection the requests need.
        self.db = Leased(db, slots, lambda: self.lease_deadline)
        self.task_id = task_id
        self.epoch = epoch
        self.owner = owner
        self.abort = abort
        self.secret_values = list(secret_values)
        #: Where unpersisted frames for this process's viewers go (a LiveFeed,
        #: engine/maintenance/listener.py).
        self._live = live
        #: Where this run's committed writes are announced (RunnerNotices, engine/core/notices.py):
        #: they do not notify one by one. Without it (a bare handle) status moves notify at once.
        self._notices = notices
        #: Graceful window before SIGKILL when one of this run's local process groups is stopped.
        self.runtime_stop_timeout_s = runtime_stop_timeout_s
        #: The terminal or parked status this run reached through the handle, if any.
        self.outcome: Status | None = None
        #: The terminal or parked status this run is writing or wrote: once set, a notification
        #: that the lease left this run is its own write landing, not a loss to stop for.
        self.ending: Status | None = None
        #: Applied-resource evidence, kept in memory too so a cancel can itemize it.
        self.planned: list[dict] = []
        self.applied: list[dict] = []
        #: Whether this run recorded a local process group: only then has its end any to release.
        self.started_local_process = False
        #: What `hold` keeps for this run's next write: (timeline steps, artifact patch, phase).
        self._held: tuple = NOTHING_HELD

    def add_secret_values(self, values) -> None:
        """Scrub these values too from everything this run writes (e.g. inputs a template
        declares sensitive, or credentials the runner generated). Memory only."""
        self.secret_values.extend(v for v in values if isinstance(v, str))

    def stream_scrubber(self) -> secrets.StreamScrubber:
        """A scrubber for text streamed in pieces, over this run's known secret values."""
        return secrets.StreamScrubber(self.secret_values)

    def publish(self, kind: str, payload: dict) -> None:
        """Show a frame to live viewers on this process, scrubbed, without persisting it."""
        if self._live is not None:
            self._live.publish(self.task_id, kind, self._scrub(payload))

    # -- reads -----------------------------------------------------------------------------
    def checkpoint(self) -> None:
        """Stop here if the run was aborted or a cancel is pending (raises Aborted).

        Needed only where no fenced write came just before: every write answers the same
        question under the row lock (see `_confirmed`), so with something held the checkpoint is
        the write that records it."""
        self.abort.raise_if_aborted()
        if self._held != NOTHING_HELD:
            self._write()
            return
        with self._leased():
            row = self.db.one("task_checkpoint_if_held", abort=self._live_abort(), **self._fence())
        self._confirmed(row)

    # -- fenced writes -----------------------------------------------------------------------
    def emit_event(self, kind: str, payload: dict | None = None) -> None:
        """Append an event to the task's history."""
        self._write(events=[{"kind": kind, "payload": payload or {}}])

    def update_timeline(
        self,
        step: str,
        state: str,
        detail: str | None = None,
        *,
        artifacts: dict | None = None,
        phase: str | None = None,
        **extra,
    ) -> None:
        """Record a timeline step's state ("started", "done", "failed", "skipped"); with
        `artifacts` and/or `phase`, merge those keys and set the phase in the same write."""
        self.record_steps(
            [self.step(step, state, detail, **extra)], artifacts=artifacts, phase=phase
        )

    def step(self, step: str, state: str, detail: str | None = None, **extra) -> dict:
        """A timeline step's payload, for `record_steps` (nothing is written)."""
        payload = {"step": step, "state": state, **extra}
        if detail:
            payload["detail"] = self._bounded(detail, DETAIL_MAX_CHARS)
        return payload

    def record_steps(
        self, steps: list[dict], *, artifacts: dict | None = None, phase: str | None = None
    ) -> None:
        """Several timeline steps (from `step`), in order, with `artifacts` and `phase`, in one
        fenced write: what ends one step and begins the next costs one statement."""
        self._write(
            events=[{"kind": "step", "payload": p} for p in steps], patch=artifacts, phase=phase
        )

    def hold(
        self, steps: list[dict], *, artifacts: dict | None = None, phase: str | None = None
    ) -> None:
        """Keep these steps (from `step`), artifacts and phase for this run's next write, which
        records them first, in the same statement. Only for what follows the last call that
        changes the cluster: nothing held is a cancel checkpoint, and no record must land before
        a next call. `direct.verify` holds the end of the last apply and its own start until
        the first readiness look, so a deployment ready at once is recorded complete in one
        statement, and one that is not is recorded as such before the wait. What a crash
        before that write loses: the timeline shows the last apply started, never done (as a
        crash during the apply would), and the task fails interrupted (docs/scale.md, "What a crash
        can lose")."""
        self._remember(artifacts)  # a cancel itemizes from memory: held resources count
        self._held = _after(self._held, steps, artifacts, phase)

    def flush(self) -> None:
        """Write what `hold` kept, if anything: a fenced write, and so a checkpoint."""
        if self._held != NOTHING_HELD:
            self._write()

    def set_state(
        self,
        *,
        status: Status | None = None,
        phase: str | None = None,
        steps: list[dict] = (),
        artifacts: dict | None = None,
    ) -> None:
        """Move running -> applying (a guarded transition), or without a status set the phase;
        `steps` (from `step`) and `artifacts` are recorded in the same statement either way."""
        if status is not None:
            self._move(status, phase=phase, steps=steps, artifacts=artifacts)
        else:
            self.record_steps(list(steps), artifacts=artifacts, phase=phase)

    def set_artifacts(self, **patch) -> None:
        """Merge keys into the artifact summary (resultIdentities, plannedResources, ...)."""
        self._write(patch=patch)

    def strip_source_keys(self, field: str, names: list[str]) -> None:
        """Remove these keys from the persisted source's `field` map and record their names on
        sensitive_keys, so clones re-ask them (a runner's re-scrub: it can only remove)."""
        self.flush()  # what is held comes first
        with self._leased():
            row = self.db.one(
                "task_strip_source_keys_if_held",
                field=field,
                names=sorted(names),
                abort=self._live_abort(),
                **self._fence(),
            )
        if row is None:
            self._lost()

    def start_local_process(
        self,
        argv: list[str],
        *,
        label: str | None = None,
        resume: dict | None = None,
        **popen_kwargs,
    ) -> runtimes.RecordedProcessGroup:
        """Start argv in a process group of its own, recorded as a task runtime (fenced) before it
        is used; `resume` is kept past its death for a later run. Stop it with `.stop()` or
        `.wait(abort)`; whatever still runs when the run ends is stopped by the engine."""
        self.abort.raise_if_aborted()
        self.flush()  # what is held comes first
        self.started_local_process = True  # first: a start that dies half-way is released too
        process = runtimes.start_local_runtime(
            self.db,
            self.task_id,
            epoch=self.epoch,
            owner=self.owner,
            argv=argv,
            label=label,
            resume=resume,
            stop_timeout_s=self.runtime_stop_timeout_s,
            **popen_kwargs,
        )
        if process is None:
            self._lost()
        return process

    def record_devbox(self, devbox_id: str) -> None:
        """Record the task's devbox before using it, so the engine can pause it if this run dies."""
        self.flush()  # what is held comes first
        with self._leased():
            row = self.db.one(
                "task_set_devbox_if_held",
                devbox_id=devbox_id,
                abort=self._live_abort(),
                **self._fence(),
            )
        if row is None:
            self._lost()

    def devbox_paused(self, devbox_id: str) -> None:
        """Record that this run paused its devbox (allowed after the terminal write too)."""
        self.db.one("task_mark_devbox_paused", task_id=self.task_id, devbox_id=devbox_id, now=None)

    def request_inputs(self, inputs: list[dict], message: str | None = None) -> None:
        """Park the task blocked, asking for these inputs (declarations only, never values). A
        cancel pending wins: the park is refused and Aborted(CANCEL) raised, as for `complete`
        (a parked task has no runner to acknowledge a cancel)."""
        self.set_artifacts(pendingInputs=inputs)
        self._move(Status.BLOCKED, reason="inputs_required", message=message)

    def complete(self, steps: list[dict] = ()) -> None:
        """applying -> completed: every required result resource is ready; `steps` (from `step`)
        are recorded before the verdict in the same statement. A cancel pending wins: the move is
        refused (and its steps with it) and Aborted(CANCEL) raised, as a checkpoint would."""
        self._move(Status.COMPLETED, phase="done", steps=steps)

    def fail(self, reason: str, message: str) -> None:
        """-> failed with a reason code and a message for the user."""
        self._move(Status.FAILED, reason=reason, message=self._bounded(message, MESSAGE_MAX_CHARS))

    def acknowledge_cancel(self) -> None:
        """-> cancelled, itemizing what was applied (nothing, partially, fully). Deletes nothing."""
        applied_names = {(r["kind"], r["name"]) for r in self.applied}
        not_applied = [r for r in self.planned if (r["kind"], r["name"]) not in applied_names]
        extent = "nothing" if not self.applied else "fully" if not not_applied else "partially"
        self.set_artifacts(
            cancellation={
                "applied": extent,
                "appliedResources": self.applied,
                "notAppliedResources": not_applied,
            }
        )
        self._move(
            Status.CANCELLED, reason="cancel_acknowledged", message=f"cancelled; {extent} applied"
        )

    # -- internals -----------------------------------------------------------------------------
    def _write(
        self,
        *,
        events: list[dict] = (),
        patch: dict | None = None,
        phase: str | None = None,
    ) -> None:
        """One fenced statement: events ({kind, payload}, in order), an artifact patch and a
        phase, whichever are given, after whatever was held."""
        held, patch, phase = _after(self._take_held(), [], patch, phase)
        events = [{"kind": "step", "payload": p} for p in held] + list(events)
        self._remember(patch)
        with self._leased():
            row = self.db.one(
                "task_write_if_held",
                events=Jsonb(self._scrub(list(events))),  # a JSON array, not a SQL one
                # Names this write's events: sent again after a lost connection, it adds none.
                write_key=write_key(),
                patch=None if patch is None else self._scrub(patch),
                phase=phase,
                abort=self._live_abort(),
                **self._fence(),
            )
        if row is not None and self._notices is not None:
            self._notices.changed(row["workspace"], row["project_id"], self.task_id)
        self._confirmed(row)

    def _remember(self, patch: dict | None) -> None:
        """Keep the plan and the applied resources of a patch in memory too, so a cancel can
        itemize what was applied."""
        if patch is not None:
            if "plannedResources" in patch:
                self.planned = list(patch["plannedResources"])
            if "appliedResources" in patch:
                self.applied = list(patch["appliedResources"])

    def _confirmed(self, row: dict | None) -> None:
        """Act on what a fenced statement said about the lease: gone raises LeaseLost; a cancel
        pending fires the abort and raises Aborted, so a write doubles as a checkpoint (after the
        abort fired, writes land without raising: they record the outcome)."""
        if row is None:
            self._lost()
        if row["cancel_pending"] and not self.abort.aborted:
            self.abort.abort(CANCEL)
            raise Aborted(CANCEL)

    def _move(
        self,
        to: Status,
        *,
        reason: str | None = None,
        message: str | None = None,
        phase: str | None = None,
        steps: list[dict] = (),
        artifacts: dict | None = None,
    ) -> None:
        if to is not Status.APPLYING:
            self.ending = to
        held = self._take_held()
        steps, artifacts, phase = _after(held, steps, artifacts, phase)
        self._remember(artifacts)
        move = Move(
            self.task_id,
            to,
            fence=Fence(self.epoch, self.owner),
            reason=reason,
            message=message,
            phase=phase,
            actor="runner",
            steps=tuple(self._scrub([{"kind": "step", "payload": p} for p in steps])),
            artifacts=None if artifacts is None else self._scrub(artifacts),
        )
        with self._leased():
            moved = transition(self.db, move, abort=self._live_abort(), notices=self._notices)
        if not moved:
            if to in CANCEL_REFUSES:  # a completion or a park
                self.ending = None
                # What was held is still true: the outcome the cancel leads to records it.
                self._held = held
                self.checkpoint()  # a pending cancel refused it: raises Aborted(CANCEL)
                if self.abort.aborted:  # ... or the abort already fired for it
                    raise Aborted(self.abort.reason)
            self._lost()
        if to is Status.APPLYING:
            # Still leased: the moved row answers a checkpoint's question like any fenced write.
            self._confirmed({"cancel_pending": moved[0]["cancel_requested_at"] is not None})
        else:
            self.outcome = to

    def _take_held(self) -> tuple:
        held, self._held = self._held, NOTHING_HELD
        return held

    @contextmanager
    def _leased(self):
        """Around each fenced statement: none is sent once the lease may have expired, and a
        database that stayed unavailable until then (the statement retried meanwhile) means the
        same: the lease is as good as lost. The run stops and writes nothing more; the reaper
        resolves the task once the database is back (failed: interrupted)."""
        if self.lease_deadline is not None and time.monotonic() >= self.lease_deadline:
            self._lost()
        try:
            yield
        except DatabaseUnavailable:
            if self.lease_deadline is None:
                raise
            log.warning("task %s: the database stayed unavailable past the lease", self.task_id)
            self._lost()

    def _live_abort(self) -> AbortSignal | None:
        # Statements before the abort are cancelled by it; the outcome writes after it must land.
        return None if self.abort.aborted else self.abort

    def _fence(self) -> dict:
        return {"task_id": self.task_id, "epoch": self.epoch, "owner": self.owner}

    def _scrub(self, obj):
        return secrets.scrub(obj, self.secret_values)

    def _bounded(self, text: str, limit: int) -> str:
        """Scrubbed, THEN cut: cutting first could leave a secret's prefix behind."""
        text = self._scrub(str(text))
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def _lost(self):
        self.abort.abort(LEASE_LOST)
        raise LeaseLost()


#: (steps, artifact patch, phase): nothing held.
NOTHING_HELD: tuple = ((), None, None)


def _after(held: tuple, steps, patch: dict | None, phase: str | None) -> tuple:
    """(steps, patch, phase) of what was held (`FencedHandle.hold`) followed by these: its steps
    first, then these; these patch keys and this phase win."""
    held_steps, held_patch, held_phase = held
    if held_patch is not None:
        patch = held_patch if patch is None else {**held_patch, **patch}
    return (*held_steps, *steps), patch, phase or held_phase
