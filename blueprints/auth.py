"""Identity for a request. `dev` mode: one local user in namespace "default".

Client-supplied identity headers are never read: identity comes only from the auth mode.
"""
from flask import current_app, g

from engine.identity import Identity

AUTH_MODES = {"dev"}
DEV_IDENTITY = Identity(user="dev", namespace="default")


def current_identity() -> Identity:
    """The caller's identity, from the configured auth mode alone."""
    if "identity" not in g:
        mode = current_app.extensions["engine"].settings.auth_mode
        if mode == "dev":
            g.identity = DEV_IDENTITY
        else:  # create_app refuses unknown modes; this guards a misconfigured test app
            raise RuntimeError(f"unknown auth mode {mode}")
    return g.identity
