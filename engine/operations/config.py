"""Every setting, defined once: its name, type, default, allowed range and one-line doc.

Each `Settings` field is read from the environment variable of its name in upper case
(`lease_ttl_s` from LEASE_TTL_S), checked against its range at boot, and listed in
docs/configuration.md's settings tables, which are generated from these definitions (`python -m
engine.operations.settings_readme` rewrites them; tests/unit/test_config.py keeps them equal). What
a setting is (its rule, `setting()`, its Definition) is setting_rules.py's.

The settings are declared in sections, one class each, which `Settings` joins: the server's
(settings_server.py), where deployments go (settings_targets.py), and authentication and
operating (settings_operating.py). Adding a setting is one statement in its section, e.g.

    stream_keepalive_s: float = setting(15.0, "a stream's comment line cadence", SERVER, above=0)

then run the command above to put its row into docs/configuration.md. A field declared without
setting() stops the import: it would never be read from the environment or checked.
"""

import os
from dataclasses import dataclass, field, replace

from engine.integrations.kube.diagnosis import CAUSES
from engine.operations.setting_rules import ConfigurationError, Definition, definitions_of, shown
from engine.operations.settings_operating import OperatingSettings
from engine.operations.settings_server import ServerSettings
from engine.operations.settings_targets import TargetSettings


@dataclass(frozen=True)
class Settings(OperatingSettings, TargetSettings, ServerSettings):
    """The server's settings (see the module docstring for how they are read and checked). A
    dataclass takes its bases' fields from the last base to the first: the server's come first,
    as docs/configuration.md lists them."""

    #: Extra objects (fakes for tests) by name; never from the environment.
    overrides: dict = field(default_factory=dict, compare=False)

    @property
    def fail_fast_causes(self) -> frozenset[str]:
        """READINESS_FAIL_FAST as a set; ValueError naming a code that is not a cause."""
        causes = frozenset(c.strip() for c in self.readiness_fail_fast.split(",") if c.strip())
        unknown = sorted(causes - set(CAUSES))
        if unknown:
            raise ValueError(
                f"READINESS_FAIL_FAST: {', '.join(unknown)} not among {', '.join(CAUSES)}"
            )
        return causes

    @classmethod
    def from_env(cls, **overrides) -> "Settings":
        """Settings from the environment, checked (ConfigurationError naming every bad
        variable), then explicit overrides (tests; not checked, so a test may switch a loop off
        with an interval no operator should use)."""
        values, problems = {}, []
        for name in DEFINITIONS:
            try:
                values[name] = read(name)
            except ConfigurationError as exc:
                problems.append(str(exc))
        if not problems:
            problems = cls(**values).problems()
        if problems:
            raise ConfigurationError("; ".join(problems))
        return replace(cls(**values), **overrides)

    def problems(self) -> list[str]:
        """What is out of range, one sentence per variable naming the range."""
        found = []
        for name, definition in DEFINITIONS.items():
            value, rule = getattr(self, name), definition.rule
            plus = getattr(self, rule.plus) if rule.plus is not None else 0
            if not definition.allows(value) or (
                rule.below is not None and not value + plus < getattr(self, rule.below)
            ):
                found.append(
                    f"{definition.variable}={shown(value)} is out of range "
                    f"(allowed: {definition.allowed()})"
                )
        try:
            _ = self.fail_fast_causes
        except ValueError as exc:
            found.append(str(exc))
        return found


#: Every setting by field name, in the order Settings declares them.
DEFINITIONS: dict[str, Definition] = definitions_of(Settings)


def read(name: str, environ=None):
    """One setting's value from the environment (its default when unset or empty), checked on
    its own (Settings.problems() adds the checks between settings); ConfigurationError."""
    definition = DEFINITIONS[name]
    raw = (os.environ if environ is None else environ).get(definition.variable)
    if raw is None or raw == "":
        return definition.default
    value = definition.parse(raw)
    if not definition.allows(value):
        raise ConfigurationError(
            f"{definition.variable}={shown(value)} is out of range "
            f"(allowed: {definition.allowed()})"
        )
    return value
