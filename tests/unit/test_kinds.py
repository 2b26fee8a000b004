"""The source kinds' registry (engine/runners/kinds.py) is the one definition every surface
reads: the API's schemas, the chat tools' JSON Schema, the deploy panes, the runner lookup and
the timeline's step count."""

import jsonschema
import pytest
from marshmallow import ValidationError

from blueprints import forms, presentation
from blueprints.jsonschema import field_schema
from blueprints.schemas import SourceField
from engine.runners import ai, database, direct, runner_for, template
from engine.runners.kinds import KINDS


def test_the_api_and_the_tools_accept_exactly_the_registrys_kinds():
    with pytest.raises(ValidationError) as refused:
        SourceField().deserialize({"kind": "ftp"})
    assert refused.value.messages == [f"kind must be one of: {', '.join(sorted(KINDS))}"]
    described = field_schema(SourceField())["oneOf"]
    assert [s["properties"]["kind"]["const"] for s in described] == sorted(KINDS)


@pytest.mark.parametrize("name", list(KINDS))
def test_each_kind_has_its_schema_runner_pane_and_words(name):
    kind = KINDS[name]
    with pytest.raises(ValidationError) as refused:
        kind.schema().load({"kind": name, "unknown": 1})
    assert "unknown" in refused.value.messages  # its own schema, which knows its kind
    assert runner_for(name) == (kind.runner, kind.run)
    assert kind.fields_from_catalog or [s.name for s in forms.schema_fields(name)]
    assert kind.title and isinstance(kind.summary({}), str) and kind.describe({})


def test_the_step_count_a_timeline_shows_is_the_one_its_runner_declares():
    declared = {
        "template": template.STEPS,
        "image": direct.STEPS,
        "database": database.STEPS,
        "github": ai.GITHUB_STEPS,
        "prompt": ai.PROMPT_STEPS,
    }
    assert set(declared) == set(KINDS)
    assert {k: presentation.expected_steps(k) for k in KINDS} == {
        k: len(steps) for k, steps in declared.items()
    }
    assert presentation.expected_steps("ftp") == 0


@pytest.mark.parametrize(
    "value, accepted",
    [
        (2**53 - 1, True),
        (-(2**53 - 1), True),
        (2**53, False),
        (86128158778557709942784, False),
        (551973451.0, True),  # an integer to JSON Schema
        (1.5, False),
        ("x" * 32_768, True),
        ("x" * 32_769, False),
        (None, False),
    ],
)
def test_a_template_argument_is_accepted_exactly_where_the_document_says(value, accepted):
    """The bounds the documents state for a template argument are the server's own."""
    documented = field_schema(SourceField())["oneOf"][sorted(KINDS).index("template")]
    body = {"kind": "template", "template": "web", "args": {"a": value}}
    try:
        jsonschema.validate(body, documented)
        valid = True
    except jsonschema.ValidationError:
        valid = False
    try:
        KINDS["template"].schema().load(body)
        loaded = True
    except ValidationError:
        loaded = False
    assert (valid, loaded) == (accepted, accepted)
