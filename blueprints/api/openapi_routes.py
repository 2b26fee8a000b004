"""The API's document served: GET /api/v1/openapi.json, and /api/docs for people (Redoc,
vendored). The document itself is built in blueprints/api/openapi_document.py."""

from flask import Blueprint, current_app, jsonify, render_template_string, url_for

from blueprints.api.openapi_document import cached_document
from blueprints.auth.edge import CONTENT_SECURITY_POLICY

# The blueprint keeps the name the document's own routes are known by (openapi.openapi_json).
bp = Blueprint("openapi", __name__)

#: The site's policy plus what Redoc needs on this one page: its icon font is a data: URL. Its
#: attribution logo came from Redocly's CDN; the vendored copy shows an empty data: image instead
#: (static/vendor/README.md), so no page fetches anything from outside.
DOCS_CONTENT_SECURITY_POLICY = CONTENT_SECURITY_POLICY.replace(
    "img-src 'self' data:;", "img-src 'self' data:; font-src 'self' data:;"
)


@bp.get("/api/v1/openapi.json")
def openapi_json():
    """The OpenAPI 3.1 document."""
    return jsonify(cached_document(current_app._get_current_object()))


DOCS_PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Deployment task engine API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<link rel="icon" href="data:,">
<link rel="stylesheet" href="{{ style }}"></head>
<body><div id="api-docs" data-spec-url="{{ spec }}"></div>
<script type="module" src="{{ start }}"></script></body></html>
"""


@bp.get("/api/docs")
def docs():
    """The document rendered for people (Redoc, served from static/vendor: no CDN)."""
    page = render_template_string(
        DOCS_PAGE,
        spec=url_for("openapi.openapi_json"),
        start=url_for("static", filename="api-docs.js"),
        style=url_for("static", filename="api-docs.css"),
    )
    return page, 200, {"Content-Security-Policy": DOCS_CONTENT_SECURITY_POLICY}
