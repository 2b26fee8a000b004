"""The sign-in routes: /login and the issuer's callback (each mode's own, blueprints/auth/modes.py),
sign-out, the workspace picker, and who is asking (`GET /api/v1/whoami`)."""

from flask import (
    Blueprint,
    current_app,
    jsonify,
    redirect,
    render_template,
    request,
    session,
    url_for,
)

from blueprints.auth import csrf
from blueprints.auth.gate import current_identity

bp = Blueprint("auth", __name__)
csrf.protect(bp)


@bp.get("/login")
def login():
    """Start the sign-in (oidc: off to the issuer; dev: straight back)."""
    return current_app.extensions["auth"].login()


@bp.get("/auth/callback")
def callback():
    """The issuer's answer: verify it, then keep the identity in the session."""
    return current_app.extensions["auth"].callback()


@bp.post("/logout")
def logout():
    """End the sign-in everywhere (CSRF-checked, so another site cannot sign a user out)."""
    current_app.extensions["auth"].sign_out()
    session.clear()
    return redirect(url_for("auth.signed_out"), code=303)


@bp.get("/signed-out")
def signed_out():
    return render_template("signed_out.html")


@bp.post("/workspace")
def choose_workspace():
    """Switch the browser's workspace to another one its signed claims list."""
    wanted = request.form.get("workspace", "")
    if current_app.extensions["auth"].name != "oidc" or wanted not in current_identity().workspaces:
        return render_template(
            "error.html",
            code="workspace_not_allowed",
            message="That workspace is not one of yours.",
        ), 403
    session["ws"] = wanted
    return redirect(url_for("pages.index"), code=303)


@bp.get("/api/v1/whoami")
def whoami():
    """The caller's identity (the page also asks it to tell "signed out" from "offline")."""
    identity = current_identity()
    return jsonify(
        user=identity.user,
        display=identity.display,
        workspace=identity.workspace,
        workspaces=list(identity.workspaces),
    )
