"""Idempotent creates (the IETF httpapi Idempotency-Key draft).

A request carrying a key runs once per caller and key for TTL_S: the first one runs and its
response is kept; a repeat with the same fingerprint gets that response again (replayed); a
repeat with another fingerprint is IdempotencyKeyReused; a repeat while the first still runs is
IdempotencyKeyInFlight. The fingerprint is an HMAC of the request under a server key, so the
table holds no submitted value; the kept response is what the API answered, which never carries
a secret (snapshots are stripped and redacted).
"""

import hashlib
import hmac
import json
import re
from collections.abc import Callable
from dataclasses import dataclass

from engine.core.errors import IdempotencyKeyInFlight, IdempotencyKeyReused, InvalidRequest
from engine.db import Database

TTL_S = 24 * 3600
#: A first request still unanswered after this long died with its process: the key is free again.
#: Creates and inputs answer within seconds (the run itself goes on after the answer).
ABANDONED_S = 300
PURGE_BATCH = 1000
#: Printable ASCII without spaces, 1 to 255 characters (a UUID is the usual choice).
KEY = re.compile(r"^[\x21-\x7e]{1,255}$")


@dataclass(frozen=True)
class Request:
    """Whose request this is and what it asks (the body as the caller sent it)."""

    workspace: str
    user: str
    method: str
    path: str
    body: object


def parse_key(raw: str | None) -> str | None:
    """The key of a header or tool argument; InvalidRequest when malformed. The draft's header is
    a Structured Field string ("..."); a bare token is accepted too."""
    if raw is None:
        return None
    key = raw.strip()
    if len(key) >= 2 and key[0] == key[-1] == '"':
        key = key[1:-1]
    if not KEY.match(key):
        raise InvalidRequest(
            "Idempotency-Key must be 1 to 255 printable ASCII characters",
            fields={"Idempotency-Key": ["not a valid key"]},
        )
    return key


def fingerprint(secret: bytes, request: Request) -> str:
    """A keyed hash of the request: equal for the same request, useless to guess values with."""
    canonical = json.dumps(
        [request.workspace, request.user, request.method, request.path, request.body],
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    key = hmac.new(secret, b"idempotency-fingerprint", hashlib.sha256).digest()
    return hmac.new(key, canonical.encode("utf-8", "surrogatepass"), hashlib.sha256).hexdigest()


def run_once(
    db: Database, secret: bytes, key: str, request: Request, call: Callable[[], tuple[dict, int]]
) -> tuple[dict, int, bool]:
    """(body, status, replayed): `call` runs for the first request with `key`; a repeat gets
    the kept answer. `call` turns domain errors into answers itself; anything it raises frees
    the key (nothing worth replaying happened), and so does an answer of 500 or more."""
    scope = {"workspace": request.workspace, "user": request.user, "key": key}
    fp = fingerprint(secret, request)
    db.execute(
        "idempotency_key_delete_if_expired", ttl_s=TTL_S, abandoned_s=ABANDONED_S, now=None, **scope
    )
    if db.one("idempotency_key_claim", fingerprint=fp, now=None, **scope) is None:
        kept = db.one("idempotency_key_get", **scope)
        if kept is None:  # released between our claim and read: the first one failed, go again
            return run_once(db, secret, key, request, call)
        if not hmac.compare_digest(kept["fingerprint"], fp):
            raise IdempotencyKeyReused()
        if kept["response_status"] is None:
            raise IdempotencyKeyInFlight()
        return kept["response_body"], kept["response_status"], True
    try:
        body, status = call()
    except BaseException:
        db.execute("idempotency_key_release", **scope)
        raise
    if status >= 500:
        db.execute("idempotency_key_release", **scope)
    else:
        db.execute("idempotency_key_record", status=status, body=body, **scope)
    return body, status, False


def purge_expired(db: Database, *, now=None, limit: int = PURGE_BATCH) -> int:
    """Delete a batch of expired keys; how many."""
    return db.execute("idempotency_key_delete_expired", ttl_s=TTL_S, limit=limit, now=now)
