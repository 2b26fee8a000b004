"""A Kubernetes API response as the adapter reads it, and the error text built from it.

Error text comes from the API's structured `Status.message`, bounded; a body that is not a Status
is never quoted: it may be whatever some other service behind that address answered.
"""

from collections.abc import Mapping
from dataclasses import dataclass

from engine.integrations.base import IntegrationError, upstream_text
from engine.trust.untrusted import load_json

MESSAGE_MAX_CHARS = 500


@dataclass(frozen=True)
class KubeResponse:
    """One HTTP answer of the API server, read whole."""

    status: int
    #: urllib3's case-insensitive HTTPHeaderDict.
    headers: Mapping
    body: bytes

    def json(self) -> dict:
        """The body as a JSON object; IntegrationError when it is not one."""
        try:
            value = load_json(self.body or b"{}")
        except ValueError:
            raise IntegrationError(f"the API answered {self.status} with a body that is not JSON")
        if not isinstance(value, dict):
            raise IntegrationError(f"the API answered {self.status} with an unexpected body")
        return value

    def message(self) -> str:
        """The API's own words (a Status object's message), bounded; never the raw body."""
        try:
            value = load_json(self.body)
        except ValueError:
            value = None
        text = upstream_text(
            value.get("message") if isinstance(value, dict) else None, MESSAGE_MAX_CHARS
        )
        return f"{text or 'no Status message'} (HTTP {self.status})"


class ApiError(IntegrationError):
    """The API refused a call with a non-retryable status."""

    reason = "api_error"

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status
