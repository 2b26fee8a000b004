"""Schemathesis hooks of the contract run (loaded by SCHEMATHESIS_HOOKS in its own process).

Every write that carries a well-formed idempotency key gets a fresh one, so a key is never
reused with a different body (which the server rightly refuses with 422): schemathesis would
otherwise send the same shrunk key ("0") with every body. Malformed keys are left alone: they
are the negative data the server must refuse.
"""

import re
import uuid

import schemathesis

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
