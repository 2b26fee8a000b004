"""A hostile HTTP server on 127.0.0.1 (gevent, in the test's own process) and the answers it
sends: 64 MiB bodies, gzip bombs, one huge JSON string, a drip. Every answer is written raw, byte
for byte as scripted (no framework re-frames it), and generated as it is sent: the server holds
a bomb's compressed bytes, never what they inflate to.

`HostileServer().route("GET /version", answer)` scripts one path ("METHOD /path", the query
ignored; a trailing `*` matches every path it begins; the route scripted last wins; a callable
gets the request and returns an Answer), and `requests` records what was asked.
"""

import json
import socket
import struct
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import cache

import gevent
from gevent.server import StreamServer

KIB, MIB, GIB = 1024, 1024 * 1024, 1024 * 1024 * 1024
PIECE = 64 * KIB


@dataclass
class Answer:
    """One scripted answer: status, headers, and the body as pieces written one by one."""

    status: int = 200
    headers: tuple = (("Content-Type", "application/json"),)
    body: Callable[[], Iterable[bytes]] = lambda: [b"{}"]
    #: Send Content-Length (None: close-delimited, the length unknown to the client).
    length: int | None = None
    chunked: bool = False
    #: Seconds before each piece (a drip).
    interval_s: float = 0.0


@dataclass
class Request:
    method: str
    path: str
    headers: dict
    body: bytes


@dataclass
class HostileServer:
    routes: list = field(default_factory=list)
    requests: list = field(default_factory=list)

    def __post_init__(self):
        self._server = StreamServer(("127.0.0.1", 0), self._handle)
        self._server.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def route(self, pattern: str, answer) -> None:
        """Answer requests to "METHOD /path" (or "METHOD /prefix*") with `answer`."""
        self.routes.insert(0, (pattern, answer))

    def stop(self) -> None:
        self._server.stop(timeout=1)

    def _handle(self, sock, _address):
        try:
            request = _read_request(sock.makefile("rb"))
            if request is None:
                return
            self.requests.append(request)
            asked = f"{request.method} {request.path.split('?')[0]}"
            answer = next(
                (
                    a
                    for p, a in self.routes
                    if asked == p or p.endswith("*") and asked.startswith(p[:-1])
                ),
                Answer(404, body=lambda: [b'{"message": "not scripted"}']),
            )
            if callable(answer) and not isinstance(answer, Answer):
                answer = answer(request)
            _send(sock, answer)
        except OSError:
            pass  # the client hung up (what a capped reader does): nothing to report
        finally:
            sock.close()


def _read_request(stream) -> Request | None:
    line = stream.readline(65537).decode("latin-1").strip()
    if not line:
        return None
    method, path, _ = line.split(" ", 2)
    headers = {}
    while (header := stream.readline(65537).decode("latin-1").strip()) != "":
        name, _, value = header.partition(":")
        headers[name.strip().lower()] = value.strip()
    length = int(headers.get("content-length") or 0)
    return Request(method, path, headers, stream.read(length) if length else b"")


def _send(sock, answer: Answer) -> None:
    head = [f"HTTP/1.1 {answer.status} Scripted", "Connection: close"]
    head += [f"{name}: {value}" for name, value in answer.headers]
    if answer.chunked:
        head.append("Transfer-Encoding: chunked")
    elif answer.length is not None:
        head.append(f"Content-Length: {answer.length}")
    sock.sendall(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
    for piece in answer.body():
        if answer.interval_s:
            gevent.sleep(answer.interval_s)
        if answer.chunked:
            piece = b"%x\r\n%s\r\n" % (len(piece), piece)
        sock.sendall(piece)
    if answer.chunked:
        sock.sendall(b"0\r\n\r\n")
    sock.shutdown(socket.SHUT_WR)


# -- bodies ---------------------------------------------------------------------------------------


def json_string_pieces(size: int, key: str = "gitVersion", fill: bytes = b"v") -> Iterator[bytes]:
    """`{"<key>": "vvv..."}`, `size` bytes in all, generated a piece at a time."""
    prefix, suffix = b'{"%s": "' % key.encode(), b'"}'
    yield prefix
    left = size - len(prefix) - len(suffix)
    chunk = fill * PIECE
    while left > 0:
        yield chunk[: min(left, PIECE)]
        left -= PIECE
    yield suffix


def plain(size: int, key: str = "gitVersion", **options) -> Answer:
    """A JSON object of `size` bytes holding one string, sent with its Content-Length unless
    `length=None` is given (then the client learns the size only by reading)."""
    options.setdefault("length", size)
    return Answer(body=lambda: json_string_pieces(size, key), **options)


@cache
def gzip_json(inflated: int, key: str = "gitVersion") -> bytes:
    """A valid gzip member inflating to a JSON object of `inflated` bytes holding one string:
    16 MiB become ~16 KiB, 1 GiB ~1 MiB (a fully flushed 16 MiB block repeated, so building it
    never holds or compresses the whole)."""
    prefix, suffix = b'{"%s": "' % key.encode(), b'"}'
    block = min(16 * MIB, inflated - len(prefix) - len(suffix))
    repeats, rest = divmod(inflated - len(prefix) - len(suffix), block)
    compressor = zlib.compressobj(9, zlib.DEFLATED, -zlib.MAX_WBITS)
    head = compressor.compress(prefix) + compressor.flush(zlib.Z_FULL_FLUSH)
    # After a full flush no block refers back, so the same bytes can be repeated.
    middle = compressor.compress(b"v" * block) + compressor.flush(zlib.Z_FULL_FLUSH)
    tail = compressor.compress(b"v" * rest + suffix) + compressor.flush()
    crc = zlib.crc32(prefix)
    for _ in range(repeats):
        crc = zlib.crc32(b"v" * block, crc)
    crc = zlib.crc32(b"v" * rest + suffix, crc)
    header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
    trailer = struct.pack("<II", crc & 0xFFFFFFFF, inflated & 0xFFFFFFFF)
    return header + head + middle * repeats + tail + trailer


def gzipped(data: bytes, **options) -> Answer:
    """`data` (already gzip) sent with Content-Encoding: gzip, in pieces."""
    options.setdefault("length", len(data))
    headers = (("Content-Type", "application/json"), ("Content-Encoding", "gzip"))
    return Answer(
        headers=headers,
        body=lambda: (data[i : i + PIECE] for i in range(0, len(data), PIECE)),
        **options,
    )


def drip(first: bytes = b'{"gitVersion": "', piece: bytes = b"v", interval_s: float = 0.2):
    """A JSON answer whose string never ends: one byte every `interval_s`, for ever."""

    def body():
        yield first
        while True:
            yield piece

    return Answer(body=body, interval_s=interval_s)


def json_answer(value, status: int = 200, **options) -> Answer:
    data = json.dumps(value).encode()
    return Answer(status=status, body=lambda: [data], length=len(data), **options)
