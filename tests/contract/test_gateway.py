"""Contract of engine/integrations/gateway.py against an OpenAI-compatible server on loopback:
the exact request, SSE parsing, retries before the first byte only, and aborts mid-stream."""

from gevent import monkey

monkey.patch_all()


import json  # noqa: E402
from collections import Counter  # noqa: E402

import gevent  # noqa: E402
import pytest  # noqa: E402
from gevent.event import Event  # noqa: E402
from hypothesis import example, given  # noqa: E402

from engine.abort import Aborted, AbortSignal  # noqa: E402
from engine.integrations.base import IntegrationError  # noqa: E402
from engine.integrations.gateway import GatewayClient, GatewayError  # noqa: E402
from engine.trust.untrusted import unstorable  # noqa: E402
from tests.fakes import FakeGatewayServer, Reply  # noqa: E402
from tests.helpers import free_port, wait_for  # noqa: E402
from tests.hostile_json import examples, hostile  # noqa: E402

MESSAGES = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "plan it"}]


@pytest.fixture
def server():
    fake = FakeGatewayServer().start()
    yield fake
    fake.stop()


def client_for(server, **kwargs) -> GatewayClient:
    options = {"retries": 2, "backoff_s": 0.01, "connect_timeout_s": 2.0, "idle_timeout_s": 5.0}
    options.update(kwargs)
    return GatewayClient(server.url, "model-x", "gw-secret-key", **options)


def collect(client, abort=None) -> list[str]:
    return list(client.stream_chat(MESSAGES, session_id="sess-1", abort=abort or AbortSignal()))


def test_request_is_an_openai_streaming_chat_completion_and_pieces_arrive_in_order(server):
    server.script(Reply(text='{"plan": {}, "manifests": []}', chunk_chars=4))

    pieces = collect(client_for(server))

    assert "".join(pieces) == '{"plan": {}, "manifests": []}'
    assert len(pieces) == 8  # streamed piece by piece, not buffered into one
    [request] = server.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["Authorization"] == "Bearer gw-secret-key"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Accept"] == "text/event-stream"
    assert request.headers["X-Session-Id"] == "sess-1"
    assert request.body == {"model": "model-x", "messages": MESSAGES, "stream": True}
    assert "gw-secret-key" not in repr(client_for(server))


def test_no_authorization_header_without_a_key(server):
    server.script(Reply(text="ok"))
    client = GatewayClient(server.url, "model-x", None, retries=0)
    assert collect(client) == ["ok"]
    assert "Authorization" not in server.requests[0].headers


def test_sse_parsing_tolerates_comments_bare_data_usage_chunks_and_null_content(server):
    raw = (
        ": keepalive\n\n"
        'data:{"choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}\n\n'
        'data: {"choices":[{"index":0,"delta":{"content":"hel"},"finish_reason":null}]}\r\n\r\n'
        'event: ignored\ndata: {"choices":[{"index":0,"delta":{"content":null},'
        '"finish_reason":null}]}\n\n'
        'data: {"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":null}]}\n\n'
        'data: {"choices":[],"usage":{"total_tokens":3}}\n\n'
        'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        "data: [DONE]\n\n"
    )
    server.script(Reply(raw=raw))
    assert collect(client_for(server)) == ["hel", "lo"]


def test_retries_before_the_first_byte_then_succeeds(server):
    server.script(
        Reply(status=503), Reply(status=429, headers=(("Retry-After", "0"),)), Reply(text="done")
    )
    assert collect(client_for(server, retries=2)) == ["done"]
    assert len(server.requests) == 3
    # Every attempt is the same request.
    assert server.requests[0].body == server.requests[2].body


def test_retries_are_bounded(server):
    server.script(Reply(status=502), Reply(status=502), Reply(text="never reached"))
    with pytest.raises(GatewayError, match="failed 2 times"):
        collect(client_for(server, retries=1))
    assert len(server.requests) == 2


def test_a_refusal_is_not_retried(server):
    server.script(Reply(status=401), Reply(text="never reached"))
    with pytest.raises(GatewayError, match="HTTP 401"):
        collect(client_for(server))
    assert len(server.requests) == 1


def test_a_deeply_nested_error_answer_is_reported_not_a_crash(server):
    # requests' own json() recurses per level: 100,000 brackets raised RecursionError.
    server.script(Reply(status=401, raw="[" * 100_000 + "]" * 100_000))
    with pytest.raises(GatewayError, match="HTTP 401"):
        collect(client_for(server))


def test_an_unreachable_gateway_is_retried_then_reported():
    client = GatewayClient(
        f"http://127.0.0.1:{free_port()}/v1",
        "model-x",
        retries=1,
        backoff_s=0.01,
        connect_timeout_s=1.0,
    )
    with pytest.raises(GatewayError, match="failed 2 times"):
        collect(client)


def test_a_stream_that_breaks_off_after_the_first_byte_is_not_retried(server):
    server.script(Reply(text="abcdefghijkl", chunk_chars=3, cut_after=2), Reply(text="again"))
    client = client_for(server)
    seen = []
    with pytest.raises(GatewayError, match="ended before"):
        for piece in client.stream_chat(MESSAGES, session_id="s", abort=AbortSignal()):
            seen.append(piece)
    assert seen == ["abc", "def"]
    assert len(server.requests) == 1


def test_an_error_event_mid_stream_is_reported(server):
    raw = (
        'data: {"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":null}]}\n\n'
        'data: {"error":{"message":"overloaded"}}\n\n'
    )
    server.script(Reply(raw=raw))
    with pytest.raises(GatewayError, match="overloaded"):
        collect(client_for(server))


CHUNK = {
    "id": "c",
    "object": "chat.completion.chunk",
    "choices": [{"index": 0, "delta": {"content": "hel"}, "finish_reason": None}],
}
STOP = 'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\ndata: [DONE]\n\n'


def test_a_chunk_of_any_shape_is_text_or_a_gateway_error(server):
    client = client_for(server, retries=0)
    seen = Counter()

    @examples(80)
    @given(chunk=hostile(CHUNK))
    @example(chunk={"choices": {"0": CHUNK["choices"][0]}})  # KeyError
    @example(chunk={"choices": 5})  # TypeError
    @example(chunk={"choices": [{"delta": {"content": "a\x00b\ud800"}}]})  # unstorable
    def check(chunk):
        server.script(Reply(raw=f"data: {json.dumps(chunk)}\n\n{STOP}"))
        try:
            pieces = collect(client)
        except IntegrationError as exc:
            assert str(exc)
            seen["refused"] += 1
        else:
            # Shown live, stored as events and parsed: text PostgreSQL can keep.
            assert all(isinstance(p, str) and unstorable(p) is None for p in pieces), pieces
            seen["read"] += 1

    check()
    assert seen["read"] >= 5 and seen["refused"] >= 5, seen


def test_a_truncated_answer_is_reported(server):
    server.script(Reply(text="partial", finish_reason="length"))
    with pytest.raises(GatewayError, match="cut off"):
        collect(client_for(server))


def test_abort_mid_stream_stops_within_a_second_and_closes_the_connection(server):
    # Silent after three pieces until the test resumes it: only shutting the socket can end the
    # blocked read.
    resumed = Event()
    server.script(Reply(text="x" * 200, chunk_chars=1, stall_after=3, resume=resumed))
    abort = AbortSignal()
    seen = []

    def consume():
        for piece in client_for(server).stream_chat(MESSAGES, session_id="s", abort=abort):
            seen.append(piece)

    consumer = gevent.spawn(consume)
    wait_for(lambda: len(seen) >= 3, timeout=30, message="a few pieces")
    abort.abort("cancel")
    consumer.join(timeout=30)
    assert consumer.ready()  # ended while the model was still silent
    assert isinstance(consumer.exception, Aborted)
    # The server notices the dropped connection at its next write.
    resumed.set()
    wait_for(lambda: server.requests[0].disconnected, timeout=30, message="server-side disconnect")
    assert not server.requests[0].finished


def test_abort_while_waiting_for_the_first_byte(server):
    held = Event()  # the head comes only once the test lets it, after the call has ended
    server.script(Reply(text="late", hold=held))
    abort = AbortSignal()
    gevent.spawn_later(0.2, abort.abort, "cancel")
    try:
        with pytest.raises(Aborted):
            collect(client_for(server), abort=abort)
    finally:
        held.set()
