"""What a setting is: its rule (doc, docs group, range), the `setting()` that declares one, and
its Definition as the environment, the boot check and docs/configuration.md see it. The settings
themselves are engine/operations/config.py's (declared in its sections, settings_*.py)."""

import types
from dataclasses import dataclass, field, fields
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parents[2]
#: Byte sizes in the settings' own words.
KIB, MIB = 1024, 1024 * 1024

#: The section of docs/configuration.md each group's table stands in, by the group's name in the
#: table's markers.
SERVER, SANDBOX, AI, CLUSTER, AUTH, OPERATING = (
    "server",
    "sandbox",
    "ai",
    "cluster",
    "auth",
    "operating",
)
GROUPS = (SERVER, SANDBOX, AI, CLUSTER, AUTH, OPERATING)

_TRUE, _FALSE = {"1", "true", "yes", "on"}, {"0", "false", "no", "off"}


class ConfigurationError(RuntimeError):
    """A setting the server cannot run with; boot stops with this one line."""


@dataclass(frozen=True)
class Rule:
    """What one setting may be, besides its type."""

    doc: str
    group: str
    at_least: float | None = None
    above: float | None = None
    at_most: float | None = None
    #: Another setting this one must stay strictly below (a cadence inside a deadline, ...).
    below: str | None = None
    #: A setting added to this one before the comparison with `below` (two waits in a row
    #: that must end inside a third).
    plus: str | None = None
    choices: tuple[str, ...] = ()
    #: The docs' words for the default when its value says too little ("half of ...").
    shown: str | None = None


def setting(default, doc: str, group: str, *, secret: bool = False, **rule):
    """A Settings field: its default, its one-line doc, its docs group and its range."""
    return field(default=default, repr=not secret, metadata={"rule": Rule(doc, group, **rule)})


@dataclass(frozen=True)
class Definition:
    """One setting as the environment, the boot check and the docs see it."""

    name: str
    type: type
    default: object
    rule: Rule
    secret: bool

    @property
    def variable(self) -> str:
        return self.name.upper()

    def parse(self, raw: str):
        """The value of an environment string; ConfigurationError saying what was expected."""
        text = raw.strip()
        try:
            if self.type is bool:
                if text.lower() not in _TRUE | _FALSE:
                    raise ValueError
                return text.lower() in _TRUE
            if self.type in (int, float):
                return self.type(text)
            if self.rule.choices:  # case-insensitive, spelled as the choices spell it
                return next((c for c in self.rule.choices if c.lower() == text.lower()), text)
            return self.type(raw)
        except ValueError:
            expected = {bool: "true or false", int: "an integer", float: "a number"}[self.type]
            raise ConfigurationError(f"{self.variable}={raw!r} is not {expected}") from None

    def allows(self, value) -> bool:
        rule = self.rule
        if rule.choices and value not in rule.choices:
            return False
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return True
        return (
            (rule.at_least is None or value >= rule.at_least)
            and (rule.above is None or value > rule.above)
            and (rule.at_most is None or value <= rule.at_most)
        )

    def allowed(self) -> str:
        """The range in the docs' words: `>= 1`, `> 0, < LEASE_TTL_S`, `dev`, `oidc`."""
        rule = self.rule
        if rule.choices:
            return ", ".join(f"`{c}`" if c else "empty" for c in rule.choices)
        if self.type is not int and self.type is not float:
            return {bool: "`true`, `false`", Path: "a path"}.get(self.type, "text")
        parts = [
            f"{sign} {_number(bound)}"
            for sign, bound in ((">=", rule.at_least), (">", rule.above), ("<=", rule.at_most))
            if bound is not None
        ]
        if rule.below:
            less = f" - `{rule.plus.upper()}`" if rule.plus else ""
            parts.append(f"< `{rule.below.upper()}`{less}")
        return ", ".join(parts)

    def default_shown(self) -> str:
        if self.rule.shown is not None:
            return self.rule.shown
        value = self.default
        if value is None:
            return "unset"
        if value == "":
            return "empty"
        if isinstance(value, bool):
            return f"`{str(value).lower()}`"
        if isinstance(value, Path):
            return f"`./{value.relative_to(PROJECT_ROOT)}`"
        return f"`{_number(value) if isinstance(value, (int, float)) else value}`"


def _number(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def shown(value) -> str:
    """A value as an error message names it."""
    return _number(value) if isinstance(value, (int, float)) else repr(value)


def _plain_type(annotation) -> type:
    """`str | None` -> str."""
    if isinstance(annotation, types.UnionType):
        return next(arg for arg in annotation.__args__ if arg is not type(None))
    return annotation


def definitions_of(settings_class) -> dict[str, Definition]:
    """Every setting of a dataclass declared with setting(), by field name, in its order."""
    found = {}
    for f in fields(settings_class):
        if f.name == "overrides":
            continue
        if "rule" not in f.metadata:  # it would never be read from the environment or checked
            raise TypeError(f"Settings.{f.name} must be declared with setting(...)")
        found[f.name] = Definition(
            f.name, _plain_type(f.type), f.default, f.metadata["rule"], secret=not f.repr
        )
    return found
