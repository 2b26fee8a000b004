"""The JSON depth check every upstream answer and request body goes through: the same verdict as a
plain character-by-character reading, in memory that does not grow with a string's length."""

import time
import tracemalloc

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.trust.untrusted import MalformedJson, json_depth_exceeds, load_json

MIB = 1024 * 1024


def deepest(text: str) -> int:
    """The reference: the deepest bracket nesting outside strings, one character at a time."""
    depth = deepest = 0
    in_string = escaped = False
    for c in text:
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif c in "]}":
            depth -= 1
    return deepest


TOKENS = st.sampled_from(["[", "]", "{", "}", ",", ":", "1", '"a"', '"[{"', '"\\"["', '"\\\\"'])


@given(st.lists(TOKENS, max_size=300).map("".join), st.integers(0, 8))
def test_the_verdict_is_the_character_by_character_one(text, max_depth):
    assert json_depth_exceeds(text, max_depth) == (deepest(text) > max_depth)


def test_a_huge_string_costs_no_memory_per_character():
    # The alternation `(?:[^"\\]|\\.)*` kept ~100-150 bytes per character of a string: 16 MiB of
    # one string grew a worker by gigabytes.
    text = "[" * 60 + '{"a": "' + "v" * (16 * MIB) + '\\"' + '"}' + "]" * 60
    tracemalloc.start()
    try:
        started = time.monotonic()
        assert json_depth_exceeds(text) is False
        elapsed = time.monotonic() - started
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < MIB  # what is left once the string is cut out: the brackets
    assert elapsed < 1.0  # linear (~20 ms here)


def test_an_unclosed_string_is_read_once():
    # Every quote of `"\"\"\"...` would start a scan to the end again: quadratic. Never closed,
    # the string runs to the end, brackets included.
    text = '"' + '\\"' * (4 * MIB) + "[" * 100
    started = time.monotonic()
    with pytest.raises(MalformedJson, match="not valid JSON"):
        load_json(text)
    assert time.monotonic() - started < 1.0
