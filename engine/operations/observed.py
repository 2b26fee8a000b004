"""Integration calls, observed: latency and errors per integration, and failure streaks.

The integrations stay stateless and storage-free; the runtime hands runners and the cleanup worker
these wrappers instead. A call that raises is a failure of its integration (metric, streak
`integration:<name>`), except for answers that prove the integration works: a typed absence
(`NotFound`) or a document the cluster refused (`ApplyError`: the user's manifest, not an outage).
An abort is neither a failure nor a success.
"""

import dataclasses
import inspect
import time

from engine.abort import Aborted
from engine.integrations import Integrations
from engine.integrations.base import ApplyError, NotFound
from engine.operations import metrics
from engine.operations.streaks import Streaks
from engine.trust import secrets

#: The calls measured per integration (bounded metric labels); other attributes pass through.
OPERATIONS = {
    "devbox": frozenset({"create", "attach", "exec", "pause", "delete"}),
    "gateway": frozenset({"stream_chat"}),
    "cluster": frozenset({"apply", "readiness", "delete", "pods", "events", "log_tail"}),
}
#: Errors that are answers: the integration is reachable and working.
ANSWERS = (NotFound, ApplyError)


class Observed:
    """Wraps one integration client; attribute access passes through to it."""

    def __init__(
        self,
        target,
        *,
        integration: str,
        subject: str,
        streaks: Streaks,
        secret_values: list[str] | None = None,
    ):
        self._target = target
        self._integration = integration
        self._subject = subject
        self._streaks = streaks
        #: A run's secrets: an error quoting a manifest must not carry them into a streak row.
        self._secret_values = list(secret_values or [])

    def __getattr__(self, name):
        value = getattr(self._target, name)
        if name not in OPERATIONS[self._integration] or not callable(value):
            return value

        def call(*args, **kwargs):
            start = time.perf_counter()
            try:
                result = value(*args, **kwargs)
            except BaseException as exc:
                self._settle(name, start, exc)
                raise
            if inspect.isgenerator(result):
                return self._stream(name, start, result)
            self._settle(name, start, None)
            return result

        return call

    def __repr__(self) -> str:
        return f"Observed({self._target!r})"

    def _stream(self, name: str, start: float, stream):
        """A streamed answer is one call: it ends when the stream does."""
        try:
            yield from stream
        except BaseException as exc:
            self._settle(name, start, exc)
            raise
        self._settle(name, start, None)

    def _settle(self, name: str, start: float, error: BaseException | None) -> None:
        labels = {"integration": self._integration, "operation": name}
        metrics.INTEGRATION_DURATION.labels(**labels).observe(time.perf_counter() - start)
        if isinstance(error, (Aborted, GeneratorExit)):
            return
        if error is None or isinstance(error, ANSWERS):
            self._streaks.succeeded(self._subject)
        elif isinstance(error, Exception):
            metrics.INTEGRATION_ERRORS.labels(**labels).inc()
            self._streaks.failed(
                self._subject,
                secrets.scrub(f"{type(error).__name__}: {error}", self._secret_values),
            )


def observe_integrations(integrations: Integrations, streaks: Streaks) -> Integrations:
    """The same integrations, devbox and gateway calls observed (clusters: `observe_cluster`)."""
    replaced = {}
    for name in ("devbox", "gateway"):
        target = getattr(integrations, name)
        if target is not None and not isinstance(target, Observed):
            replaced[name] = Observed(
                target, integration=name, subject=f"integration:{name}", streaks=streaks
            )
    return dataclasses.replace(integrations, **replaced)


def observe_cluster(
    cluster, workspace: str, streaks: Streaks, secret_values: list[str]
) -> Observed:
    """A run's cluster client, observed under the workspace whose credentials it uses."""
    return Observed(
        cluster,
        integration="cluster",
        subject=f"integration:cluster:{workspace}",
        streaks=streaks,
        secret_values=secret_values,
    )
