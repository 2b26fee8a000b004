"""The per-process engine runtime: launches runners, delivers cancels, drains.

The drain (shutdown()): a stop signal ends admissions at once; the runs in flight go on for up to
DRAIN_WAIT_S with their leases renewed, their cancels delivered and their viewers served, because
their credential lives only in this process's memory and no other process can finish them; then
what still runs is aborted and recorded `failed: interrupted`.

One per process (created by the app factory). Its greenlets: one runner per leased task it
launched, and the loops of engine/maintenance: the lease renewer, the reaper, the cleanup worker
and the NOTIFY listener.
"""

import logging
import os
import socket
import time
import traceback
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, replace
from uuid import UUID

import gevent
from gevent.event import Event
from gevent.lock import BoundedSemaphore

from engine.abort import CANCEL, LEASE_LOST, SHUTDOWN, Aborted, AbortSignal
from engine.cleanup.process_groups import KILL_CONFIRM_S
from engine.core.handle import FencedHandle
from engine.core.notices import RunnerNotices
from engine.core.status import LEASED, Status
from engine.core.transitions import Fence, Move, transition
from engine.db import Database
from engine.errors import DatabaseUnavailable, LeaseLost, Overloaded, ShuttingDown
from engine.integrations import Integrations
from engine.integrations.kube.kubeconfig import credentials as kubeconfig_credentials
from engine.integrations.kube.network import NetworkPolicy
from engine.maintenance.cleanup_worker import CleanupWorker
from engine.maintenance.listener import Listener, LiveFeed
from engine.maintenance.reaper import Reaper
from engine.maintenance.renewer import LeaseRenewer
from engine.operations import logs, metrics
from engine.operations.config import Settings
from engine.operations.observed import observe_cluster, observe_integrations
from engine.operations.streaks import Streaks
from engine.runners import runner_for
from engine.runners.context import RunContext
from engine.trust import secrets

log = logging.getLogger(__name__)


def _runs(count: int) -> str:
    return f"{count} run{'' if count == 1 else 's'}"


@dataclass
class _Run:
    handle: FencedHandle
    greenlet: gevent.Greenlet | None = None


class EngineRuntime:
    def __init__(self, db: Database, settings: Settings, integrations: Integrations):
        self.db = db
        self.settings = settings
        #: Checked at boot: a misspelt READINESS_FAIL_FAST stops the process, not a run.
        self.fail_fast_causes = settings.fail_fast_causes
        #: Where runs reach real clusters (CLUSTER_BACKEND=kubernetes): the networks a
        #: kubeconfig's server may be reached in, checked before any task exists
        #: (engine/lifecycle/kubeconfigs.py). None: the sandbox, which needs no kubeconfig.
        self.cluster_network = (
            NetworkPolicy.from_settings(settings)
            if settings.cluster_backend == "kubernetes"
            else None
        )
        #: Lease owner id: unique per process lifetime, readable by an operator.
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        #: What keeps failing in this process's loops and integration calls (seed 002).
        self.streaks = Streaks(
            db,
            owner=self.owner,
            secret_values=[settings.devbox_signing_key, settings.gateway_api_key],
        )
        self.integrations = observe_integrations(integrations, self.streaks)
        self.listener = Listener(db, streaks=self.streaks)
        #: Unpersisted frames (streamed model tokens) for this process's viewers.
        self.live = LiveFeed()
        #: This process's runners' own writes, announced once per tick.
        self.runner_notices = RunnerNotices(
            db,
            interval_s=settings.runner_notice_interval_s,
            offer_here=self.listener.offer_here,
            streaks=self.streaks,
        )
        self.reaper = Reaper(db, settings, self.streaks)
        self.renewer = LeaseRenewer(
            db,
            settings,
            self.streaks,
            owner=self.owner,
            handles=lambda: {task_id: run.handle for task_id, run in self.runs.items()},
            abort_run=self.abort_local,
        )
        #: Durable cleanup jobs, this process's local runtime groups, startup reconciliation.
        self.cleanup = CleanupWorker(
            db, settings, self.integrations, self.owner, streaks=self.streaks
        )
        self.runs: dict[UUID, _Run] = {}
        #: The pool connections this process's runners may use at once (the rest serve requests).
        self.runner_slots = BoundedSemaphore(
            settings.runner_db_slots or max(1, settings.db_pool_size // 2)
        )
        #: Tasks with a lease-state check queued (a burst of NOTIFYs costs one read).
        self._checking: set[UUID] = set()
        self.accepting = True
        #: Requests admitted to launch a run and not yet done: the drain waits for them, so a
        #: run is either refused (ShuttingDown) or in the set the drain aborts.
        self._admitted = 0
        self._no_admissions = Event()
        self._no_admissions.set()
        #: Set while no run is held and none is being launched: the drain's wait ends there.
        self._idle = Event()
        self._idle.set()
        self._loops: list[gevent.Greenlet] = []
        self._shutdown_done = Event()
        #: A stop signal came: shutdown() began (a second signal calls stop_now()).
        self.stopping = False
        #: The drain is over (stop_now() or its wait ran out): runs launched from here on start
        #: aborted.
        self._aborting = False
        self._stop_now = Event()

    # -- lifecycle -------------------------------------------------------------------------------
    def start(self) -> None:
        self.listener.on_notify(self._on_notify)
        self.listener.start()
        self._loops = [
            gevent.spawn(self.renewer.run_forever),
            gevent.spawn(self.reaper.run_forever),
        ]
        self.cleanup.start()
        self.runner_notices.start()
        log.info("engine runtime %s started", self.owner)

    def shutdown(self, *, stop_now_hint: str = "") -> None:
        """Stop admitting, let the runs in flight go on for up to DRAIN_WAIT_S (or until
        stop_now()), then abort what still runs and fail every lease still held (idempotent).
        `stop_now_hint`: how the operator ends the wait, for the line that announces it."""
        s = self.settings
        if self.stopping:  # a second caller waits for the first one's end
            self._shutdown_done.wait(
                s.drain_wait_s
                + 2 * s.shutdown_grace_s
                + 5
                + s.runtime_stop_timeout_s
                + KILL_CONFIRM_S
            )
            return
        self.stopping = True
        self.accepting = False
        try:
            self._drain(stop_now_hint)
            # Admitted requests finish claiming and launching first, so the abort pass sees them.
            if not self._no_admissions.wait(timeout=s.shutdown_grace_s):
                log.warning("drain: %d launching request(s) still in flight", self._admitted)
            self._aborting = True
            for run in list(self.runs.values()):
                run.handle.abort.abort(SHUTDOWN)
            greenlets = [r.greenlet for r in self.runs.values() if r.greenlet is not None]
            gevent.joinall(greenlets, timeout=s.shutdown_grace_s)
            for task_id, run in list(self.runs.items()):
                self._resolve_interrupted(run.handle, "server shutting down")
                if run.greenlet is not None:
                    run.greenlet.kill(block=False)
                self.runs.pop(task_id, None)
            for loop in self._loops:
                loop.kill(block=False)
            self.cleanup.stop()
            # Local process groups this process started must not outlive it (seed 001).
            self._release_runtimes()
            self.runner_notices.stop()
            # Last: the runs' final writes have reached this process's viewers; their streams
            # close now, and a viewer reconnects to another process.
            self.listener.stop()
        finally:
            self._shutdown_done.set()
            log.info("engine runtime %s drained", self.owner)

    def stop_now(self) -> None:
        """End the drain's wait at once (a second stop signal): what still runs is aborted."""
        if self.stopping and not self._stop_now.is_set():
            log.warning("drain: stopping now; the runs still in flight end interrupted")
        self._stop_now.set()

    def _drain(self, stop_now_hint: str) -> None:
        """Let the runs in flight (and the creates admitted before the signal) go on, their
        leases renewed and their cancels delivered, until none is left, DRAIN_WAIT_S has passed
        or stop_now() is called. The cleanup worker takes no new job meanwhile."""
        wait_s, held = self.settings.drain_wait_s, len(self.runs) + self._admitted
        if self._stop_now.is_set() or wait_s <= 0 or self._idle.is_set():
            return
        self.cleanup.stop_claiming()
        started = time.monotonic()
        hint = f"; {stop_now_hint}" if stop_now_hint else ""
        log.info("draining: waiting up to %g s for %s%s", wait_s, _runs(held), hint)
        gevent.wait([self._idle, self._stop_now], timeout=wait_s, count=1)
        waited, left = time.monotonic() - started, len(self.runs) + self._admitted
        if left:
            log.warning("drain: %s still in flight after %.1f s: aborting", _runs(left), waited)
        else:
            log.info("drain: every run finished after %.1f s", waited)

    def _note_idle(self) -> None:
        """The drain's wait ends when no run is held and none is being launched."""
        if not self.runs and self._admitted == 0:
            self._idle.set()
        else:
            self._idle.clear()

    def unready_reason(self) -> str | None:
        """Why this process should get no traffic now (None: ready): draining, no database, or
        no listener (its viewers and cancels would go stale)."""
        if not self.accepting:
            return "draining"
        try:
            self.db.ping(self.settings.ready_probe_db_timeout_s)
        except DatabaseUnavailable as exc:
            return exc.message  # what kind of fault: refused, lost, shutting down, ...
        except Exception as exc:
            return f"database unreachable ({type(exc).__name__})"
        if not self.listener.connected.is_set():
            return "listener not connected"
        return None

    # -- launching --------------------------------------------------------------------------------
    def ensure_accepting(self) -> None:
        if not self.accepting:
            raise ShuttingDown()

    @contextmanager
    def admission(self):
        """Admit one request that may launch a run: refused once the drain began, or while the
        process holds MAX_RUNS_PER_PROCESS runs, and waited for by the drain until it has
        launched (the checks and the count happen with no yield)."""
        self.ensure_accepting()
        # Admitted requests count as runs: each may launch one, and none has yet, so concurrent
        # creates cannot overshoot (launch() adds to self.runs and the admission ends with no
        # yield between, so a run is never counted twice).
        if len(self.runs) + self._admitted >= self.settings.max_runs_per_process:
            metrics.RUNS_REFUSED.inc()
            raise Overloaded()
        self._admitted += 1
        self._no_admissions.clear()
        self._idle.clear()
        try:
            yield
        finally:
            self._admitted -= 1
            if self._admitted == 0:
                self._no_admissions.set()
            self._note_idle()

    def launch(self, row: dict, *, inputs: dict, kubeconfig: dict | None, leased_at: float) -> None:
        """Run a freshly claimed task in this process, its secrets held only in memory.
        `leased_at`: time.monotonic() before the claim was sent (its lease runs from no earlier)."""
        declared = set(row["sensitive_keys"])
        # The run's scrub list, for its whole life: its secret inputs, the credentials of the
        # kubeconfig it runs with (a hostile cluster may quote them back), and (run_scope in
        # _run) every token it mints.
        secret_values = [
            v
            for k, v in inputs.items()
            if isinstance(v, str) and secrets.is_sensitive(k, declared=declared)
        ] + kubeconfig_credentials(kubeconfig)
        handle = FencedHandle(
            self.db,
            row["id"],
            epoch=row["lease_epoch"],
            owner=self.owner,
            abort=AbortSignal(),
            secret_values=secret_values,
            live=self.live,
            notices=self.runner_notices,
            runtime_stop_timeout_s=self.settings.runtime_stop_timeout_s,
            slots=self.runner_slots,
            lease_deadline=leased_at + self.settings.lease_ttl_s,
        )
        _, run_fn = runner_for(row["source_kind"])
        ctx = RunContext(
            task_id=row["id"],
            project_id=row["project_id"],
            source=row["source"],
            inputs=dict(inputs),
            sensitive_keys=list(row["sensitive_keys"]),
            result_identities=dict(row["artifact_summary"].get("resultIdentities") or {}),
            cluster=None,
            integrations=self.integrations,
            target_namespace=row["project_id"],
            readiness_timeout_s=self.settings.readiness_timeout_s,
            readiness_poll_s=self.settings.readiness_poll_s,
            fail_fast_causes=self.fail_fast_causes,
            artifacts=dict(row["artifact_summary"]),
            workspace=row["workspace"],
        )
        run = _Run(handle)
        self.runs[row["id"]] = run
        self._idle.clear()
        if self._aborting:
            # Claimed after the drain's abort pass (an admission it stopped waiting for): the run
            # starts aborted and resolves itself as interrupted at its first checkpoint.
            handle.abort.abort(SHUTDOWN)
        metrics.LEASES_HELD.set(len(self.runs))
        run.greenlet = gevent.spawn(self._run, run, run_fn, ctx, kubeconfig)

    def _run(self, run: _Run, run_fn, ctx: RunContext, kubeconfig: dict | None) -> None:
        handle = run.handle
        # This greenlet's log lines name the task (engine/operations/logs.py) and are scrubbed of
        # its secrets; tokens minted here join its scrub list.
        logs.TASK.set((str(ctx.task_id), ctx.workspace))
        with secrets.run_scope(handle.secret_values):
            self._run_scoped(run, run_fn, ctx, kubeconfig)

    def _run_scoped(self, run: _Run, run_fn, ctx: RunContext, kubeconfig: dict | None) -> None:
        handle = run.handle
        try:
            try:
                ctx.cluster = observe_cluster(
                    self.integrations.cluster(kubeconfig),
                    ctx.workspace,
                    self.streaks,
                    handle.secret_values,
                )
                run_fn(handle, ctx)
                if handle.outcome is None:
                    handle.fail("runner_error", "the runner stopped without an outcome")
            except Aborted as exc:
                self._resolve_abort(handle, exc.reason)
            except LeaseLost:
                log.info("task %s: lease lost; runner stopped", handle.task_id)
            except Exception as exc:
                if handle.abort.aborted:
                    # The abort broke the call mid-way (e.g. a closed connection): not a failure.
                    self._resolve_abort(handle, handle.abort.reason)
                else:
                    # Scrubbed: an exception message may quote a manifest carrying a secret.
                    log.error(
                        "task %s: runner crashed: %s",
                        handle.task_id,
                        secrets.scrub(traceback.format_exc(), handle.secret_values),
                    )
                    # The handle scrubs, then bounds: cutting first could keep a secret's prefix.
                    handle.fail("runner_error", f"{type(exc).__name__}: {exc}")
        except LeaseLost:
            log.info("task %s: lease lost while recording the outcome", handle.task_id)
        except Exception:
            log.exception("task %s: could not record the outcome", handle.task_id)
        finally:
            self.runs.pop(handle.task_id, None)
            metrics.LEASES_HELD.set(len(self.runs))
            self._note_idle()
            if handle.abort.aborted:
                metrics.RUN_ABORTS.labels(handle.abort.reason).inc()
            if handle.started_local_process:
                self._release_runtimes(handle.task_id)

    def _release_runtimes(self, task_id: UUID | None = None) -> None:
        """Stop the local process groups of a finished run (or, at shutdown, of every run): a
        terminal status releases nothing by itself."""
        try:
            self.cleanup.release_runtimes(task_id)
        except Exception:
            log.exception("releasing local runtimes (task %s) failed; their rows are kept", task_id)

    def _resolve_abort(self, handle: FencedHandle, reason: str | None) -> None:
        if reason == CANCEL:
            handle.acknowledge_cancel()
        elif reason == SHUTDOWN:
            handle.flush()  # what the run held is true: recorded before the run gives up
            self._resolve_interrupted(handle, "server shutting down")
        # LEASE_LOST: someone else already decided the task; a zombie writes nothing.

    def _resolve_interrupted(self, handle: FencedHandle, message: str) -> None:
        """A held lease this process gives up: cancelled if a cancel is pending, else failed."""
        failed = Move(
            handle.task_id,
            Status.FAILED,
            fence=Fence(handle.epoch, self.owner),
            reason="interrupted",
            message=message,
            actor="engine",
        )
        cancelled = replace(
            failed, to=Status.CANCELLED, if_cancel_pending=True, reason="cancel_acknowledged"
        )
        if not transition(self.db, cancelled):
            transition(self.db, failed)

    def abort_local(self, task_id: UUID, reason: str) -> bool:
        """Fire the abort of a runner in this process; whether there was one."""
        run = self.runs.get(task_id)
        if run is None:
            return False
        run.handle.abort.abort(reason)
        return True

    # -- cancel delivery --------------------------------------------------------------------------
    def _on_notify(self, payload: dict) -> None:
        """A task this process runs changed: stop at once on a cancel or a lost lease."""
        try:
            task_id = UUID(payload.get("task", ""))
        except ValueError:
            return
        run = self.runs.get(task_id)
        if run is None or run.handle.abort.aborted:
            return
        if payload.get("runner"):
            return  # the run's own write (engine/core/notices.py): nothing it must stop for
        lease = payload.get("lease")
        if isinstance(lease, dict):
            # The writing statement sent the lease as it left it (its own writes included): no
            # read needed. Notifications arrive in commit order, so the newest one is the truth.
            self._judge(run, lease)
        elif task_id not in self._checking:  # a check already queued reads the newest state
            self._checking.add(task_id)
            gevent.spawn(self._check_run, task_id, run)

    def _judge(self, run: _Run, lease: dict) -> None:
        """Abort a local runner whose lease is gone (LEASE_LOST) or has a cancel pending."""
        held = (
            lease.get("status") in LEASED
            and lease.get("epoch") == run.handle.epoch
            and lease.get("owner") == self.owner
        )
        if not held:
            if run.handle.ending is None:
                run.handle.abort.abort(LEASE_LOST)
        elif lease.get("cancel"):
            run.handle.abort.abort(CANCEL)

    def _check_run(self, task_id: UUID, run: _Run) -> None:
        self._checking.discard(task_id)
        row = self.db.one("task_get_lease_state", task_id=task_id)
        if row is None:
            if run.handle.ending is None:
                run.handle.abort.abort(LEASE_LOST)
            return
        self._judge(
            run,
            {
                "status": row["status"],
                "epoch": row["lease_epoch"],
                "owner": row["lease_owner"],
                "cancel": row["cancel_requested_at"] is not None,
            },
        )
