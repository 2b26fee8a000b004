"""When a Kubernetes API call is tried again: which failures are worth another attempt, and how
long to wait before it (exponential backoff with jitter, or the server's own Retry-After)."""

import email.utils
import random
import time
from dataclasses import dataclass

import urllib3

DEFAULT_MAX_RETRIES = 4
#: First backoff step; each retry doubles it (with jitter) up to RETRY_BACKOFF_MAX_S.
DEFAULT_RETRY_BACKOFF_S = 0.5
RETRY_BACKOFF_MAX_S = 8.0
#: A longer Retry-After is shortened to this: a run must not sleep for minutes on one call.
RETRY_AFTER_MAX_S = 60.0
#: 501 is absent on purpose: "not implemented" does not get better by asking again.
RETRYABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
#: Transport failures worth another attempt (a TLS failure is not: it is a configuration error).
RETRYABLE_ERRORS = (
    urllib3.exceptions.NewConnectionError,
    urllib3.exceptions.ConnectTimeoutError,
    urllib3.exceptions.ReadTimeoutError,
    urllib3.exceptions.ProtocolError,
    ConnectionError,
)


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how patiently a failed call is tried again."""

    max_retries: int = DEFAULT_MAX_RETRIES
    backoff_s: float = DEFAULT_RETRY_BACKOFF_S
    backoff_max_s: float = RETRY_BACKOFF_MAX_S
    retry_after_max_s: float = RETRY_AFTER_MAX_S

    def delay_s(self, retry: int, retry_after_s: float | None) -> float:
        """Seconds before retry number `retry` (0-based): Retry-After when given, else backoff."""
        if retry_after_s is not None:
            return min(retry_after_s, self.retry_after_max_s)
        ceiling = min(self.backoff_max_s, self.backoff_s * 2**retry)
        return ceiling / 2 + random.uniform(0, ceiling / 2)


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """A Retry-After header (delta-seconds or HTTP-date) in seconds; None when absent or bad."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when is None or when.tzinfo is None:
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


def transport_failure(exc: Exception) -> str:
    """A transport failure in a user's words: refused, reset, timed out, does not resolve."""
    text = str(exc).lower()
    if isinstance(exc, urllib3.exceptions.ReadTimeoutError):
        return "the API server accepted the connection but did not answer in time"
    if "refused" in text:
        return "the connection was refused"
    if "reset" in text or "aborted" in text or "closed" in text:
        return "the connection was reset"
    if "name or service not known" in text or "nodename nor servname" in text:
        return "the host name does not resolve"
    # NewConnectionError subclasses ConnectTimeoutError: the words above decide first.
    if isinstance(exc, (urllib3.exceptions.ConnectTimeoutError, TimeoutError)) or "timed out" in (
        text
    ):
        return "the connection timed out"
    return f"the connection failed ({type(exc).__name__})"
