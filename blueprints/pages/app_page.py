"""The app page: one app's current resources, endpoints and deployment history, with "Roll back
to this" on its completed deployments (issue 28). Server-rendered; the rollback is a plain
CSRF-checked form that htmx also posts (so the page's kubeconfig header travels with it)."""

from flask import Blueprint, Response, redirect, render_template, request, url_for

from blueprints.auth import csrf
from blueprints.auth.gate import current_identity
from blueprints.pages.task_views import page_error, valid_project
from blueprints.request_helpers import kubeconfig_from_header, requested_app_page, runtime
from engine.errors import AppDeployAlreadyActive, DomainError
from engine.lifecycle import actions, rollback
from engine.readside import dto

bp = Blueprint("app_pages", __name__)
csrf.protect(bp)
# Domain errors render as the pages' small HTML message with their status.
bp.register_error_handler(DomainError, page_error)


@bp.get("/projects/<project_id>/apps/<app_key>")
def app(project_id, app_key):
    """The app page; ?cursor= pages to older deployments."""
    valid_project(project_id)
    shown = requested_app_page(current_identity().workspace, project_id, app_key)
    return render_template(
        "app.html",
        project_id=project_id,
        app=shown,
        history=shown["history"]["items"],
        older=shown["history"]["nextCursor"],
    )


@bp.post("/tasks/<uuid:task_id>/rollback")
def rollback_to(task_id):
    """ "Roll back to this": start the rollback, then open its timeline on the project page. With
    a deployment of the app already active, open that one instead (no error page: the user sees
    what is running)."""
    try:
        row = rollback.rollback_task(
            runtime(), current_identity(), task_id, kubeconfig=kubeconfig_from_header()
        )
        opened = dto.snapshot(row)
    except AppDeployAlreadyActive as exc:
        # The app's active deployment; when it has just ended, the task asked to roll back to.
        opened = exc.snapshot or dto.snapshot(
            actions.get_task(runtime(), current_identity(), task_id)
        )
    return _go(url_for("pages.project", project_id=opened["projectId"], task=opened["id"]))


def _go(location: str) -> Response:
    """A redirect a plain form follows (303) and htmx follows too (HX-Redirect)."""
    if request.headers.get("HX-Request"):
        return Response(status=204, headers={"HX-Redirect": location})
    return redirect(location, code=303)
