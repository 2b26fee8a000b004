"""The devbox HTTP API, authenticated by a server-minted, workspace-scoped JWT.

The devbox API names a workspace `namespace` (its URLs, the token's claims): that is its wire
format, not ours, and stays as it is; our parameters say `workspace`.

The JWT is the server's only credential (signed with DEVBOX_SIGNING_KEY, HS256), so pause and
delete work without any user: the reaper and cleanup jobs call them. Every call honours an
abort signal; a 404 is the typed absence NotFound. Every answer is read through
engine/integrations/upstream.py: at most DEVBOX_ANSWER_MAX_BYTES after decompression, and a call
over within DEVBOX_ANSWER_MAX_S (an exec: beyond its command's own time).

Routes (all under DEVBOX_URL, JSON bodies):
  POST   /v1/namespaces/<workspace>/devboxes                {"taskId"} -> 201 {"id"}
  POST   /v1/namespaces/<workspace>/devboxes/<id>/attach    -> 200 {"id", "state"}
  POST   /v1/namespaces/<workspace>/devboxes/<id>/exec      {"command": [...], "timeoutSeconds"}
                                                     -> 200 {"exitCode", "stdout", "stderr"}
  POST   /v1/namespaces/<workspace>/devboxes/<id>/pause     -> 200 or 204
  DELETE /v1/namespaces/<workspace>/devboxes/<id>           -> 200 or 204
"""

import dataclasses
import time
from urllib.parse import quote

import jwt
import requests

from engine.abort import AbortSignal
from engine.integrations.base import (
    ENGINE_NAME,
    ExecResult,
    IntegrationError,
    NotFound,
    upstream_text,
)
from engine.integrations.shapes import field, reading
from engine.integrations.upstream import AnswerLimit, http_session
from engine.trust import secrets
from engine.trust.untrusted import load_json, storable

#: Who the tokens say minted them, and whom they are for.
TOKEN_ISSUER = ENGINE_NAME
TOKEN_AUDIENCE = "devbox-api"
#: A token is minted per call; this short life bounds a leaked one.
TOKEN_TTL_S = 300
TOKEN_ALGORITHM = "HS256"
#: RFC 7518 3.2: an HS256 key at least as long as the hash.
MIN_KEY_BYTES = 32
#: Connections kept per host (one per concurrent call).
HTTP_POOL_SIZE = 64
#: Kept of a command's output; the rest is cut (a runner shows only a summary anyway).
MAX_OUTPUT_CHARS = 64 * 1024
#: The caps on one answer (DEVBOX_ANSWER_MAX_BYTES, DEVBOX_ANSWER_MAX_S).
DEFAULT_ANSWER_LIMIT = AnswerLimit(
    1024 * 1024, 60.0, "DEVBOX_ANSWER_MAX_BYTES", "DEVBOX_ANSWER_MAX_S"
)


class DevboxClient:
    """The devbox API over HTTP. Stateless: safe to share across greenlets."""

    label = "devbox"

    def __init__(
        self,
        base_url: str,
        signing_key: str,
        *,
        timeout_s: float = 30.0,
        exec_timeout_s: float = 300.0,
        answer_limit: AnswerLimit = DEFAULT_ANSWER_LIMIT,
    ):
        if len((signing_key or "").encode()) < MIN_KEY_BYTES:
            raise ValueError(
                f"the devbox API needs a signing key (DEVBOX_SIGNING_KEY) of at "
                f"least {MIN_KEY_BYTES} bytes"
            )
        self.base_url = base_url.rstrip("/")
        self._signing_key = signing_key
        secrets.register_server_secret(signing_key)
        self.timeout_s = timeout_s
        self.exec_timeout_s = exec_timeout_s
        self._http = _session(answer_limit)
        # An exec's answer comes after its command: its time is the command's plus the cap.
        self._exec_http = _session(
            dataclasses.replace(answer_limit, max_s=answer_limit.max_s + exec_timeout_s)
        )

    def __repr__(self) -> str:  # never show the key
        return f"DevboxClient({self.base_url!r})"

    def token(self, workspace: str) -> str:
        """A fresh JWT scoped to one workspace, signed with the server's key.

        The devbox API calls the scope a namespace (its claim and its URLs): its contract, kept."""
        now = int(time.time())
        claims = {
            "iss": TOKEN_ISSUER,
            "aud": TOKEN_AUDIENCE,
            "sub": f"namespace:{workspace}",
            "namespace": workspace,
            "iat": now,
            "nbf": now,
            "exp": now + TOKEN_TTL_S,
        }
        token = jwt.encode(claims, self._signing_key, algorithm=TOKEN_ALGORITHM)
        secrets.register_minted_token(token)  # a bearer credential while it lives
        return token

    # -- the API -------------------------------------------------------------------------------
    def create(self, *, workspace: str, task_id: str, abort: AbortSignal) -> str:
        """A new devbox for a task; its id."""
        body = self._call("POST", workspace, "", {"taskId": str(task_id)}, abort=abort)
        with reading("creating a devbox"):
            devbox_id = field(body, "id", str)
        if not devbox_id:
            raise IntegrationError("the devbox API created a devbox without an id")
        return devbox_id

    def attach(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Re-attach to an existing devbox (resuming it if paused); NotFound when it is gone."""
        self._call("POST", workspace, f"/{quote(devbox_id, safe='')}/attach", {}, abort=abort)

    def exec(
        self,
        devbox_id: str,
        command: list[str],
        *,
        workspace: str,
        abort: AbortSignal,
        timeout_s: float | None = None,
    ) -> ExecResult:
        """Run one command (argv, no shell) inside the devbox; its exit code and output."""
        timeout_s = timeout_s or self.exec_timeout_s
        body = self._call(
            "POST",
            workspace,
            f"/{quote(devbox_id, safe='')}/exec",
            {"command": list(command), "timeoutSeconds": int(timeout_s)},
            abort=abort,
            read_timeout_s=timeout_s + self.timeout_s,
            http=self._exec_http,
        )
        with reading("running a command in the devbox"):
            exit_code = field(body, "exitCode", int)
            stdout, stderr = field(body, "stdout", str), field(body, "stderr", str)
        if exit_code is None:
            raise IntegrationError("the devbox API answered exec without an exit code")
        # Output is shown and kept (git's last line names why a clone failed).
        return ExecResult(
            exit_code, storable(stdout[:MAX_OUTPUT_CHARS]), storable(stderr[:MAX_OUTPUT_CHARS])
        )

    def pause(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Pause (idempotent); NotFound when it is gone."""
        self._call("POST", workspace, f"/{quote(devbox_id, safe='')}/pause", {}, abort=abort)

    def delete(self, devbox_id: str, *, workspace: str, abort: AbortSignal) -> None:
        """Delete (idempotent); NotFound when it is already gone."""
        self._call("DELETE", workspace, f"/{quote(devbox_id, safe='')}", None, abort=abort)

    # -- internals -------------------------------------------------------------------------------
    def _call(
        self,
        method: str,
        workspace: str,
        path: str,
        body: dict | None,
        *,
        abort: AbortSignal,
        read_timeout_s: float | None = None,
        http: requests.Session | None = None,
    ):
        url = f"{self.base_url}/v1/namespaces/{quote(workspace, safe='')}/devboxes{path}"
        headers = {"Authorization": f"Bearer {self.token(workspace)}", "Accept": "application/json"}
        # The HTTP exchange runs in a greenlet of its own that the abort kills: it touches no
        # database connection, so killing it mid-read only drops its socket.
        try:
            response = abort.run(
                (http or self._http).request,
                method,
                url,
                json=body,
                headers=headers,
                timeout=(self.timeout_s, read_timeout_s or self.timeout_s),
            )
        except requests.RequestException as exc:
            raise IntegrationError(f"devbox API unreachable: {type(exc).__name__}") from exc
        if response.status_code == 404:
            raise NotFound(f"devbox not found ({method} {path or '/'})")
        if response.status_code in (401, 403):
            raise IntegrationError(
                f"the devbox API refused the server credential (HTTP {response.status_code})"
            )
        if response.status_code >= 400:
            raise IntegrationError(
                f"devbox API error: HTTP {response.status_code} {_detail(response)}".rstrip()
            )
        if response.status_code == 204 or not response.content:
            return {}
        try:
            # The depth-limited loader: requests' own json() raises RecursionError on deep nesting.
            return load_json(response.content)
        except ValueError:
            raise IntegrationError("the devbox API answered with something that is not JSON")


def _session(limit: AnswerLimit) -> requests.Session:
    """A session for the server credential (no ambient proxy or .netrc, which could replace our
    Authorization header) whose answers are read within `limit`, pooled for many runs."""
    return http_session(limit, pool_size=HTTP_POOL_SIZE, trust_env=False)


def _detail(response: requests.Response) -> str:
    """The API's structured message, bounded; never the raw body."""
    try:
        body = load_json(response.content)
    except ValueError:
        return ""
    if isinstance(body, dict):
        return upstream_text(body.get("message") or body.get("error"), 200)
    return ""
