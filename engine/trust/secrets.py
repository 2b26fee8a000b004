"""The one sensitivity predicate, and the strip and scrub built on it.

Persist-side stripping, DTO redaction and form generation all ask `is_sensitive`, so they can
never disagree about what a secret is.
"""

import base64
import contextvars
import json
import logging
import re
from collections import deque
from contextlib import contextmanager

_SENSITIVE_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential"
    r"|auth|session[_-]?key|client[_-]?secret|dsn|connection[_-]?string|cert(ificate)?[_-]?key)",
    re.IGNORECASE,
)
_SENSITIVE_TYPES = {"password", "secret"}
REDACTED = "[redacted]"
#: Shortest sensitive value accepted: shorter ones cannot be scrubbed from free text safely.
MIN_SECRET_CHARS = 8
#: A cut-off piece of a secret this long at the edge of a text is redacted too.
MIN_PARTIAL_CHARS = 4

#: The process's own credentials (gateway API key, devbox signing key, OIDC client secret,
#: SECRET_KEY, METRICS_TOKEN, the database password): scrubbed from every message and log line
#: for the life of the process. A handful, never evicted: nothing registered later pushes them out.
_process_credentials: list[str] = []
#: Tokens this process minted lately, for text written outside any run (a cleanup job's devbox
#: pause). A run keeps the tokens it minted itself for its whole life (RUN_SECRETS).
_recent_tokens: deque[str] = deque(maxlen=256)
#: The scrub list of the run this greenlet serves (its handle's secret values, kubeconfig
#: credentials included): a token minted here joins it, and log lines written here are scrubbed
#: of it.
RUN_SECRETS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar(
    "run_secrets", default=None
)


def is_sensitive(
    name: str, *, declared: set[str] | frozenset = frozenset(), input_type: str | None = None
) -> bool:
    """Declared sensitive, typed as a secret, or named like one."""
    return (
        name in declared
        or (input_type or "").lower() in _SENSITIVE_TYPES
        or bool(_SENSITIVE_NAME.search(name))
    )


def split(
    values: dict,
    *,
    declared: set[str] | frozenset = frozenset(),
    types: dict[str, str] | None = None,
) -> tuple[dict, dict]:
    """(plain, sensitive) halves of a name -> value mapping."""
    types = types or {}
    plain, sensitive = {}, {}
    for name, value in values.items():
        target = (
            sensitive
            if is_sensitive(name, declared=declared, input_type=types.get(name))
            else plain
        )
        target[name] = value
    return plain, sensitive


def register_server_secret(value: str | None) -> None:
    """Scrub `value` (a credential of this process) everywhere, for the life of the process."""
    if isinstance(value, str) and value and value not in _process_credentials:
        _process_credentials.append(value)


def register_minted_token(token: str) -> None:
    """Scrub a bearer token this process minted: for the life of the run minting it (if any),
    and everywhere while it is among the recent ones."""
    run = RUN_SECRETS.get()
    if run is not None and token not in run:
        run.append(token)
    if token not in _recent_tokens:
        _recent_tokens.append(token)


@contextmanager
def run_scope(secret_values: list[str]):
    """While inside, this greenlet serves a run whose scrub list is `secret_values` (the very
    list: tokens minted meanwhile are appended to it)."""
    reset = RUN_SECRETS.set(secret_values)
    try:
        yield secret_values
    finally:
        RUN_SECRETS.reset(reset)


def _always_scrubbed() -> list[str]:
    """What every scrub covers besides the values a caller passes: the process's credentials,
    the recent minted tokens and the current run's scrub list."""
    return _process_credentials + list(_recent_tokens) + (RUN_SECRETS.get() or [])


def too_short(values: dict, sensitive: set[str]) -> list[str]:
    """Names of sensitive values under MIN_SECRET_CHARS (refused: they cannot be scrubbed)."""
    return sorted(
        name
        for name, value in values.items()
        if name in sensitive and isinstance(value, str) and value and len(value) < MIN_SECRET_CHARS
    )


def scrub(obj, secret_values: list[str] = ()):
    """Replace every known secret value (raw, JSON-escaped, base64) anywhere inside obj, and the
    server's own credentials. A text cut off inside a secret (truncated elsewhere) loses the
    piece at its end too."""
    needles = _needles(list(secret_values) + _always_scrubbed())
    if not needles:
        return obj
    return _scrub(obj, needles)


class Needles(list):
    """What a scrub looks for, longest first, with one pattern of their first MIN_PARTIAL_CHARS
    characters: a text in which no needle's start occurs holds no secret and no cut-off piece of
    one (both begin with it), which is almost every text a run writes; one search settles it
    where the exact checks below cost a search per needle (a tenth of a deployment's server CPU,
    cProfile)."""

    def __init__(self, found: set[str]):
        super().__init__(sorted(found, key=len, reverse=True))
        starts = sorted({re.escape(n[:MIN_PARTIAL_CHARS]) for n in self})
        self.starts = re.compile("|".join(starts)) if starts else None


#: The last values' needles: most scrubs of a process look for the same values (its credentials,
#: the recent tokens, a run's few secrets), and building them anew on every scrub was about a
#: hundredth of a deployment's server CPU (py-spy). One entry: it keeps no secret in memory
#: past the next scrub of other values.
_last_needles: tuple[tuple, Needles] = ((), Needles(set()))


def _needles(values: list[str]) -> Needles:
    global _last_needles
    key = tuple(values)
    if key == _last_needles[0]:
        return _last_needles[1]
    found = set()
    for value in values:
        if not isinstance(value, str) or len(value) < MIN_PARTIAL_CHARS:
            continue  # too short to scrub without mangling ordinary text
        found.add(value)
        found.add(json.dumps(value)[1:-1])
        found.add(base64.b64encode(value.encode()).decode())
        found.add(base64.b64encode(value.encode()).decode().rstrip("="))
    needles = Needles(found)
    _last_needles = (key, needles)
    return needles


def _scrub(obj, needles: Needles):
    if isinstance(obj, str):
        if needles.starts.search(obj) is None:
            return obj
        for needle in needles:
            if needle in obj:
                obj = obj.replace(needle, REDACTED)
        return _scrub_edges(obj, needles)
    if isinstance(obj, dict):
        return {k: _scrub(v, needles) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(v, needles) for v in obj]
    return obj


def _scrub_edges(text: str, needles: list[str]) -> str:
    """Redact the start of a secret left at the end of `text` (before a trailing "..."): what a
    cut made elsewhere (an upstream message bounded before it reached us) leaves behind."""
    body, ellipsis = (text[:-3], "...") if text.endswith("...") else (text, "")
    # A piece before a cut marker ("...") is taken from MIN_PARTIAL_CHARS on; without one, only
    # from MIN_SECRET_CHARS on: a short word that merely begins like a secret ("devbox" before a
    # key "devbox-...") is ordinary text, and the shortest secret accepted is that long anyway.
    shortest = MIN_PARTIAL_CHARS if ellipsis else MIN_SECRET_CHARS
    for needle in needles:
        # Where the needle's start occurs in the body's last len(needle)-1 characters, earliest
        # first (the longest piece): linear, however long the secret (a client key).
        tail_start = max(0, len(body) - len(needle) + 1)
        head = needle[:MIN_PARTIAL_CHARS]
        at = body.find(head, tail_start)
        while at != -1 and len(body) - at >= shortest:
            if needle.startswith(body[at:]):
                return body[:at] + REDACTED + ellipsis
            at = body.find(head, at + 1)
    return text


_CREDENTIALS = [
    # user:password@ in a URL
    (re.compile(r"(?i)\b([a-z][a-z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@"), r"\1" + REDACTED + "@"),
    # Authorization header values and bare bearer tokens
    (re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}"), r"\1 " + REDACTED),
    # name=value or "name": "value" where the name is a secret's (password=..., "token": "...")
    (
        re.compile(
            r"(?i)([\"']?[a-z0-9_-]*" + _SENSITIVE_NAME.pattern + r"[a-z0-9_-]*[\"']?\s*[:=]\s*)"
            r"(\"[^\"]*\"|'[^']*'|[^\s,;&}]+)"
        ),
        r"\1" + REDACTED,
    ),
]


def redact_credentials(text: str) -> str:
    """Text an operator will read (a log line, a streak's last error) with anything shaped like
    a credential replaced: URL passwords, bearer tokens, secret-named key=value pairs."""
    for pattern, replacement in _CREDENTIALS:
        text = pattern.sub(replacement, text)
    return text


class StreamScrubber:
    """Scrub known secret values from text that arrives in pieces (a streamed model answer).

    A value split across two pieces is still caught: text that could be the start of a value
    is held back until the next piece settles it. Feed pieces in order, then flush once.
    """

    def __init__(self, secret_values: list[str]):
        self._needles = _needles(list(secret_values) + _always_scrubbed())
        self._pending = ""

    def feed(self, piece: str) -> str:
        """The scrubbed text that is safe to show now."""
        self._pending += piece
        if not self._needles:
            out, self._pending = self._pending, ""
            return out
        out: list[str] = []
        text, i = self._pending, 0
        longest = len(self._needles[0])
        while i < len(text):
            # Where no needle's start begins, nothing can be held back or matched: everything
            # before the next start goes out at once (per character, a long answer with many
            # needles blocked the worker for seconds). The last few characters, too short to hold
            # a whole start, take the exact checks.
            found = self._needles.starts.search(text, i)
            plain_to = found.start() if found else max(i, len(text) - MIN_PARTIAL_CHARS + 1)
            if plain_to > i:
                out.append(text[i:plain_to])
                i = plain_to
                continue
            if len(text) - i < longest and any(
                len(n) > len(text) - i and n.startswith(text[i:]) for n in self._needles
            ):
                break  # may still become a secret: wait for more text
            match = next((n for n in self._needles if text.startswith(n, i)), None)
            if match:
                out.append(REDACTED)
                i += len(match)
            else:
                out.append(text[i])
                i += 1
        self._pending = text[i:]
        return "".join(out)

    def flush(self) -> str:
        """Whatever was held back, scrubbed (the stream has ended)."""
        rest, self._pending = self._pending, ""
        return _scrub(rest, self._needles) if self._needles else rest


def install_log_scrubber() -> None:
    """Scrub the process's own credentials, recent minted tokens and (in a run's greenlet) the
    run's secrets from every log record this process creates (message, arguments and
    traceback), whatever logger or handler writes it. Idempotent."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "scrubs_server_secrets", False):
        return

    def factory(*args, **kwargs):
        record = previous(*args, **kwargs)
        if not _always_scrubbed():
            return record
        try:
            message = record.getMessage()
        except Exception:
            return record  # a broken format string: the logging module reports it
        scrubbed = scrub(message)
        if scrubbed != message:
            record.msg, record.args = scrubbed, None
        if record.exc_info and not record.exc_text:
            record.exc_text = scrub(logging.Formatter().formatException(record.exc_info))
        return record

    factory.scrubs_server_secrets = True
    logging.setLogRecordFactory(factory)
