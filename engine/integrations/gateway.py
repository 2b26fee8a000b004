"""An OpenAI-compatible chat-completions gateway, streamed, abort-aware.

POST <GATEWAY_URL>/chat/completions with {"model", "messages", "stream": true}; the answer is
server-sent events whose `data:` lines carry chat.completion.chunk objects, ending with
`data: [DONE]`. `stream_chat` yields the content deltas as they arrive.

Retries are bounded and happen only before the first byte of an answer (connection errors,
timeouts, 429 and 5xx): once text has been handed out, a retry would repeat it. An abort
shuts the socket down at once, so a turn stops mid-stream within milliseconds. The stream is read
through engine/integrations/upstream.py: each event (and an error answer) at most
GATEWAY_EVENT_MAX_BYTES, the whole turn at most GATEWAY_ANSWER_MAX_BYTES after decompression and
GATEWAY_ANSWER_MAX_S from request to end.
"""

import logging
from collections.abc import Iterator

import requests
import urllib3

from engine.abort import AbortSignal
from engine.integrations.base import IntegrationError, upstream_text
from engine.integrations.shapes import entries, field, optional, reading
from engine.integrations.upstream import AnswerLimit, Deadline, answer_lines, http_session
from engine.trust import secrets
from engine.trust.untrusted import load_json, storable

log = logging.getLogger(__name__)

#: Statuses worth another attempt (before the first byte only).
RETRYABLE_STATUSES = {408, 409, 425, 429, 500, 502, 503, 504}
RETRY_BACKOFF_S = 0.5
#: Longest wait a server's Retry-After may impose on us.
MAX_RETRY_AFTER_S = 10.0
#: The header carrying the runner's gateway session id (a gateway may key its state on it).
SESSION_HEADER = "X-Session-Id"
#: The caps on a turn's stream (GATEWAY_ANSWER_MAX_BYTES, GATEWAY_ANSWER_MAX_S) and on one of
#: its lines or an error answer (GATEWAY_EVENT_MAX_BYTES).
DEFAULT_ANSWER_LIMIT = AnswerLimit(
    16 * 1024 * 1024, 600.0, "GATEWAY_ANSWER_MAX_BYTES", "GATEWAY_ANSWER_MAX_S"
)
DEFAULT_EVENT_LIMIT = AnswerLimit(
    1024 * 1024, 600.0, "GATEWAY_EVENT_MAX_BYTES", "GATEWAY_ANSWER_MAX_S"
)


class GatewayError(IntegrationError):
    """The gateway failed, or its stream broke off."""

    reason = "gateway_error"


class _Retryable(Exception):
    pass


class GatewayClient:
    """A chat-completions endpoint, streamed. Stateless: safe to share across greenlets."""

    label = "gateway"

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        *,
        retries: int = 2,
        connect_timeout_s: float = 5.0,
        idle_timeout_s: float = 120.0,
        backoff_s: float = RETRY_BACKOFF_S,
        answer_limit: AnswerLimit = DEFAULT_ANSWER_LIMIT,
        event_limit: AnswerLimit = DEFAULT_EVENT_LIMIT,
    ):
        if not model:
            raise ValueError("the gateway needs a model (GATEWAY_MODEL)")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self._api_key = api_key
        secrets.register_server_secret(api_key)  # scrubbed from every message and log line
        self.retries = retries
        self.connect_timeout_s = connect_timeout_s
        self.idle_timeout_s = idle_timeout_s
        self.backoff_s = backoff_s
        self.answer_limit, self.event_limit = answer_limit, event_limit
        # Server credentials: no ambient proxy or .netrc. An error answer is read whole within
        # the event cap; a turn's stream is read by _sse_data.
        self._http = http_session(event_limit, trust_env=False)

    def __repr__(self) -> str:  # never show the key
        return f"GatewayClient({self.base_url!r}, model={self.model!r})"

    def stream_chat(
        self, messages: list[dict], *, session_id: str, abort: AbortSignal
    ) -> Iterator[str]:
        """The answer's content, piece by piece, as the model streams it.

        Raises GatewayError (after the bounded retries, or once the stream broke off) and
        Aborted the moment `abort` fires.
        """
        response, events = self._open(messages, session_id, abort)

        def shut() -> None:
            # Only the socket: the reading greenlet wakes with an error and closes the rest.
            try:
                response.raw.shutdown()
            except Exception:
                pass

        abort.on_abort(shut)
        try:
            finished = False
            for data in events:
                abort.raise_if_aborted()
                if data == "[DONE]":
                    return
                delta, finish_reason = _parse_chunk(data)
                if delta:
                    yield delta
                if finish_reason == "length":
                    raise GatewayError("the model's answer was cut off (token limit)")
                if finish_reason:
                    finished = True
            abort.raise_if_aborted()  # a shut socket can look like a clean end of stream
            if not finished:
                raise GatewayError("the gateway's stream ended before the answer did")
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            abort.raise_if_aborted()
            raise GatewayError(f"the gateway's stream broke off: {type(exc).__name__}") from exc
        finally:
            abort.remove(shut)
            response.close()

    # -- internals -------------------------------------------------------------------------------
    def _open(self, messages, session_id, abort):
        """(response, events) positioned after the first event; retried before the first byte."""
        attempt = 0
        while True:
            try:
                # Connect, headers and first event run in a greenlet the abort kills: it holds
                # nothing but its own socket.
                return abort.run(self._open_once, messages, session_id)
            except _Retryable as exc:
                if attempt >= self.retries:
                    raise GatewayError(f"the gateway failed {attempt + 1} times: {exc}") from None
                delay = getattr(exc, "retry_after", None) or self.backoff_s * (2**attempt)
                attempt += 1
                log.info("gateway attempt %d failed (%s); retrying in %.1fs", attempt, exc, delay)
                abort.sleep(min(delay, MAX_RETRY_AFTER_S))

    def _open_once(self, messages, session_id):
        headers = {
            "Content-Type": "application/json",
            "Accept": "text/event-stream",
            SESSION_HEADER: session_id,
        }
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        body = {"model": self.model, "messages": messages, "stream": True}
        deadline = Deadline(self.answer_limit)  # the whole turn, from this request on
        try:
            response = self._http.post(
                f"{self.base_url}/chat/completions",
                json=body,
                headers=headers,
                stream=True,
                timeout=(self.connect_timeout_s, self.idle_timeout_s),
            )
        except requests.RequestException as exc:
            raise _Retryable(type(exc).__name__) from exc
        if response.status_code != 200:
            detail = _error_detail(response)
            response.close()
            if response.status_code in RETRYABLE_STATUSES:
                error = _Retryable(f"HTTP {response.status_code} {detail}".rstrip())
                error.retry_after = _retry_after(response)
                raise error
            raise GatewayError(
                f"the gateway refused the turn: HTTP {response.status_code} {detail}".rstrip()
            )
        events = _sse_data(response, self.answer_limit, self.event_limit, deadline)
        try:
            first = next(events)
        except StopIteration:
            response.close()
            raise _Retryable("empty answer") from None
        except (requests.RequestException, urllib3.exceptions.HTTPError, OSError) as exc:
            response.close()
            raise _Retryable(type(exc).__name__) from exc

        def replay():
            yield first
            yield from events

        return response, replay()


def _sse_data(
    response: requests.Response, limit: AnswerLimit, line_limit: AnswerLimit, deadline: Deadline
) -> Iterator[str]:
    """The `data` of each server-sent event (multi-line data joined with newlines)."""
    lines: list[str] = []
    size = 0  # of the event being gathered: its data lines together stay within the event cap
    for raw in answer_lines(response.raw, limit, line_limit, deadline):
        line = raw.decode("utf-8", errors="replace")
        if line == "":
            if lines:
                yield "\n".join(lines)
                lines = []
            continue
        if line.startswith(":"):
            continue  # a comment (keepalive)
        field, _, value = line.partition(":")
        if field == "data":
            size = size + len(raw) if lines else len(raw)
            if size > line_limit.max_bytes:
                raise line_limit.too_large("an event of the answer")
            lines.append(value[1:] if value.startswith(" ") else value)
    if lines:
        yield "\n".join(lines)


def _parse_chunk(data: str) -> tuple[str, str | None]:
    """(content delta, finish_reason) of one chat.completion.chunk."""
    try:
        chunk = load_json(data)
    except ValueError:
        raise GatewayError("the gateway sent an event that is not JSON") from None
    if not isinstance(chunk, dict):
        raise GatewayError("the gateway sent an event that is not a chunk object")
    if "error" in chunk:
        error = chunk["error"]
        message = optional(chunk, "error.message", str) or error
        raise GatewayError(
            "the gateway reported an error mid-answer: "
            + (upstream_text(message, 200) or "no message")
        )
    with reading("the gateway's stream"):
        choices = entries(chunk, "choices")
        if not choices:
            return "", None  # e.g. a usage-only chunk
        content = field(choices[0], "delta.content", str)
        finish_reason = field(choices[0], "finish_reason", str) or None
    # The text is shown, stored and parsed: what PostgreSQL cannot store never enters it.
    return storable(content), finish_reason


def _error_detail(response: requests.Response) -> str:
    try:
        body = load_json(response.content)  # depth-limited: requests' json() recurses
    except ValueError:
        return ""
    error = body.get("error") if isinstance(body, dict) else None
    return upstream_text(error.get("message") if isinstance(error, dict) else None, 200)


def _retry_after(response: requests.Response) -> float | None:
    try:
        return max(0.0, float(response.headers.get("Retry-After", "")))
    except ValueError:
        return None
