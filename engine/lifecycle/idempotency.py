"""Idempotent creates (the IETF httpapi Idempotency-Key draft).

A request carrying a key runs once per caller and key for a day (IDEMPOTENCY_KEY_TTL_S,
engine/maintenance/purges.py, which forgets it after): the first one runs and its
response is kept; a repeat with the same fingerprint gets that response again (replayed); a
repeat with another fingerprint is IdempotencyKeyReused. The key, what the request wrote (the
task it created and claimed) and its kept answer commit in ONE transaction, or none of them
exists: a process killed mid-request leaves nothing behind, and a retry anywhere runs afresh. A
repeat while the first is still open waits for it (at most IN_FLIGHT_WAIT_S), then replays its
answer or, if it rolled back, runs itself; only a first request still open after that wait is
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

import psycopg

from engine.db import Database
from engine.errors import IdempotencyKeyInFlight, IdempotencyKeyReused, InvalidRequest
from engine.maintenance.purges import IDEMPOTENCY_KEY_TTL_S

#: How long a repeat waits for the first request with its key to commit or roll back. Creates
#: and inputs answer within seconds (the run itself goes on after the answer).
IN_FLIGHT_WAIT_S = 10.0
#: A request's transaction idle this long (its process stalled or cut off) is ended by the
#: server, and the key with it.
IDLE_LIMIT_S = 30.0
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
    the kept answer. `call` turns domain errors into answers itself, and its statements join this
    transaction (engine/db.py); anything it raises rolls them back with the key, and so does an
    answer of 500 or more (nothing worth replaying happened)."""
    scope = {"workspace": request.workspace, "user": request.user, "key": key}
    fp = fingerprint(secret, request)
    try:
        with db.transaction():
            taken = db.one(
                "idempotency_key_claim",
                fingerprint=fp,
                ttl_s=IDEMPOTENCY_KEY_TTL_S,
                wait_ms=int(IN_FLIGHT_WAIT_S * 1000),
                idle_ms=int(IDLE_LIMIT_S * 1000),
                now=None,
                **scope,
            )
            if taken is None:
                kept = db.one("idempotency_key_get", **scope)
                if not hmac.compare_digest(kept["fingerprint"], fp):
                    raise IdempotencyKeyReused()
                return kept["response_body"], kept["response_status"], True
            body, status = call()
            if status >= 500:
                answer = body, status, False
                raise psycopg.Rollback()
            db.execute("idempotency_key_record", status=status, body=body, **scope)
            return body, status, False
    except psycopg.errors.LockNotAvailable:
        raise IdempotencyKeyInFlight() from None
    # Only a rollback on a 5xx answer gets here: that answer, nothing kept.
    return answer
