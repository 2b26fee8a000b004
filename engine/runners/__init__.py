"""Runners: one per source kind family. They use a TaskHandle and integrations, never storage.
Which runner runs which kind is engine/runners/kinds.py."""

from engine.runners.kinds import KINDS


def runner_for(source_kind: str):
    """The (name, run function) for a source kind."""
    kind = KINDS[source_kind]
    return kind.runner, kind.run
