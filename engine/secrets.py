"""The one sensitivity predicate, and the strip and scrub built on it.

Persist-side stripping, DTO redaction and form generation all ask `is_sensitive`, so they can
never disagree about what a secret is.
"""
import base64
import json
import re

_SENSITIVE_NAME = re.compile(
    r"(pass(word|wd|phrase)?|secret|token|api[_-]?key|access[_-]?key|private[_-]?key|credential"
    r"|auth|session[_-]?key|client[_-]?secret|dsn|connection[_-]?string|cert(ificate)?[_-]?key)",
    re.IGNORECASE,
)
_SENSITIVE_TYPES = {"password", "secret"}
REDACTED = "[redacted]"


def is_sensitive(name: str, *, declared: set[str] | frozenset = frozenset(),
                 input_type: str | None = None) -> bool:
    """Declared sensitive, typed as a secret, or named like one."""
    return (name in declared or (input_type or "").lower() in _SENSITIVE_TYPES
            or bool(_SENSITIVE_NAME.search(name)))


def split(values: dict, *, declared: set[str] | frozenset = frozenset(),
          types: dict[str, str] | None = None) -> tuple[dict, dict]:
    """(plain, sensitive) halves of a name -> value mapping."""
    types = types or {}
    plain, sensitive = {}, {}
    for name, value in values.items():
        target = sensitive if is_sensitive(name, declared=declared, input_type=types.get(name)) else plain
        target[name] = value
    return plain, sensitive


def scrub(obj, secret_values: list[str]):
    """Replace every known secret value (raw, JSON-escaped, base64) anywhere inside obj."""
    needles = _needles(secret_values)
    if not needles:
        return obj
    return _scrub(obj, needles)


def _needles(values: list[str]) -> list[str]:
    found = set()
    for value in values:
        if not isinstance(value, str) or len(value) < 4:
            continue  # too short to scrub without mangling ordinary text
        found.add(value)
        found.add(json.dumps(value)[1:-1])
        found.add(base64.b64encode(value.encode()).decode())
        found.add(base64.b64encode(value.encode()).decode().rstrip("="))
    return sorted(found, key=len, reverse=True)


def _scrub(obj, needles: list[str]):
    if isinstance(obj, str):
        for needle in needles:
            if needle in obj:
                obj = obj.replace(needle, REDACTED)
        return obj
    if isinstance(obj, dict):
        return {k: _scrub(v, needles) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_scrub(v, needles) for v in obj]
    return obj
