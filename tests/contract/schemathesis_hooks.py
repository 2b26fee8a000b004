"""Schemathesis hooks of the contract run (loaded by SCHEMATHESIS_HOOKS in its own process).

Every write that carries a well-formed idempotency key gets a fresh one, so a key is never
reused with a different body (which the server rightly refuses with 422): schemathesis would
otherwise send the same shrunk key ("0") with every body. Malformed keys are left alone: they
are the negative data the server must refuse.

The one request rule JSON Schema cannot state: a sensitive value needs at least
secrets.MIN_SECRET_CHARS characters, since a shorter one could not be scrubbed from logs. What
is sensitive spans fields and requests (sensitiveKeys, a name like a secret's, the keys an
earlier request of the same task declared), so the document says it in words and these hooks
lengthen every short input, env and args value in generated bodies;
tests/integration/test_secret_side_doors.py tests the refusal itself.

And one artefact of schemathesis's links: it merges a link's body values into a generated body,
nested objects included, so a source taken whole from a response (GetTask's DeployAgain) comes
out mixed with another kind's generated fields, which no client following the link would send.
In the stateful phase a source keeps only its own kind's fields.
"""

import re
import uuid

import schemathesis

from engine.lifecycle.intake import SECRET_BEARING_FIELDS
from engine.runners.kinds import KINDS
from engine.trust import secrets

KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


def _fresh(value):
    return f"contract-{uuid.uuid4()}" if isinstance(value, str) and KEY.match(value) else value


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    """A unique Idempotency-Key header (and tool idempotencyKey argument) per request."""
    if case.headers and "Idempotency-Key" in case.headers:
        case.headers["Idempotency-Key"] = _fresh(case.headers["Idempotency-Key"])
    if isinstance(case.body, dict) and "idempotencyKey" in case.body:
        case.body["idempotencyKey"] = _fresh(case.body["idempotencyKey"])
    if isinstance(case.body, dict):
        _lengthen_sensitive(case.body)
        if case.meta is not None and case.meta.phase.name.value == "stateful":
            _one_kind(case.body.get("source"))


def _one_kind(source) -> None:
    kind = KINDS.get(source.get("kind")) if isinstance(source, dict) else None
    if kind is not None:
        for name in set(source) - set(kind.schema().fields):
            del source[name]


def _lengthen_sensitive(body: dict) -> None:
    """Any input, env or args value may be sensitive (declared now, by an earlier request of
    its task, or by its name): none is left shorter than a secret may be."""
    source = body.get("source") if isinstance(body.get("source"), dict) else {}
    for values in (body.get("inputs"), *(source.get(f) for f in SECRET_BEARING_FIELDS)):
        if not isinstance(values, dict):
            continue
        for name, value in values.items():
            if isinstance(value, str) and 0 < len(value) < secrets.MIN_SECRET_CHARS:
                values[name] = value.ljust(secrets.MIN_SECRET_CHARS, "s")
