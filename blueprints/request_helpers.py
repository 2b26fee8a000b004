"""Request helpers every blueprint shares: the engine runtime, validated bodies, the kubeconfig
header."""

import base64
import binascii

from flask import current_app, request
from marshmallow import ValidationError

from blueprints import schemas
from blueprints.errors import KubeconfigRequired, MalformedBody, UnsupportedMediaType
from engine.errors import AppNotFound, InvalidRequest
from engine.integrations.base import IntegrationError
from engine.lifecycle import kubeconfigs
from engine.process import EngineRuntime
from engine.readside import apps
from engine.trust.untrusted import MalformedJson, load_json, load_yaml


def runtime() -> EngineRuntime:
    """This process's engine runtime."""
    return current_app.extensions["engine"]


def load(schema: type, data) -> dict:
    """Validate `data` with `schema`; InvalidRequest naming every bad field."""
    try:
        return schema.shared().load(data)
    except ValidationError as exc:
        raise InvalidRequest("the request has invalid fields", fields=exc.messages)


def requested_app_page(workspace: str, project_id: str, app_key: str) -> dict:
    """The app with the page of its history the request's ?cursor=&limit= ask for (the JSON
    API's and the app page's one read). AppNotFound for a key no app can have (not an app key's
    shape), InvalidRequest for a bad query."""
    try:
        schemas.APP_KEY(app_key)
    except ValidationError:
        raise AppNotFound() from None
    args = load(schemas.AppHistory, request.args.to_dict())
    return apps.read_app_page(
        runtime().db,
        workspace,
        project_id,
        app_key,
        cursor=args.get("cursor"),
        limit=args["limit"],
    )


def json_body() -> dict:
    """The request's JSON object, read by the one depth-limited loader.

    UnsupportedMediaType when it is not sent as JSON, MalformedBody when it does not parse (or
    nests too deep), InvalidRequest when it is not an object. Its size was checked before any
    route ran (blueprints/auth/edge.py read_body_within_limit).
    """
    if not request.is_json:
        raise UnsupportedMediaType()
    data = request.get_data(cache=True)
    try:
        body = load_json(data)
    except MalformedJson as exc:
        raise MalformedBody(f"the body is not valid JSON: {exc}")
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object")
    return body


def kubeconfig_from_header() -> dict | None:
    """The X-Kubeconfig header (base64 YAML), parsed in memory only.

    Where the app deploys to real clusters (engine/lifecycle/kubeconfigs.py), a missing header is
    KubeconfigRequired and an unusable kubeconfig InvalidRequest: refused before any task exists
    rather than as a run that can only fail.
    """
    raw = request.headers.get("X-Kubeconfig")
    if not raw:
        if kubeconfigs.required(runtime()):
            raise KubeconfigRequired()
        return None
    try:
        parsed = load_yaml(base64.b64decode(raw, validate=True))
    except (binascii.Error, ValueError, UnicodeError):
        raise InvalidRequest("X-Kubeconfig must be a base64-encoded kubeconfig")
    if not isinstance(parsed, dict):
        raise InvalidRequest("X-Kubeconfig must be a base64-encoded kubeconfig")
    try:
        kubeconfigs.check(runtime(), parsed)
    except IntegrationError as exc:
        raise InvalidRequest(f"X-Kubeconfig: {exc}")
    return parsed
