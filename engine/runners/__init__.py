"""Runners: one per source kind family. They use a TaskHandle and integrations, never storage."""
from engine.runners import direct

#: source kind -> (runner name, run function)
RUNNERS = {
    "image": ("direct", direct.run),
}


def runner_for(source_kind: str):
    """The (name, run function) for a source kind."""
    return RUNNERS[source_kind]
