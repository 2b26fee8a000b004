"""HTTP/1.1 framing at both servers (RFC 9112): a request whose body length could be read two
ways, or whose chunked body cannot be decoded, is refused with 400 and its connection closed, so
nothing after it on the connection is ever served as a request (a proxy in front may have read
those bytes as part of the refused one: request smuggling).

Each case sends the refused request and a second one in the same packet over a raw socket to a
real server process (`python app.py`, gunicorn), then reads until the server closes.
"""

import re
import socket

import pytest

SECOND = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
POST = b"POST /api/v1/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"

#: name -> (the first request's bytes, whether gunicorn refuses it too).
AMBIGUOUS = {
    "Content-Length and Transfer-Encoding": (
        POST + b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        True,
    ),
    "chunked not the final coding": (
        POST + b"Transfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        True,
    ),
    "a coding other than chunked": (
        POST + b"Transfer-Encoding: identity\r\nContent-Length: 2\r\n\r\n{}",
        True,
    ),
    "a space before the colon": (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length : 5\r\n\r\n",
        True,
    ),
    "a folded header line": (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nX-A: a\r\n b\r\n\r\n",
        True,
    ),
    "a bare CR inside a header line": (
        POST + b"X-A: a\rTransfer-Encoding: chunked\r\nContent-Length: 2\r\n\r\n{}",
        True,
    ),
    "two Content-Lengths": (POST + b"Content-Length: 2\r\nContent-Length: 3\r\n\r\n{}", True),
    "a Content-Length that is not digits": (POST + b"Content-Length: +2\r\n\r\n{}", True),
    "a Content-Length with an underscore": (POST + b"Content-Length: 0_2\r\n\r\n{}", True),
    "a chunk-size that is not hex": (
        # The bytes after the bad character parse as a request line: served, it was smuggled.
        POST + b"Transfer-Encoding: chunked\r\n\r\nX GET /healthz HTTP/1.1\r\n\r\n",
        True,
    ),
    # gunicorn reads a numeral of any length as the (huge) size it is and waits for that much
    # body: it never reads what follows as a request, and never answers either.
    "a chunk-size overflowing 64 bits": (
        POST + b"Transfer-Encoding: chunked\r\n\r\n10000000000000000\r\nab\r\n0\r\n\r\n",
        False,
    ),
}


def exchange(port: int, data: bytes) -> tuple[list[bytes], bool]:
    """Send `data` in one packet; the status codes answered and whether the server closed."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        received = b""
        closed = False
        try:
            while chunk := sock.recv(65536):
                received += chunk
            closed = True
        except TimeoutError:
            pass  # bounds a failure only: a refusal closes at once
    return re.findall(rb"HTTP/1\.[01] (\d{3}) ", received), closed


def assert_refused_and_closed(port: int, cases: dict):
    # Positive control: a well-framed chunked request and the next are both answered (the next
    # asks to close, so the read ends): a single answer and a closed connection mean a refusal.
    chunked = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n\r\n"
    last = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
    assert exchange(port, chunked + b"2\r\nab\r\n0\r\n\r\n" + last) == ([b"200", b"200"], True)
    answers = {name: exchange(port, first + SECOND) for name, first in cases.items()}
    assert answers == {name: ([b"400"], True) for name in cases}


def test_the_dev_server_refuses_ambiguous_framing_and_closes(start_server):
    server = start_server("app")
    assert_refused_and_closed(server.port, {name: case[0] for name, case in AMBIGUOUS.items()})


@pytest.mark.slow
def test_gunicorn_refuses_ambiguous_framing_and_closes(start_server):
    server = start_server("gunicorn", workers=1)
    cases = {name: first for name, (first, both) in AMBIGUOUS.items() if both}
    assert_refused_and_closed(server.port, cases)
