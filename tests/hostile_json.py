"""Hypothesis strategies for upstream answers of any shape: every JSON value, and a valid answer
with one field (or several) replaced by a value of any type.

Bounded (few leaves, short text) and derandomized through HOSTILE_SETTINGS, so a property costs a
known, small time; the mutations reach the fields a parser reads, where random JSON rarely does.
"""

import copy

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

HOSTILE_SETTINGS = dict(
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.data_too_large,
    ],
)

TEXT = st.one_of(
    st.sampled_from(["", "x", "None", "True", "0", "\x00", "\ud800", "a/b", "é\u202e"]),
    st.text(max_size=8),
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),  # NaN and the infinities too: `json` reads them
    TEXT,
)
JSON = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def examples(count: int):
    """Hypothesis settings for a property of `count` examples."""
    return settings(max_examples=count, **HOSTILE_SETTINGS)


def paths(value, path: tuple = ()) -> list[tuple]:
    """Every place inside a JSON value: its keys and indexes, the value itself first."""
    found = [path]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, path + (key,))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += paths(item, path + (index,))
    return found


def replaced(value, path: tuple, new):
    """A copy of `value` with what is at `path` replaced by `new` (the whole when path is ())."""
    if not path:
        return new
    value = copy.deepcopy(value)
    parent = value
    for part in path[:-1]:
        parent = parent[part]
    parent[path[-1]] = new
    return value


def mutations(valid, times: int = 2):
    """`valid` with up to `times` of its places replaced by any JSON value."""

    @st.composite
    def mutate(draw):
        value = valid
        for _ in range(draw(st.integers(1, times))):
            value = replaced(value, draw(st.sampled_from(paths(value))), draw(JSON))
        return value

    return mutate()


def hostile(valid):
    """Answers for a parser that reads `valid`: itself (the control), mutations of it (most
    examples), and any JSON value at all."""
    return st.one_of(st.just(valid), mutations(valid), mutations(valid), mutations(valid), JSON)
