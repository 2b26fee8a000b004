"""Why a run's workloads are not ready yet: read while the run waits, said as it happens.

With the run's own credential (in memory), the verify loop asks here between readiness polls.
This reads the waiting workloads' pods, the events about the pods that are not ready and the last
log lines of a crashing container; engine/integrations/kube/diagnosis.py turns them into
findings; each new finding goes to the timeline once ("web-7c9f: back-off pulling image
nginx:1.99: not found"). Every write goes through the handle, so log lines are scrubbed of the
task's secrets before they are stored. A credential that may not read pods, events or logs
degrades to one plain line, never to a failed run.
"""

from functools import partial

from engine.integrations.base import (
    CredentialsRefused,
    Forbidden,
    IntegrationError,
    ResourceRef,
)
from engine.integrations.kube.diagnosis import (
    CAUSES,
    CRASH_LOOP,
    OOM_KILLED,
    Finding,
    diagnose,
    not_ready,
    pod_name,
)
from engine.integrations.shapes import optional
from engine.runners.context import RunContext, TaskHandle

#: Pods whose events one look reads at most (each is one API call).
EVENTS_PODS_MAX = 3
#: Log lines of a crashing container a finding quotes.
LOG_LINES = 10
#: Workload kinds whose pods are read, and how their pods are selected when the manifest
#: has no matchLabels (a Job's controller labels its pods with its name).
WORKLOAD_KINDS = {"Deployment", "StatefulSet", "Job"}


class Diagnosis:
    """One run's reading of why its workloads are not ready: what it found, what it said."""

    def __init__(self, handle: TaskHandle, ctx: RunContext, manifests: list[dict]):
        self.handle = handle
        self.ctx = ctx
        self.selectors = {
            ResourceRef.of(m, ctx.target_namespace): selector
            for m in manifests
            if m.get("kind") in WORKLOAD_KINDS and (selector := _selector(m)) is not None
        }
        #: What the credential may not read ("pods", "events", "logs"), said once.
        self.denied: set[str] = set()
        self._said: set[str] = set()
        self._logs: dict[tuple, str] = {}
        #: The latest look's findings, strongest cause first.
        self.findings: list[Finding] = []

    def look(self, waiting: list[ResourceRef]) -> list[Finding]:
        """Read the waiting workloads' pods and events; say each new finding; the findings."""
        findings: list[Finding] = []
        for ref in waiting:
            selector = self.selectors.get(ref)
            if selector is None or "pods" in self.denied:
                continue
            namespace = ref.namespace or self.ctx.target_namespace
            pods = self._read("pods", self.ctx.cluster.pods, namespace, selector) or []
            events = {}
            for pod in not_ready(pods)[:EVENTS_PODS_MAX]:
                if "events" in self.denied:
                    break
                name = pod_name(pod)
                events[name] = self._read("events", self.ctx.cluster.events, namespace, name) or []
            findings += [self._with_log(f, namespace) for f in diagnose(pods, events)]
        self.findings = sorted(findings, key=lambda f: _rank(f.cause))
        self._say()
        return self.findings

    def _read(self, what: str, call, *args):
        try:
            return call(*args, abort=self.handle.abort)
        except (Forbidden, CredentialsRefused):
            self.denied.add(what)
            self.handle.update_timeline(
                "verify",
                "waiting",
                f"no permission to read {what}: why the workload is not ready cannot be shown",
            )
        except IntegrationError:
            pass  # best effort: readiness decides, a failed look only says less
        return None

    def _with_log(self, finding: Finding, namespace: str) -> Finding:
        """A crash's finding with the last lines its container wrote (read once per restart)."""
        if finding.cause not in (CRASH_LOOP, OOM_KILLED) or finding.container is None:
            return finding
        if "logs" in self.denied:
            return finding
        key = (finding.pod, finding.container, finding.restarts)
        if key not in self._logs:
            tail = self._read(
                "logs",
                partial(self.ctx.cluster.log_tail, lines=LOG_LINES),
                namespace,
                finding.pod,
                finding.container,
            )
            self._logs[key] = tail or ""
        tail = self._logs[key]
        if not tail:
            return finding
        return Finding(
            finding.cause,
            finding.pod,
            f"{finding.message}; last log lines:\n{tail}",
            finding.container,
            finding.restarts,
        )

    def _say(self) -> None:
        for finding in self.findings:
            line = finding.line()
            if line not in self._said:
                self._said.add(line)
                self.handle.update_timeline("verify", "waiting", line, cause=finding.cause)


def _selector(manifest: dict) -> dict | None:
    """The labels of a workload's pods, read off its manifest (a model's: any shape)."""
    match = optional(manifest, "spec.selector.matchLabels", dict)
    if match:
        return {str(k): str(v) for k, v in match.items()}
    if manifest.get("kind") == "Job":
        return {"job-name": optional(manifest, "metadata.name", str)}
    return None


def _rank(cause: str) -> int:
    return CAUSES.index(cause) if cause in CAUSES else len(CAUSES)
