"""Who is asking: the one seam between authentication and the engine."""
from dataclasses import dataclass


@dataclass(frozen=True)
class Identity:
    user: str
    #: The tenant (workspace). Every query is scoped by it; another namespace's task is a 404.
    namespace: str
