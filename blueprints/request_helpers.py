"""Request helpers every blueprint shares: the engine runtime, validated bodies, the kubeconfig
header."""
import base64
import binascii

import yaml
from flask import current_app, request
from marshmallow import ValidationError

from engine.errors import InvalidRequest, KubeconfigRequired
from engine.integrations.base import IntegrationError
from engine.runtime import EngineRuntime


def runtime() -> EngineRuntime:
    """This process's engine runtime."""
    return current_app.extensions["engine"]


def load(schema: type, data) -> dict:
    """Validate `data` with `schema`; InvalidRequest naming every bad field."""
    try:
        return schema().load(data)
    except ValidationError as exc:
        raise InvalidRequest("the request has invalid fields", fields=exc.messages)


def json_body() -> dict:
    """The request's JSON object; InvalidRequest when it is missing or not an object."""
    body = request.get_json(silent=True)
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def kubeconfig_from_header() -> dict | None:
    """The X-Kubeconfig header (base64 YAML), parsed in memory only.

    Where the app deploys to real clusters (config KUBECONFIG_CHECK, set by create_app), a
    missing header is KubeconfigRequired and an unusable kubeconfig InvalidRequest: refused
    before any task exists rather than as a run that can only fail.
    """
    check = current_app.config.get("KUBECONFIG_CHECK")
    raw = request.headers.get("X-Kubeconfig")
    if not raw:
        if check is not None:
            raise KubeconfigRequired()
        return None
    try:
        parsed = yaml.safe_load(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError, yaml.YAMLError):
        raise InvalidRequest("X-Kubeconfig must be a base64-encoded kubeconfig")
    if not isinstance(parsed, dict):
        raise InvalidRequest("X-Kubeconfig must be a base64-encoded kubeconfig")
    if check is not None:
        try:
            check(parsed)
        except IntegrationError as exc:
            raise InvalidRequest(f"X-Kubeconfig: {exc}")
    return parsed
