"""Errors to HTTP, in one place: the errors only the web edge raises (the request's transport:
its Host, Origin, media type, body and headers), the status of every domain error, and the JSON
bodies of errors under /api. The engine raises domain errors and never speaks HTTP."""

from flask import jsonify
from werkzeug.exceptions import HTTPException

from engine import errors
from engine.errors import DomainError
from engine.lifecycle import operator as operations


class UnknownTool(DomainError):
    """No tool has that name."""

    code = "unknown_tool"


class UntrustedHost(DomainError):
    """This server does not answer to that Host (TRUSTED_HOSTS)."""

    code = "untrusted_host"


class CrossSiteRequest(DomainError):
    """Cross-site requests may not change anything here."""

    code = "cross_site_request"


class UnsupportedMediaType(DomainError):
    """Send the body as JSON (Content-Type: application/json)."""

    code = "unsupported_media_type"


class MalformedBody(DomainError):
    """The body is not valid JSON."""

    code = "malformed_json"


class UnreadableBody(DomainError):
    """The body could not be read: its chunked framing is broken."""

    code = "unreadable_body"


class KubeconfigRequired(DomainError):
    """This server deploys to real clusters: send your kubeconfig (base64) in X-Kubeconfig."""

    code = "kubeconfig_required"


#: The HTTP status of each domain error; a subclass not listed takes its nearest listed base's.
HTTP_STATUS: dict[type[DomainError], int] = {
    DomainError: 400,
    errors.InvalidRequest: 400,
    MalformedBody: 400,
    UnreadableBody: 400,
    UntrustedHost: 400,
    KubeconfigRequired: 400,
    errors.TaskNotFound: 404,
    errors.PredecessorNotFound: 404,
    errors.UnknownTemplate: 404,
    errors.AppNotFound: 404,
    UnknownTool: 404,
    operations.CleanupJobNotFound: 404,
    errors.OperatorOnly: 403,
    CrossSiteRequest: 403,
    errors.IllegalTransition: 409,
    errors.TaskConflict: 409,
    errors.PredecessorNotRedeployable: 409,
    errors.RedeployAlreadyActive: 409,
    errors.TaskAlreadyFinished: 409,
    errors.TaskNotBlocked: 409,
    errors.NotRollbackable: 409,
    errors.AppDeployAlreadyActive: 409,
    errors.IdempotencyKeyInFlight: 409,
    operations.CleanupJobNotRetryable: 409,
    errors.IdempotencyKeyReused: 422,
    UnsupportedMediaType: 415,
    errors.ShuttingDown: 503,
    errors.DatabaseUnavailable: 503,
    errors.Overloaded: 503,
}

#: What every 503 tells a client: when to come back (a blip, a failover or a drain is over in
#: seconds; another server may answer at once).
RETRY_AFTER_S = 2
#: Codes that say sooner: an overloaded process has a run ending every few milliseconds.
RETRY_AFTER_BY_CODE = {errors.Overloaded.code: errors.Overloaded.retry_after_s}

#: Stable JSON codes of the plain HTTP errors an /api client can meet.
HTTP_ERROR_CODES = {
    404: "not_found",
    405: "method_not_allowed",
    413: "body_too_large",
    415: "unsupported_media_type",
}


def http_status(exc: DomainError) -> int:
    """The HTTP status `exc` answers with."""
    return next(HTTP_STATUS[cls] for cls in type(exc).__mro__ if cls in HTTP_STATUS)


def error_body(exc: DomainError) -> dict:
    """{code, message, fields?, snapshot?}: the API's one error body."""
    body = {"code": exc.code, "message": exc.message}
    if isinstance(exc, errors.TaskConflict) and exc.snapshot is not None:
        body["snapshot"] = exc.snapshot
    if isinstance(exc, errors.InvalidRequest) and exc.fields:
        body["fields"] = exc.fields
    return body


def retry_after(body: dict) -> dict:
    """The Retry-After header of an error body that has one ({} otherwise)."""
    seconds = RETRY_AFTER_BY_CODE.get(body.get("code")) if isinstance(body, dict) else None
    return {} if seconds is None else {"Retry-After": str(seconds)}


def domain_error(exc: DomainError):
    """Every domain error as JSON with its stable code (registered app-wide)."""
    body = error_body(exc)
    return jsonify(body), http_status(exc), retry_after(body)


def http_error(exc: HTTPException):
    """Every other HTTP error under /api as JSON with a stable code, keeping Werkzeug's headers
    (a 405's `Allow`, RFC 9110 15.5.6) but not its text/html content type."""
    response = jsonify(
        {"code": HTTP_ERROR_CODES.get(exc.code, "http_error"), "message": exc.description}
    )
    response.status_code = exc.code
    for name, value in exc.get_headers():
        if name.lower() != "content-type":
            response.headers[name] = value
    return response


def retry_later(response):
    """Every 503 says when to try again (Retry-After), whichever path answered it."""
    if response.status_code == 503:
        response.headers.setdefault("Retry-After", str(RETRY_AFTER_S))
    return response
