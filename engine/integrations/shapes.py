"""Reading fields of an upstream answer (the Kubernetes API, the devbox API, the gateway) by type.

A server a user can aim us at may answer any JSON at all, so every field the adapters read is
taken through these accessors, never by `.get()` chains that assume the shape. A field of a type
its API never sends is the server's fault, named as UpstreamAnswerMalformed (which field, which
type); a field that is absent or null is the caller's default, since Kubernetes leaves empty
fields out. Readers whose every field is optional (why a pod is not ready, the words of an error)
take `optional`, which turns a wrong type into the default instead.
"""

from collections.abc import Iterator
from contextlib import contextmanager

from engine.integrations.base import IntegrationError

#: What each accepted Python type is called in JSON (the words of the error).
_JSON_NAMES = {
    dict: "an object",
    list: "a list",
    str: "a string",
    int: "an integer",
    float: "a number",
    bool: "true or false",
}


class UpstreamAnswerMalformed(IntegrationError):
    """An upstream server answered with a field of a type its API never sends."""

    reason = "upstream_answer_malformed"


def field(obj, path: str, kind: type, default=None):
    """The value at `path` ("status.userInfo.username") of an answer when it is a `kind`.

    Absent or null (the value or an object on the way): `default`, else the kind's empty value
    ({}, [], "") or None. Anything else: UpstreamAnswerMalformed naming the path and both types.
    """
    value, walked = obj, ""
    for name in path.split("."):
        if value is None:
            break
        if not isinstance(value, dict):
            raise _wrong(walked, value, dict)
        value = value.get(name)
        walked = f"{walked}.{name}" if walked else name
    if value is None:
        return _empty(kind) if default is None else default
    if not _is(value, kind):
        raise _wrong(path, value, kind)
    return value


def entries(obj, path: str, kind: type = dict) -> list:
    """The list at `path`, each of its entries a `kind` (absent or null: [])."""
    items = field(obj, path, list)
    for index, item in enumerate(items):
        if not _is(item, kind):
            raise _wrong(f"{path}[{index}]", item, kind)
    return items


def optional(obj, path: str, kind: type, default=None):
    """`field` for a reader that can do without: a wrong type anywhere is the default too."""
    try:
        return field(obj, path, kind, default)
    except UpstreamAnswerMalformed:
        return _empty(kind) if default is None else default


@contextmanager
def reading(what: str) -> Iterator[None]:
    """Name the answer a wrong shape was found in: "asking who the credential is: the answer's
    status is a string, not an object"."""
    try:
        yield
    except UpstreamAnswerMalformed as exc:
        raise UpstreamAnswerMalformed(f"{what}: {exc}") from None


def _is(value, kind: type) -> bool:
    if isinstance(value, bool):  # a bool is an int to Python, never to JSON
        return kind is bool
    if kind is float:
        return isinstance(value, (int, float))
    return isinstance(value, kind)


def _empty(kind: type):
    return kind() if kind in (dict, list, str) else None


def _json_name(value) -> str:
    if value is None:
        return "null"
    return next((name for kind, name in _JSON_NAMES.items() if _is(value, kind)), "a value")


def _wrong(path: str, value, kind: type) -> UpstreamAnswerMalformed:
    where = f"the answer's {path}" if path else "the answer"
    return UpstreamAnswerMalformed(f"{where} is {_json_name(value)}, not {_JSON_NAMES[kind]}")
