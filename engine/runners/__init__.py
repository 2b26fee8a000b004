"""Runners: one per source kind family. They use a TaskHandle and integrations, never storage."""

from engine.runners import ai, database, direct, template

#: source kind -> (runner name, run function)
RUNNERS = {
    "image": ("direct", direct.run),
    "database": ("direct", database.run),
    "template": ("template", template.run),
    "prompt": ("ai", ai.run),
    "github": ("ai", ai.run),
}


def runner_for(source_kind: str):
    """The (name, run function) for a source kind."""
    return RUNNERS[source_kind]
