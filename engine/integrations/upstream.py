"""Every answer from a server outside is read here: bounded in bytes after decompression and in
time, whatever the server sends.

A server a user or an operator can aim us at (a kubeconfig's cluster, the devbox API, the gateway,
the OpenID Connect issuer, and any outbound URL added later) may answer with anything: a 64 MiB
body, 16 KiB of gzip that inflates to gigabytes, a byte a second for ever. urllib3 inflates a
compressed body whole on `.data` or `.read()`, and requests does on `.content`, without a cap;
urllib3's own bounded `read(amt)` still loops inside one call while a compressed stream yields
nothing (and before 2.7 had CVEs on exactly this path). So the body is read raw
(`preload_content=False`, `stream=True`), a piece of at most READ_CHUNK_BYTES at a time, inflated
here with a bound on every step's output (gzip and deflate, the only encodings ever asked for;
any other is refused), and counted on the wire and after decompression against the cap. The
whole exchange (connect, headers, body) runs under one deadline. Over a cap the read stops, the
connection is closed (never drained) and UpstreamAnswerTooLarge says which cap and which setting
raises it. Between pieces the reader yields to the gevent hub: a fast sender cannot keep
`/healthz` or the lease renewal waiting.

Callers: `read_answer` for a urllib3 response (the Kubernetes adapter), `http_session` (or
`bound` on a session made by a library) for requests, whose answers then arrive read and
bounded; a 200 asked for with `stream=True` is the caller's to read with `answer_lines`.
"""

import time
import zlib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import gevent
import requests
from requests.adapters import HTTPAdapter

from engine.integrations.base import IntegrationError, UpstreamAnswerTooLarge

#: Raw bytes read from the socket at a time (and the most one inflate step may give back).
READ_CHUNK_BYTES = 64 * 1024
#: What every request asks for: the encodings inflated here (never br or zstd).
ACCEPT_ENCODING = "gzip, deflate"
#: Content-Encoding names inflated here, by their zlib window setting (deflate: decided by the
#: stream's first two bytes, a zlib header or raw deflate, as servers send either).
_GZIP_WBITS = 16 + zlib.MAX_WBITS
_ENCODINGS = {"gzip": _GZIP_WBITS, "x-gzip": _GZIP_WBITS, "deflate": None}
#: Stacked encodings ("gzip, gzip") inflated at most; nobody sends more.
MAX_ENCODINGS = 2


class UnreadableAnswer(IntegrationError):
    """An answer whose encoding is not one we asked for, or that does not inflate."""


def _size(n: int) -> str:
    """2097152 as "2 MiB", 1536 as "1.5 KiB"."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


@dataclass(frozen=True)
class AnswerLimit:
    """The caps on one kind of answer, and the settings that set them (named when one is hit)."""

    max_bytes: int
    max_s: float
    bytes_setting: str = ""
    time_setting: str = ""

    def too_large(self, what: str = "the answer") -> UpstreamAnswerTooLarge:
        return UpstreamAnswerTooLarge(
            f"{what} was larger than {_size(self.max_bytes)}{_named(self.bytes_setting)}"
        )

    def too_slow(self) -> UpstreamAnswerTooLarge:
        return UpstreamAnswerTooLarge(
            f"the answer was not complete after {self.max_s:g} s{_named(self.time_setting)}"
        )


def _named(setting: str) -> str:
    return f" (the {setting} setting)" if setting else ""


class Deadline:
    """When one exchange must be over: its limit's `max_s` from when it began."""

    def __init__(self, limit: AnswerLimit):
        self.limit = limit
        self.at = time.monotonic() + limit.max_s

    @contextmanager
    def bounding(self):
        """Run the block (one blocking step: a send, a read) at most until the deadline; past it
        UpstreamAnswerTooLarge. A gevent timer, so a read that waits on a drip is cut at once."""
        remaining = self.at - time.monotonic()
        if remaining <= 0:
            raise self.limit.too_slow()
        timer = gevent.Timeout(remaining)
        timer.start()
        try:
            yield
        except gevent.Timeout as exc:
            if exc is not timer:
                raise
            raise self.limit.too_slow() from None
        finally:
            timer.close()


# -- inflating, a bounded step at a time ----------------------------------------------------------


class _Inflater:
    """One Content-Encoding layer, inflated so that no step gives back more than READ_CHUNK_BYTES
    (zlib's `max_length`; what it could not take yet stays in `unconsumed_tail` for the next
    step). Several gzip members follow one another; bytes after the end are ignored."""

    def __init__(self, encoding: str):
        self.encoding = encoding
        self._wbits = _ENCODINGS[encoding]
        self._inflater = None  # None: between streams, waiting for the next one's first bytes
        self._head = b""  # the first bytes, held until two tell what follows
        self._streams = 0  # streams (gzip members) inflated to their end
        self._done = False

    def all(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        """The inflated output of `pieces`, as a stream of bounded pieces."""
        for piece in pieces:
            data = piece
            while data and not self._done:
                if self._inflater is None:
                    self._head += data
                    if len(self._head) < 2:
                        break
                    data, self._head = self._head, b""
                    self._begin(data)
                    if self._done:
                        break
                data = yield from self._inflate(data)

    def _begin(self, head: bytes) -> None:
        if self._wbits == _GZIP_WBITS:
            if self._streams and head[:2] != b"\x1f\x8b":
                self._done = True  # not another member: trailing bytes, ignored as urllib3 does
                return
            wbits = _GZIP_WBITS
        elif self._streams:
            self._done = True
            return
        else:  # RFC 9110's deflate is zlib-wrapped; some servers send raw deflate instead
            zlib_header = head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
            wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
        self._inflater = zlib.decompressobj(wbits)

    def _corrupt(self) -> UnreadableAnswer:
        return UnreadableAnswer(f"the answer's {self.encoding} encoding is corrupt")

    def _inflate(self, data: bytes):
        """Inflate `data` in bounded steps; returns what follows the stream's end (else b"")."""
        inflater = self._inflater
        while True:
            try:
                out = inflater.decompress(data, READ_CHUNK_BYTES)
            except zlib.error:
                raise self._corrupt() from None
            if out:
                yield out
            if inflater.eof:
                self._inflater, self._streams = None, self._streams + 1
                return inflater.unused_data
            if not out and data and len(inflater.unconsumed_tail) == len(data):
                raise self._corrupt()  # no progress at all: never loop on it
            data = inflater.unconsumed_tail
            # A full step may leave output inside zlib with no input left: ask once more.
            if not data and len(out) < READ_CHUNK_BYTES:
                return b""


def _layers(headers) -> list[_Inflater]:
    """The inflaters an answer's Content-Encoding needs, outermost (last applied) first."""
    names = [
        n.strip().lower()
        for n in (headers.get("Content-Encoding") or "").split(",")
        if n.strip() and n.strip().lower() != "identity"
    ]
    unknown = [n for n in names if n not in _ENCODINGS]
    if unknown:
        raise UnreadableAnswer(
            f"the answer is encoded as {unknown[0][:20]!r}, which was not asked for"
        )
    if len(names) > MAX_ENCODINGS:
        raise UnreadableAnswer(f"the answer is encoded {len(names)} times over")
    return [_Inflater(n) for n in reversed(names)]


# -- reading --------------------------------------------------------------------------------------


def _wire(raw, limit: AnswerLimit | None, deadline: Deadline) -> Iterator[bytes]:
    """The raw body of a urllib3 response, piece by piece as it arrives, counted against `limit`
    (None: not encoded, what arrives is what is counted after decoding)."""
    received = 0
    while True:
        with deadline.bounding():
            # read1: whatever has arrived (up to the chunk), never waiting to fill it; the
            # decoding is ours (decode_content=False), so nothing is inflated unbounded.
            piece = raw.read1(READ_CHUNK_BYTES, decode_content=False)
        if not piece:
            return
        received += len(piece)
        if limit is not None and received > limit.max_bytes:
            # An encoded stream that inflates to little or nothing: stopped on the wire.
            raise limit.too_large("the answer (as sent, still encoded)")
        yield piece
        gevent.sleep(0)  # let other greenlets run between pieces, however fast they come


def body_pieces(raw, limit: AnswerLimit, deadline: Deadline) -> Iterator[bytes]:
    """The body of `raw` (a urllib3 response, its body not yet read), decoded, piece by piece;
    UpstreamAnswerTooLarge as soon as it goes over `limit` or past `deadline`."""
    declared = raw.headers.get("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > limit.max_bytes:
        raise limit.too_large()  # said up front: nothing need be read
    layers = _layers(raw.headers)
    pieces: Iterable[bytes] = _wire(raw, limit if layers else None, deadline)
    for layer in layers:
        pieces = layer.all(pieces)
    decoded = 0
    for piece in pieces:
        decoded += len(piece)
        if decoded > limit.max_bytes:
            raise limit.too_large()
        yield piece


def read_answer(raw, limit: AnswerLimit, deadline: Deadline | None = None) -> bytes:
    """The whole decoded body of a urllib3 response read with `preload_content=False`, within
    `limit`; the connection is closed (not drained, not pooled) on any failure."""
    body = bytearray()
    try:
        for piece in body_pieces(raw, limit, deadline or Deadline(limit)):
            body += piece
    except BaseException:  # an abort's GreenletExit too
        _discard(raw)
        raise
    return bytes(body)


def answer_lines(
    raw, limit: AnswerLimit, line_limit: AnswerLimit, deadline: Deadline
) -> Iterator[bytes]:
    """The lines of a streamed answer as they arrive (without their `\\n` or `\\r\\n`): each at
    most `line_limit.max_bytes`, all together within `limit` and `deadline`."""
    max_line_bytes = line_limit.max_bytes
    buffer = bytearray()
    try:
        for piece in body_pieces(raw, limit, deadline):
            buffer += piece
            start = 0
            while (end := buffer.find(b"\n", start)) != -1:
                if end - start > max_line_bytes:
                    raise line_limit.too_large("a line of the answer")
                stop = end - 1 if end > start and buffer[end - 1] == 0x0D else end  # \r\n
                yield bytes(buffer[start:stop])
                start = end + 1
            del buffer[:start]
            if len(buffer) > max_line_bytes:
                raise line_limit.too_large("a line of the answer")
        if buffer:
            yield bytes(buffer)
    except BaseException:  # a cap, an abort, or the caller closing the stream early
        _discard(raw)
        raise


def _discard(raw) -> None:
    """Close the connection with the rest of the answer unread (never drained: it may be
    endless), and give the pool its slot back (it reconnects next time)."""
    raw.close()
    raw.release_conn()


# -- requests -------------------------------------------------------------------------------------


class _BoundedAdapter(HTTPAdapter):
    """Reads every answer within its limit before requests sees it. Only a 200 asked for with
    `stream=True` is left unread, for the caller's `answer_lines`; an error or a redirect is read
    here too (requests would read a redirect's body whole, and unbounded, to follow it)."""

    def __init__(self, limit: AnswerLimit, **kwargs):
        super().__init__(**kwargs)
        self.limit = limit

    def send(self, request, stream=False, timeout=None, **kwargs):
        deadline = Deadline(self.limit)
        with deadline.bounding():
            response = super().send(request, stream=True, timeout=timeout, **kwargs)
        if not stream or response.status_code != 200:
            response._content = read_answer(response.raw, self.limit, deadline)
            response._content_consumed = True
        return response


def bound(session: requests.Session, limit: AnswerLimit, *, pool_size: int = 10):
    """`session` with every answer read within `limit` (a session a library made too), asking
    only for encodings inflated here."""
    adapter = _BoundedAdapter(limit, pool_maxsize=pool_size)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    session.headers["Accept-Encoding"] = ACCEPT_ENCODING
    return session


def http_session(
    limit: AnswerLimit, *, pool_size: int = 10, trust_env: bool = True
) -> requests.Session:
    """A requests session whose every answer is read within `limit`. `trust_env=False` for a
    server credential: no ambient proxy, and no .netrc that could replace its Authorization."""
    session = requests.Session()
    session.trust_env = trust_env
    return bound(session, limit, pool_size=pool_size)
