"""What the JSON API and the chat tools share (no routes here): the create call, a call's answer
as (body, status) with a domain error's included, and the one Idempotency-Key wrapper."""

from collections.abc import Callable

from flask import Response, current_app, jsonify

from blueprints.auth.gate import current_identity
from blueprints.errors import error_body, http_status, retry_after
from blueprints.request_helpers import kubeconfig_from_header, runtime
from engine.errors import DomainError
from engine.lifecycle import actions, idempotency, rollback
from engine.readside import dto

#: A call's answer: (JSON body, HTTP status).
Call = Callable[[], tuple[dict, int]]


def create_from(fields: dict, *, predecessor_task_id=None) -> tuple[dict, int]:
    """The create use case on a validated create body or tool arguments (projectId, source,
    inputs, sensitiveKeys) and the request's kubeconfig; 201 with the stored snapshot."""
    row = actions.create_task(
        runtime(),
        current_identity(),
        project_id=fields.get("projectId"),
        source=fields.get("source"),
        inputs=fields.get("inputs"),
        sensitive_keys=fields.get("sensitiveKeys"),
        kubeconfig=kubeconfig_from_header(),
        predecessor_task_id=predecessor_task_id,
    )
    return dto.snapshot(row), 201


def rollback_from(task_id) -> tuple[dict, int]:
    """The rollback use case on a task id and the request's kubeconfig; 201 with the new task."""
    row = rollback.rollback_task(
        runtime(), current_identity(), task_id, kubeconfig=kubeconfig_from_header()
    )
    return dto.snapshot(row), 201


def answered(call: Call) -> tuple[dict, int]:
    """(body, status) of `call`, a domain error's included (so it can be kept for replay)."""
    try:
        return call()
    except DomainError as exc:
        return error_body(exc), http_status(exc)


def answer_once(
    raw_key: str | None, method: str, path: str, fingerprinted: Callable[[], object], call: Call
) -> tuple[dict, int, bool]:
    """(body, status, replayed) of `call`, honouring an Idempotency-Key: a repeat within 24 h of
    the same request (`method`, `path`, the body `fingerprinted` returns) by the same caller gets
    the first answer again (engine/lifecycle/idempotency.py). Without a key the call just runs;
    a malformed key, or one reused or still in flight, is answered as its domain error."""
    try:
        key = idempotency.parse_key(raw_key)
        if key is None:
            return (*answered(call), False)
        identity = current_identity()
        asked = idempotency.Request(
            identity.workspace, identity.user, method, path, fingerprinted()
        )
        secret = current_app.secret_key.encode()  # shared by every process
        return idempotency.run_once(runtime().db, secret, key, asked, lambda: answered(call))
    except DomainError as exc:
        return error_body(exc), http_status(exc), False


def json_answer(body: dict, status: int, replayed: bool = False) -> Response:
    """The HTTP response of an answer; a replay says so in `Idempotent-Replayed: true`."""
    response = jsonify(body)
    response.status_code = status
    response.headers.update(retry_after(body))
    if replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response
