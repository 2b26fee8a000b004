"""Reading text that comes from outside (a request, a header, a model's answer, a template file):
the one JSON loader and the one YAML loader, both depth-limited, and the one rule for text that
may be stored.

Python's `json` recurses per nesting level: `[` x 50,000 (well under the body limit) raises
RecursionError, and a merely deep document can still blow the stack of whatever walks it later.
PyYAML expands aliases: a 345-byte "billion laughs" document becomes megabytes and blocks the
gevent hub for seconds, so the YAML loader refuses aliases outright. PostgreSQL refuses a NUL
character in text and jsonb, and a lone UTF-16 surrogate (which `json` decodes happily) anywhere.
All of these are refused here, at the edge, with a message naming the problem.
"""

import functools
import json
import math
import re
from itertools import accumulate

import yaml
from marshmallow import Schema, ValidationError, fields, pre_load
from yaml.composer import ComposerError

#: Deeper than any request, kubeconfig or plan this service reads (a manifest is ~10 levels).
MAX_JSON_DEPTH = 64

#: A JSON string (escapes included) to its closing quote or, never closed, to the end of the
#: text. Possessive, unrolled: one pass that keeps no backtracking state per character (the
#: alternation `(?:[^"\\]|\\.)*` kept ~100 bytes per character: 16 MiB of one string took
#: gigabytes), and a string that never closes is swallowed whole, so no scan restarts inside it.
_JSON_STRING = re.compile(r'"[^"\\]*+(?:\\.[^"\\]*+)*+(?:"|\\?\Z)', re.DOTALL)
#: For bytes.translate: every byte but the four brackets deleted, `{` `}` as `[` `]`.
_SQUARE = bytes.maketrans(b"{}", b"[]")
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_STEP = {ord("["): 1, ord("]"): -1}
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
#: The same rule as a JSON Schema pattern for the API's documents: no NUL character. (A lone
#: surrogate cannot be written in the regex dialect JSON Schema validators use; JSON generators
#: do not produce one unasked, and the documents' descriptions name it.)
STORABLE_TEXT_PATTERN = r"^[^\x00]*$"


class MalformedJson(ValueError):
    """The text is not a JSON document this service reads."""


def json_depth_exceeds(text: str, max_depth: int = MAX_JSON_DEPTH) -> bool:
    """Whether brackets outside strings nest deeper than `max_depth` (an unclosed one counts).

    Linear in time with constant state per character, every step in C (the regular expression,
    bytes.translate, the running sum): 2 MiB of text takes ~1-5 ms, 2 MiB of nothing but
    brackets ~50-100 ms (json.loads itself takes longer on such a document)."""
    if text.count("[") + text.count("{") <= max_depth:
        return False
    if '"' in text:
        text = _JSON_STRING.sub("", text)
    brackets = text.encode("utf-8", "surrogatepass").translate(_SQUARE, _NOT_BRACKETS)
    depths = accumulate(map(_STEP.__getitem__, brackets))
    return next(filter(max_depth.__lt__, depths), None) is not None


def load_json(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH):
    """The JSON value of `data`; MalformedJson when it is not JSON or nests too deep."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedJson("the body is not UTF-8") from None
    if json_depth_exceeds(data, max_depth):
        raise MalformedJson(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(data)
    except (ValueError, RecursionError) as exc:
        raise MalformedJson(f"not valid JSON ({getattr(exc, 'msg', 'too deep')})") from None


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader without aliases and with a nesting limit (the composer recurses)."""

    _depth = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            raise ComposerError(
                None, None, "YAML aliases are not accepted", self.peek_event().start_mark
            )
        self._depth += 1
        try:
            if self._depth > MAX_JSON_DEPTH:
                raise ComposerError(
                    None,
                    None,
                    f"YAML nested deeper than {MAX_JSON_DEPTH} levels",
                    self.peek_event().start_mark,
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


class MalformedYaml(ValueError):
    """The text is not a YAML document this service reads (the message says where)."""


def load_yaml(text: str | bytes):
    """One YAML document, no aliases, bounded nesting; MalformedYaml otherwise."""
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.YAMLError as exc:
        raise MalformedYaml(str(exc)) from None


def load_yaml_all(text: str | bytes) -> list:
    """Every YAML document of a stream, by the same rules as load_yaml."""
    try:
        return list(yaml.load_all(text, Loader=_StrictLoader))
    except yaml.YAMLError as exc:
        raise MalformedYaml(str(exc)) from None


def unstorable(text: str) -> str | None:
    """Why `text` cannot be stored (a NUL character, a lone surrogate), or None."""
    match = _UNSTORABLE.search(text)
    if match is None:
        return None
    if match.group() == "\x00":
        return "must not contain a NUL character"
    return "must not contain a lone UTF-16 surrogate (invalid Unicode)"


def storable(text: str) -> str:
    """`text` with each character PostgreSQL cannot store (NUL, a lone surrogate) replaced by
    U+FFFD: for text read from a server, which is shown and kept rather than refused."""
    return _UNSTORABLE.sub("\ufffd", text)


def unstorable_paths(value, path: tuple = ()) -> dict:
    """{path: reason} for every string (key or value) inside `value` that cannot be stored."""
    return _problems(value, path, jsonb=False)


def unfit_for_jsonb(value, path: tuple = ()) -> dict:
    """{path: reason} for everything inside a parsed value (JSON, or YAML from load_yaml) that
    PostgreSQL cannot keep as jsonb: unstorable text (keys too), a number that is not finite
    (`NaN`, which `json` reads), a key that is not text or a value JSON has no type for (a YAML
    date)."""
    return _problems(value, path, jsonb=True)


def _problems(value, path: tuple, *, jsonb: bool) -> dict:
    found = {}
    if isinstance(value, str):
        reason = unstorable(value)
        if reason:
            found[path] = reason
    elif isinstance(value, dict):
        for key, item in value.items():
            where = path + (_printable(key),)
            if isinstance(key, str) and unstorable(key):
                found[where] = "a key " + unstorable(key)
            elif jsonb and not isinstance(key, str):
                found[where] = "a key must be text"
            found.update(_problems(item, where, jsonb=jsonb))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found.update(_problems(item, path + (index,), jsonb=jsonb))
    elif jsonb and isinstance(value, float) and not math.isfinite(value):
        found[path] = "must be a finite number"
    elif jsonb and not (value is None or isinstance(value, (bool, int, float))):
        found[path] = f"is not a JSON value ({type(value).__name__})"
    return found


def _printable(key) -> str:
    """A key as it may appear in an error message (never with the offending characters)."""
    return _UNSTORABLE.sub("\ufffd", key) if isinstance(key, str) else str(key)


def _nest(path: tuple, message: str) -> dict:
    out: dict | list = [message]
    for part in reversed(path or ("_schema",)):
        out = {part: out}
    return out


def _merge(into: dict, other: dict) -> None:
    for key, value in other.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def whole(value):
    """60.0 as 60 (both are integers to JSON Schema); any other value as it is."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


class WholeNumber(fields.Integer):
    """A strict integer that may be written 60 or 60.0."""

    def _validated(self, value):
        return super()._validated(whole(value))


class RequestSchema(Schema):
    """A request's fields; the storable-text rule holds for every string in it.

    Every request schema derives from it (the sources' in engine/runners/kinds.py, the rest in
    blueprints/), so a field added later cannot bring the 500 back (tests/unit/test_invariants.py
    checks the base class)."""

    @classmethod
    @functools.cache
    def shared(cls) -> "RequestSchema":
        """This schema's one instance. Building one deep-copies every declared field (a create
        built two: 2.5% of the server's CPU under load, py-spy); a marshmallow 4 schema keeps no
        state between loads (each load collects its own errors), so one serves every request."""
        return cls()

    @pre_load
    def _storable_text(self, data, **kwargs):
        problems = unstorable_paths(data)
        if problems:
            messages: dict = {}
            for path, reason in problems.items():
                _merge(messages, _nest(path, reason))
            raise ValidationError(messages)
        return data
