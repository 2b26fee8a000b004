"""Who is asking: the one seam between authentication and the engine."""

from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    user: str
    #: The tenant (workspace). Every query is scoped by it; another workspace's task is a 404.
    workspace: str
    #: How the UI names the user (preferred_username or email when the issuer gives one).
    display: str = ""
    #: Every workspace the signed claims let this user choose from (`workspace` is one of them).
    workspaces: tuple[str, ...] = ()
