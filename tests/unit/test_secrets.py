"""The one sensitivity predicate, split and scrub."""
import base64
import json

import pytest

from engine import secrets


@pytest.mark.parametrize("name", ["password", "DB_PASSWORD", "api_key", "API-KEY", "token",
                                  "GITHUB_TOKEN", "client_secret", "private_key", "credentials",
                                  "session_key", "DATABASE_DSN"])
def test_secret_looking_names_are_sensitive(name):
    assert secrets.is_sensitive(name)


@pytest.mark.parametrize("name", ["replicas", "image", "LOG_LEVEL", "port", "name", "region"])
def test_ordinary_names_are_not(name):
    assert not secrets.is_sensitive(name)


def test_declared_names_and_secret_types_are_sensitive():
    assert secrets.is_sensitive("region", declared={"region"})
    assert secrets.is_sensitive("region", input_type="password")


def test_split_separates_plain_from_sensitive():
    plain, sensitive = secrets.split({"LOG_LEVEL": "debug", "API_TOKEN": "t", "x": "y"},
                                     declared={"x"})
    assert plain == {"LOG_LEVEL": "debug"} and sensitive == {"API_TOKEN": "t", "x": "y"}


def test_scrub_replaces_raw_json_escaped_and_base64_forms_everywhere():
    value = 'p@ss"word\\1'
    b64 = base64.b64encode(value.encode()).decode()
    doc = {"a": f"x {value} y", "b": [json.dumps({"k": value})], "c": {"d": b64},
           "e": b64.rstrip("="), "n": 5}
    out = secrets.scrub(doc, [value])
    assert value not in json.dumps(out) and json.dumps(value)[1:-1] not in json.dumps(out)
    assert b64.rstrip("=") not in json.dumps(out)
    assert out["n"] == 5 and out["a"] == "x [redacted] y"


def test_scrub_leaves_very_short_values_alone_rather_than_mangling_text():
    assert secrets.scrub({"a": "abc def"}, ["abc"]) == {"a": "abc def"}
