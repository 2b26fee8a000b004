"""Contract of engine/integrations/upstream.py, the one reader of answers from outside, against a
hostile server on loopback: every answer within its cap in bytes after decompression and in time,
memory in proportion to the cap (never to what a bomb inflates to), the hub never held."""

import gzip
import time
import tracemalloc
import zlib

import pytest
import urllib3

from engine.integrations.upstream import (
    AnswerLimit,
    Deadline,
    UnreadableAnswer,
    UpstreamAnswerTooLarge,
    answer_lines,
    http_session,
    read_answer,
)
from tests.hostile_http import (
    GIB,
    KIB,
    MIB,
    Answer,
    HostileServer,
    drip,
    gzip_json,
    gzipped,
    plain,
)

LIMIT = AnswerLimit(MIB, 5.0, "TEST_MAX_BYTES", "TEST_MAX_S")


@pytest.fixture
def server():
    running = HostileServer()
    yield running
    running.stop()


def fetch(server, path="/", limit=LIMIT) -> bytes:
    pool = urllib3.PoolManager(retries=False)
    raw = pool.request("GET", server.url + path, preload_content=False)
    return read_answer(raw, limit)


def encoded(data: bytes, encoding: str, **options) -> Answer:
    options.setdefault("length", len(data))
    return Answer(headers=(("Content-Encoding", encoding),), body=lambda: [data], **options)


def test_urllib3_is_a_version_without_the_streamed_read_cves():
    # Before 2.7.0 a streamed read could still inflate whole (CVE-2025-66471, CVE-2026-21441,
    # CVE-2026-44432); requirements.in pins it.
    major, minor = (int(p) for p in urllib3.__version__.split(".")[:2])
    assert (major, minor) >= (2, 7)


def test_an_answer_up_to_the_cap_is_read_whole_and_one_byte_more_is_refused(server):
    server.route("GET /exact", plain(MIB, length=None))
    server.route("GET /over", plain(MIB + 1, length=None))

    assert len(fetch(server, "/exact")) == MIB
    with pytest.raises(UpstreamAnswerTooLarge) as refused:
        fetch(server, "/over")
    assert refused.value.reason == "upstream_answer_too_large"
    assert str(refused.value) == "the answer was larger than 1 MiB (the TEST_MAX_BYTES setting)"


def test_a_declared_length_over_the_cap_is_refused_before_reading(server):
    server.route("GET /", plain(64 * MIB, interval_s=0.1))  # read, 1 MiB would take 1.6 s

    started = time.monotonic()
    with pytest.raises(UpstreamAnswerTooLarge):
        fetch(server)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("inflated", [16 * MIB, GIB], ids=["16MiB", "1GiB"])
def test_a_gzip_bomb_is_refused_at_the_cap_in_memory_proportional_to_the_cap(server, inflated):
    bomb = gzip_json(inflated)
    server.route("GET /", gzipped(bomb))

    tracemalloc.start()
    try:
        with pytest.raises(UpstreamAnswerTooLarge):
            fetch(server)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(bomb) < inflated / 900  # it is a bomb: 16 KiB or 1 MiB on the wire
    assert peak < 4 * MIB  # the cap (1 MiB) and a piece or two, not what it inflates to


def test_gzip_members_deflate_and_raw_deflate_are_inflated(server):
    text = b'{"a": "' + b"x" * (300 * KIB) + b'"}'
    member = gzip.compress(text[:100_000])
    second = gzip.compress(text[100_000:])
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    server.route("GET /members", encoded(member + second, "gzip"))
    server.route("GET /deflate", encoded(zlib.compress(text), "deflate"))
    server.route("GET /raw-deflate", encoded(raw.compress(text) + raw.flush(), "deflate"))
    server.route("GET /chunked", encoded(gzip.compress(text), "x-gzip", length=None, chunked=True))
    server.route("GET /trailing", encoded(gzip.compress(text) + b"garbage", "gzip"))
    server.route("GET /twice", encoded(gzip.compress(gzip.compress(text)), "gzip, gzip"))

    for path in ("/members", "/deflate", "/raw-deflate", "/chunked", "/trailing", "/twice"):
        assert fetch(server, path) == text, path


def test_a_gzip_stream_that_inflates_to_nothing_is_capped_on_the_wire(server):
    # Empty members for ever: nothing decoded to count, so the wire count stops it.
    empty = gzip.compress(b"") * 3000
    endless = Answer(headers=(("Content-Encoding", "gzip"),), body=lambda: iter(lambda: empty, 0))
    server.route("GET /", endless)

    with pytest.raises(UpstreamAnswerTooLarge) as refused:
        fetch(server)
    assert "as sent, still encoded" in str(refused.value)


@pytest.mark.parametrize("encoding", ["br", "zstd", "compress", "gzip, gzip, gzip"])
def test_an_encoding_not_asked_for_is_refused(server, encoding):
    server.route("GET /", encoded(b"\x00" * 100, encoding))

    with pytest.raises(UnreadableAnswer):
        fetch(server)


def test_a_corrupt_encoding_is_refused(server):
    server.route("GET /", encoded(b"\x1f\x8b" + b"\xff" * 100, "gzip"))

    with pytest.raises(UnreadableAnswer, match="gzip encoding is corrupt"):
        fetch(server)


@pytest.mark.parametrize("interval_s", [0.05, 3.0], ids=["drip", "stall"])
def test_a_drip_or_a_stall_is_cut_at_the_time_cap(server, interval_s):
    server.route("GET /", drip(interval_s=interval_s))
    limit = AnswerLimit(MIB, 0.5, time_setting="TEST_MAX_S")

    started = time.monotonic()
    with pytest.raises(UpstreamAnswerTooLarge) as refused:
        fetch(server, limit=limit)
    assert 0.5 <= time.monotonic() - started < 1.5
    assert str(refused.value) == "the answer was not complete after 0.5 s (the TEST_MAX_S setting)"


def stream(server, path="/"):
    pool = urllib3.PoolManager(retries=False)
    return pool.request("GET", server.url + path, preload_content=False)


def test_lines_arrive_as_sent_each_and_all_within_their_caps(server):
    text = b"data: one\r\n\r\n: keepalive\ndata: two\n\nlast"
    server.route("GET /ok", Answer(body=lambda: [text[:7], text[7:20], text[20:]], chunked=True))
    server.route("GET /long", Answer(body=lambda: [b"data: " + b"x" * (64 * KIB)] * 4))
    server.route("GET /bomb", gzipped(gzip_json(GIB)))
    line_limit = AnswerLimit(100 * KIB, 5.0, "TEST_LINE_MAX_BYTES")

    lines = answer_lines(stream(server, "/ok"), LIMIT, line_limit, Deadline(LIMIT))
    assert list(lines) == [b"data: one", b"", b": keepalive", b"data: two", b"", b"last"]
    with pytest.raises(
        UpstreamAnswerTooLarge, match="a line of the answer was larger than 100 KiB"
    ):
        list(answer_lines(stream(server, "/long"), LIMIT, line_limit, Deadline(LIMIT)))
    with pytest.raises(UpstreamAnswerTooLarge, match="larger than 1 MiB"):
        list(
            answer_lines(stream(server, "/bomb"), LIMIT, AnswerLimit(2 * MIB, 5.0), Deadline(LIMIT))
        )


def test_a_session_reads_every_answer_within_its_cap_redirects_and_errors_too(server):
    server.route("GET /small", plain(10 * KIB))
    server.route("GET /bomb", gzipped(gzip_json(GIB)))
    server.route(
        "GET /redirect",
        Answer(
            302,
            headers=(("Location", "/small"), ("Content-Encoding", "gzip")),
            body=lambda: [gzip_json(GIB)],
        ),
    )
    server.route(
        "GET /error",
        Answer(500, body=lambda: [gzip_json(GIB)], headers=(("Content-Encoding", "gzip"),)),
    )
    http = http_session(LIMIT)

    assert len(http.get(server.url + "/small").content) == 10 * KIB
    with pytest.raises(UpstreamAnswerTooLarge):
        http.get(server.url + "/bomb")
    with pytest.raises(UpstreamAnswerTooLarge):
        http.get(server.url + "/redirect")  # requests reads a redirect's body to follow it
    with pytest.raises(UpstreamAnswerTooLarge):
        http.get(server.url + "/error", stream=True)  # only a 200 is left to stream
    assert server.requests[0].headers["accept-encoding"] == "gzip, deflate"
