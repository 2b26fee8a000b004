"""The abort signal every runner and integration call honours (storage-free by design)."""

import gevent
from gevent.event import Event

#: Why a run was aborted; the runtime turns each into the task's outcome.
CANCEL = "cancel"  # -> cancelled, with applied-resource evidence
LEASE_LOST = "lease_lost"  # -> nothing: another writer already decided the task
SHUTDOWN = "shutdown"  # -> failed (interrupted: shutdown), or cancelled if a cancel is pending


class Aborted(Exception):
    """The run was told to stop; `reason` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class AbortSignal:
    """Set once; wakes every waiter and runs every callback (e.g. cancelling a socket or query)."""

    def __init__(self):
        self._event = Event()
        self.reason: str | None = None
        self._callbacks: list = []

    @property
    def aborted(self) -> bool:
        return self._event.is_set()

    def abort(self, reason: str) -> None:
        """Fire the signal; the first reason sticks."""
        if self._event.is_set():
            return
        self.reason = reason
        self._event.set()
        for callback in self._callbacks:
            gevent.spawn(callback)

    def on_abort(self, callback) -> None:
        """Run `callback` (in its own greenlet) when the signal fires, or now if it has."""
        if self._event.is_set():
            gevent.spawn(callback)
        else:
            self._callbacks.append(callback)

    def remove(self, callback) -> None:
        if callback in self._callbacks:
            self._callbacks.remove(callback)

    def raise_if_aborted(self) -> None:
        if self._event.is_set():
            raise Aborted(self.reason or CANCEL)

    def sleep(self, seconds: float) -> None:
        """Sleep, but raise Aborted the moment the signal fires."""
        if self._event.wait(seconds):
            raise Aborted(self.reason or CANCEL)

    def run(self, fn, *args, **kwargs):
        """Run a blocking call in a greenlet and stop waiting for it the moment the signal fires.

        The call's exception is re-raised here, in the caller: the greenlet itself never dies
        raising, so gevent's hub never prints its traceback (which may quote an upstream's
        answer) to stderr, past every scrubber.
        """
        self.raise_if_aborted()
        worker = gevent.spawn(_captured, fn, args, kwargs)
        waiter = gevent.spawn(self._event.wait)
        try:
            gevent.joinall([worker, waiter], count=1)
            if worker.ready():
                value, error = worker.get()
                if error is not None:
                    raise error
                return value
            worker.kill(block=False)
            raise Aborted(self.reason or CANCEL)
        finally:
            waiter.kill(block=False)


def _captured(fn, args, kwargs):
    """(result, None) or (None, the exception): a worker greenlet that never dies raising."""
    try:
        return fn(*args, **kwargs), None
    except Exception as exc:
        return None, exc
