"""Fakes at the integrations boundary. They record every call and honour abort signals."""

import threading
from dataclasses import dataclass, field

from engine.abort import AbortSignal
from engine.integrations.base import (
    AppliedResource,
    ApplyError,
    Forbidden,
    Readiness,
    ResourceRef,
)


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
    #: Why-not-ready reads: the pods every selector matches, events by pod name, logs by
    #: (pod, container), and the reads ("pods", "events", "logs") the credential may not make.
    pod_list: list = field(default_factory=list)
    pod_events: dict = field(default_factory=dict)
    logs: dict = field(default_factory=dict)
    deny_reads: set = field(default_factory=set)
    #: An error every apply raises (typed refusals: Forbidden, ClusterUnreachable, ...).
    apply_error: Exception | None = None

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
        if self.apply_error is not None:
            call.outcome = "error"
            raise self.apply_error
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

    def delete(self, ref: ResourceRef, *, abort: AbortSignal) -> None:
        abort.raise_if_aborted()
        self.calls.append(Call("delete", ref, outcome="ok"))

    def pods(self, namespace: str, selector: dict, *, abort: AbortSignal) -> list[dict]:
        self._read("pods", namespace, abort, selector=selector)
        return list(self.pod_list)

    def events(self, namespace: str, involved: str, *, abort: AbortSignal) -> list[dict]:
        self._read("events", namespace, abort, involved=involved)
        return list(self.pod_events.get(involved, []))

    def log_tail(
        self, namespace: str, pod: str, container: str, *, lines: int, abort: AbortSignal
    ) -> str:
        self._read("logs", namespace, abort, pod=pod, container=container)
        return "\n".join(self.logs.get((pod, container), "").splitlines()[-lines:])

    def _read(self, what: str, namespace: str, abort: AbortSignal, **args) -> None:
        abort.raise_if_aborted()
        call = Call(what, ResourceRef("v1", what, str(args), namespace))
        self.calls.append(call)
        if what in self.deny_reads:
            call.outcome = "error"
            raise Forbidden(
                f"fake: may not read {what}", verb="list", resource=what, namespace=namespace
            )
        call.outcome = "ok"

    def reads(self, what: str) -> list[Call]:
        return [c for c in self.calls if c.op == what]

    def deletes(self) -> list[Call]:
        return [c for c in self.calls if c.op == "delete"]

    def applied(self) -> list[str]:
        return [c.ref.label() for c in self.calls if c.op == "apply" and c.outcome == "ok"]


# -- AI runner fakes: a devbox at the integrations boundary, a chat-completions server on loopback.
import json  # noqa: E402
import time  # noqa: E402
from collections import deque  # noqa: E402

import gevent  # noqa: E402
from gevent.event import Event  # noqa: E402
from gevent.pywsgi import WSGIServer  # noqa: E402

from engine.integrations.base import IntegrationError, NotFound  # noqa: E402
from engine.integrations.devbox import ExecResult  # noqa: E402


@dataclass
class DevboxCall:
    op: str
    devbox_id: str | None
    workspace: str
    command: list | None = None
    #: Whether the call's abort signal had already fired when it was made.
    aborted_on_entry: bool = False
    outcome: str = "pending"


@dataclass
class FakeDevbox:
    """Devboxes in memory; records every call and honours abort signals.

    `exec_results` maps a command prefix (the argv joined by spaces) to its ExecResult; any other
    command succeeds with no output.
    """

    create_delay_s: float = 0.0
    exec_results: dict = field(default_factory=dict)
    calls: list = field(default_factory=list)
    #: id -> "running" | "paused"
    boxes: dict = field(default_factory=dict)
    paused: threading.Event = field(default_factory=threading.Event)
    #: Ops ("pause", "delete", ...) that fail with a retryable IntegrationError (cleanup tests);
    #: its message is `fail_message` (a test can make it *say* "not found": still not typed).
    fail_ops: set = field(default_factory=set)
    fail_message: str = "HTTP 503"

    def create(self, *, workspace, task_id, abort):
        call = self._call("create", None, workspace, abort)
        try:
            abort.sleep(self.create_delay_s)
        except BaseException:
            call.outcome = "aborted"
            raise
        call.devbox_id = f"fdbx-{sum(c.op == 'create' for c in self.calls)}"
        self.boxes[call.devbox_id] = "running"
        call.outcome = "ok"
        return call.devbox_id

    def attach(self, devbox_id, *, workspace, abort):
        call = self._call("attach", devbox_id, workspace, abort)
        abort.raise_if_aborted()
        self._known(call)
        self.boxes[devbox_id] = "running"
        call.outcome = "ok"

    def exec(self, devbox_id, command, *, workspace, abort, timeout_s=None):
        call = self._call("exec", devbox_id, workspace, abort, command=list(command))
        abort.raise_if_aborted()
        self._known(call)
        if self.boxes[devbox_id] != "running":
            call.outcome = "error"
            raise IntegrationError("fake: exec in a paused devbox")
        joined = " ".join(command)
        call.outcome = "ok"
        for prefix, result in self.exec_results.items():
            if joined.startswith(prefix):
                return result
        return ExecResult(0, "", "")

    def pause(self, devbox_id, *, workspace, abort):
        call = self._call("pause", devbox_id, workspace, abort)
        abort.raise_if_aborted()
        self._known(call)
        self.boxes[devbox_id] = "paused"
        call.outcome = "ok"
        self.paused.set()

    def delete(self, devbox_id, *, workspace, abort):
        call = self._call("delete", devbox_id, workspace, abort)
        abort.raise_if_aborted()
        self._known(call)
        del self.boxes[devbox_id]
        call.outcome = "ok"

    def ops(self) -> list[str]:
        return [c.op for c in self.calls]

    def _call(self, op, devbox_id, workspace, abort, command=None) -> DevboxCall:
        call = DevboxCall(op, devbox_id, workspace, command, aborted_on_entry=abort.aborted)
        self.calls.append(call)
        if op in self.fail_ops:
            call.outcome = "error"
            raise IntegrationError(f"fake: {op} {devbox_id}: {self.fail_message}")
        return call

    def _known(self, call: DevboxCall) -> None:
        if call.devbox_id not in self.boxes:
            call.outcome = "not_found"
            raise NotFound(f"fake: no devbox {call.devbox_id}")


#: How long a scripted answer waits for the test's `hold` or `resume` at most (bounds a failure).
HELD_MAX_S = 60.0


@dataclass
class Reply:
    """One scripted answer of FakeGatewayServer."""

    #: The assistant's whole answer, streamed in `chunk_chars` pieces.
    text: str = ""
    chunk_chars: int = 8
    #: Delay before each piece (a slow model).
    delay_s: float = 0.0
    #: Delay before the response headers (a slow first byte).
    head_delay_s: float = 0.0
    status: int = 200
    headers: tuple = ()
    #: End the stream after this many pieces (no finish_reason, no [DONE]).
    cut_after: int | None = None
    #: After this many pieces, go silent for `stall_s` (a model that stops mid-answer).
    stall_after: int | None = None
    stall_s: float = 0.0
    #: Events a test sets to let the answer go on: `hold` before the response headers, `resume`
    #: after `stall_after` pieces (instead of `stall_s`). Each wait is bounded by HELD_MAX_S.
    hold: Event | None = None
    resume: Event | None = None
    #: Raw SSE text sent instead of the generated chunks (parser tests), or an error's raw body.
    raw: str | None = None
    finish_reason: str = "stop"


@dataclass
class GatewayRequest:
    method: str
    path: str
    headers: dict
    body: dict | None
    sent: int = 0
    finished: bool = False
    disconnected: bool = False
    at: float = field(default_factory=time.monotonic)


class FakeGatewayServer:
    """An OpenAI-compatible POST /chat/completions on 127.0.0.1 (a gevent WSGIServer) that
    streams scripted replies as SSE chat.completion.chunk events and records every request."""

    def __init__(self):
        self.replies: deque[Reply] = deque()
        self.requests: list[GatewayRequest] = []
        self._server = WSGIServer(("127.0.0.1", 0), self._app, log=None)

    def start(self) -> "FakeGatewayServer":
        self._server.start()
        return self

    def stop(self) -> None:
        self._server.stop(timeout=1)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}/v1"

    def script(self, *replies: Reply) -> None:
        self.replies.extend(replies)

    def _app(self, environ, start_response):
        length = int(environ.get("CONTENT_LENGTH") or 0)
        raw_body = environ["wsgi.input"].read(length) if length else b""
        try:
            body = json.loads(raw_body) if raw_body else None
        except ValueError:
            body = None
        headers = {
            k[5:].replace("_", "-").title(): v for k, v in environ.items() if k.startswith("HTTP_")
        }
        if environ.get("CONTENT_TYPE"):
            headers["Content-Type"] = environ["CONTENT_TYPE"]
        request = GatewayRequest(environ["REQUEST_METHOD"], environ["PATH_INFO"], headers, body)
        self.requests.append(request)
        reply = self.replies.popleft() if self.replies else Reply(status=500)
        if reply.head_delay_s:
            gevent.sleep(reply.head_delay_s)
        if reply.hold is not None:
            reply.hold.wait(HELD_MAX_S)
        if reply.status != 200:
            start_response(
                f"{reply.status} Scripted", [("Content-Type", "application/json"), *reply.headers]
            )
            if reply.raw is not None:
                return [reply.raw.encode()]  # an error answer's raw body
            message = reply.text or f"scripted {reply.status}"  # an error's text, when scripted
            return [json.dumps({"error": {"message": message}}).encode()]
        start_response(
            "200 OK",
            [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache"), *reply.headers],
        )
        return self._stream(reply, request)

    def _stream(self, reply: Reply, request: GatewayRequest):
        def event(delta: dict, finish=None) -> bytes:
            chunk = {
                "id": "chatcmpl-fake",
                "object": "chat.completion.chunk",
                "created": 0,
                "model": "fake",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
            return f"data: {json.dumps(chunk)}\n\n".encode()

        try:
            if reply.raw is not None:
                yield reply.raw.encode()
                request.finished = True
                return
            yield event({"role": "assistant", "content": ""})
            pieces = [
                reply.text[i : i + reply.chunk_chars]
                for i in range(0, len(reply.text), reply.chunk_chars)
            ]
            for n, piece in enumerate(pieces):
                if reply.cut_after is not None and n >= reply.cut_after:
                    return
                if reply.delay_s:
                    gevent.sleep(reply.delay_s)
                if n == reply.stall_after:
                    if reply.resume is not None:
                        reply.resume.wait(HELD_MAX_S)
                    else:
                        gevent.sleep(reply.stall_s)
                yield event({"content": piece})
                request.sent += 1
            yield event({}, finish=reply.finish_reason)
            yield b"data: [DONE]\n\n"
            request.finished = True
        except GeneratorExit:
            request.disconnected = True
            raise
