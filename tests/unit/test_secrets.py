"""The one sensitivity predicate, split and scrub."""

import base64
import json
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.trust import secrets


@pytest.mark.parametrize(
    "name",
    [
        "password",
        "DB_PASSWORD",
        "api_key",
        "API-KEY",
        "token",
        "GITHUB_TOKEN",
        "client_secret",
        "private_key",
        "credentials",
        "session_key",
        "DATABASE_DSN",
    ],
)
def test_secret_looking_names_are_sensitive(name):
    assert secrets.is_sensitive(name)


@pytest.mark.parametrize("name", ["replicas", "image", "LOG_LEVEL", "port", "name", "region"])
def test_ordinary_names_are_not(name):
    assert not secrets.is_sensitive(name)


def test_declared_names_and_secret_types_are_sensitive():
    assert secrets.is_sensitive("region", declared={"region"})
    assert secrets.is_sensitive("region", input_type="password")


def test_split_separates_plain_from_sensitive():
    plain, sensitive = secrets.split(
        {"LOG_LEVEL": "debug", "API_TOKEN": "t", "x": "y"}, declared={"x"}
    )
    assert plain == {"LOG_LEVEL": "debug"} and sensitive == {"API_TOKEN": "t", "x": "y"}


def test_scrub_replaces_raw_json_escaped_and_base64_forms_everywhere():
    value = 'p@ss"word\\1'
    b64 = base64.b64encode(value.encode()).decode()
    doc = {
        "a": f"x {value} y",
        "b": [json.dumps({"k": value})],
        "c": {"d": b64},
        "e": b64.rstrip("="),
        "n": 5,
    }
    out = secrets.scrub(doc, [value])
    assert value not in json.dumps(out) and json.dumps(value)[1:-1] not in json.dumps(out)
    assert b64.rstrip("=") not in json.dumps(out)
    assert out["n"] == 5 and out["a"] == "x [redacted] y"


def test_scrub_leaves_very_short_values_alone_rather_than_mangling_text():
    assert secrets.scrub({"a": "abc def"}, ["abc"]) == {"a": "abc def"}


def test_a_text_cut_inside_a_secret_loses_the_cut_piece_at_its_end():
    secret = "CANARY-straddle-0123456789"
    head = "failed: " + secret[:9]  # cut after 9 characters
    bounded = "failed: " + secret[:12] + "..."  # cut by a bound that marks the cut

    assert secrets.scrub(head, [secret]) == "failed: [redacted]"
    assert secrets.scrub(bounded, [secret]) == "failed: [redacted]..."
    assert secrets.scrub("failed: CAN", [secret]) == "failed: CAN"  # under 4 characters: kept
    assert secrets.scrub("an ordinary message", [secret]) == "an ordinary message"
    # A piece of streamed text that merely starts like a secret's end is left alone.
    assert secrets.scrub("6789 manifests", [secret]) == "6789 manifests"


def test_the_servers_own_credentials_are_scrubbed_from_messages_and_log_records(caplog):
    import logging

    key = "server-key-for-a-unit-test-1f2e3d"
    logger = logging.getLogger("side-door-test")
    secrets.install_log_scrubber()
    logger.warning("before registering: %s", key)  # positive control: not yet a known secret
    secrets.register_server_secret(key)

    logger.warning("calling the gateway with %s", key)
    try:
        raise RuntimeError(f"401 for key {key}")
    except RuntimeError:
        logger.exception("the call failed")

    assert key in caplog.records[0].getMessage()
    assert caplog.records[1].getMessage() == "calling the gateway with [redacted]"
    assert key not in caplog.records[2].exc_text and "[redacted]" in caplog.records[2].exc_text
    assert secrets.scrub({"message": f"echo {key}"}, []) == {"message": "echo [redacted]"}


def test_a_failing_call_under_an_abort_signal_prints_no_greenlet_traceback(capfd):
    import gevent
    import pytest

    from engine.abort import AbortSignal

    def upstream_call():
        raise ValueError("upstream said: internal-console-text")

    gevent.spawn(upstream_call).join()  # positive control: gevent's hub prints this one
    printed = capfd.readouterr().err
    with pytest.raises(ValueError, match="internal-console-text"):
        AbortSignal().run(upstream_call)
    gevent.sleep(0)

    assert "internal-console-text" in printed
    assert "internal-console-text" not in capfd.readouterr().err


def test_a_short_word_that_begins_like_a_secret_is_ordinary_text():
    from engine.trust.secrets import scrub

    key = "devbox-signing-key-0123456789abcdef"
    assert scrub("devbox", [key]) == "devbox"  # a step's name, not a cut secret
    assert scrub("step devbox-sign", [key]) == "step [redacted]"  # a longer cut piece: redacted
    assert scrub("cut at devb...", [key]) == "cut at [redacted]..."  # a marked cut: as before


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_one_search_for_a_needles_start_skips_only_texts_the_exact_checks_leave_alone(data):
    """Needles.starts lets a text with no needle's start through untouched; the exact checks (a
    pattern matching every text forces them) must agree on every text, cut pieces included."""
    secret = data.draw(st.text(min_size=8, max_size=16), label="secret")
    pieces = st.sampled_from([secret, secret[:4], secret[:5], secret[1:], "...", " ", "ab"])
    text = "".join(data.draw(st.lists(pieces, max_size=6), label="pieces"))
    needles = secrets._needles([secret])
    exact = secrets.Needles(set(needles))
    exact.starts = re.compile("")
    assert secrets._scrub(text, needles) == secrets._scrub(text, exact)
    # The control: had the search looked for longer starts, a 4-character cut piece before
    # "..." would slip through.
    if text == secret[:4] + "...":
        assert secrets._scrub(text, needles) == secrets.REDACTED + "..."


def test_a_cut_piece_as_short_as_the_shortest_start_is_still_found():
    secret = "s3cr3t-value-123"
    assert secrets.scrub(f"see {secret[:4]}...", [secret]) == f"see {secrets.REDACTED}..."


def _stream_reference(needles, pieces):
    """The stream scrubber's rule, character by character (as it was written first): the oracle
    the skipping one must agree with."""
    out, pending = [], ""
    for piece in pieces:
        text, i = pending + piece, 0
        while i < len(text):
            rest = len(text) - i
            if any(len(n) > rest and n.startswith(text[i:]) for n in needles):
                break
            match = next((n for n in needles if text.startswith(n, i)), None)
            out.append(secrets.REDACTED if match else text[i])
            i += len(match) if match else 1
        pending = text[i:]
    return "".join(out) + (secrets._scrub(pending, needles) if pending else "")


@settings(max_examples=300, deadline=None)
@given(st.data())
def test_the_stream_scrubber_skips_plain_text_and_still_agrees_with_the_per_character_rule(data):
    values = data.draw(st.lists(st.text(min_size=8, max_size=12), min_size=1, max_size=3))
    words = [v[:k] for v in values for k in (3, 4, 6, len(v))] + ["ab", " ", "...", "\n"]
    text = "".join(data.draw(st.lists(st.sampled_from(words), max_size=12)))
    cuts = sorted(data.draw(st.lists(st.integers(0, len(text)), max_size=4)))
    pieces = [text[a:b] for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    scrubber = secrets.StreamScrubber(values)
    streamed = "".join(scrubber.feed(p) for p in pieces) + scrubber.flush()
    assert streamed == _stream_reference(secrets._needles(values), pieces)
