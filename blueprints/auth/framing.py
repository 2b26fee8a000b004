"""HTTP/1.1 message framing for `python app.py` (gevent's WSGIServer): a request whose header
section or body length could be read two ways is refused with 400 and its connection closed
(RFC 9112 sections 2.2, 5, 6.1 and 6.3), before the app sees it.

gevent's own parser is lenient where a proxy in front may read the same bytes differently: it
drops Content-Length when Transfer-Encoding is chunked, ignores a Transfer-Encoding other than
exactly "chunked", takes the first of two Content-Lengths and any int() (`+5`, `0_5`), splits
lines at a bare CR, folds continuation lines into the value, and ends the header section at a
line with a space before its colon (what follows it is read as the body). Each was answered
and the next request on the connection served. And a chunked body it cannot decode (a
chunk-size of more than 16 digits, a non-hex one) failed the app's read, but the connection
stayed open and the bytes after the bad line were read as the next request. gunicorn refuses
and closes on its own (tests/integration/test_framing.py sends both servers the same bytes).
"""

import re
from io import BytesIO

from gevent.pywsgi import WSGIHandler, headers_factory

#: RFC 9112 5.1: field-name ":" OWS field-value OWS CRLF; the name a token, the value visible
#: characters, spaces, tabs and obs-text (no CR, LF, NUL or other control character), and no
#: line folding (a line starting with a space or tab does not match).
FIELD_LINE = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+:[\t\x20-\x7e\x80-\xff]*\r\n\Z")
#: The same bounds as http.client.parse_headers (what gevent reads a header section with).
MAX_FIELD_LINE = 65536
MAX_FIELDS = 100
CONTENT_LENGTH = re.compile(r"[0-9]+\Z")


class AmbiguousFraming(ValueError):
    """A request whose framing could be read two ways (gevent answers a ValueError raised while
    reading a request with 400 and closes the connection)."""


class StrictFramingHandler(WSGIHandler):
    """gevent's request handler, refusing what RFC 9112 says to refuse and close (above)."""

    def MessageClass(self, rfile, *args):  # noqa: N802 (gevent's name)
        raw = read_header_section(rfile)
        headers = headers_factory(BytesIO(raw), *args)
        check_body_length(headers, self.request_version)
        return headers

    def get_environ(self):
        environ = super().get_environ()
        if environ["wsgi.input"] is self.wsgi_input:
            environ["wsgi.input"] = ClosingOnBadFraming(self.wsgi_input, self)
        return environ


class ClosingOnBadFraming:
    """gevent's wsgi.input, closing the connection once a read of it fails: after a chunk line
    it cannot decode, nothing on the connection can be told apart from a next request."""

    def __init__(self, body, handler: WSGIHandler):
        self.body = body
        self.handler = handler

    def read(self, length=None):
        return self._guarded(self.body.read, length)

    def readline(self, size=None):
        return self._guarded(self.body.readline, size)

    def readlines(self, hint=None):
        return self._guarded(self.body.readlines, hint)

    def __iter__(self):
        return iter(self.readline, b"")

    def __getattr__(self, name):
        return getattr(self.body, name)  # the rest is gevent's (rfile, what a websocket takes)

    def _guarded(self, read, argument):
        try:
            return read(argument)
        except OSError:  # gevent's _InvalidClientInput, or the peer went away
            self.handler.close_connection = True
            raise


def read_header_section(rfile) -> bytes:
    """The header section up to and including its empty line, each field line checked."""
    lines = []
    while True:
        line = rfile.readline(MAX_FIELD_LINE + 1)
        if line in (b"\r\n", b""):  # its end, or the peer went away (nothing to answer)
            lines.append(line)
            return b"".join(lines)
        if len(line) > MAX_FIELD_LINE:
            raise AmbiguousFraming("a header line is too long")
        if len(lines) == MAX_FIELDS:
            raise AmbiguousFraming(f"more than {MAX_FIELDS} header lines")
        if not FIELD_LINE.match(line):
            raise AmbiguousFraming(f"not a header field line: {line[:80]!r}")
        lines.append(line)


def check_body_length(headers, version: str | None) -> None:
    """RFC 9112 6.1 and 6.3: at most one way to know where the body ends."""
    encodings = headers.get_all("Transfer-Encoding") or []
    lengths = headers.get_all("Content-Length") or []
    if encodings:
        codings = [c.strip(" \t").lower() for c in ",".join(encodings).split(",")]
        if codings != ["chunked"]:
            # chunked must be the final coding, and it is the only one this server decodes.
            raise AmbiguousFraming(f"Transfer-Encoding {', '.join(encodings)!r} is not chunked")
        if lengths:
            raise AmbiguousFraming("both Content-Length and Transfer-Encoding")
        if version in ("HTTP/1.0", "HTTP/0.9"):
            raise AmbiguousFraming(f"Transfer-Encoding in an {version} request")
    if len(lengths) > 1:
        raise AmbiguousFraming("more than one Content-Length")
    if lengths and not CONTENT_LENGTH.match(lengths[0].strip(" \t")):
        raise AmbiguousFraming(f"Content-Length {lengths[0]!r} is not a number")
