"""The source kinds' registry (engine/runners/kinds.py) is the one definition every surface
reads: the API's schemas, the chat tools' JSON Schema, the deploy panes, the runner lookup and
the timeline's step count."""

import gevent
import jsonschema
import pytest
from marshmallow import ValidationError

from blueprints.api.tool_schemas import field_schema
from blueprints.pages import forms, presentation
from blueprints.schemas import CreateTask, SourceField
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


def test_one_shared_schema_serves_every_load_and_keeps_no_state_between_them():
    """Requests share one schema instance (RequestSchema.shared): a refused load leaves nothing
    behind for the next, and loads interleaved in greenlets each see only their own fields."""
    shared = CreateTask.shared()
    assert CreateTask.shared() is shared
    good = {"projectId": "demo", "source": {"kind": "image", "image": "nginx", "name": "web"}}
    with pytest.raises(ValidationError) as refused:
        shared.load({"projectId": "Not A Name", "source": {"kind": "ftp"}, "extra": 1})
    assert set(refused.value.messages) == {"projectId", "source", "extra"}
    assert shared.load(good)["projectId"] == "demo"

    def load(i):
        body = {**good, "projectId": f"p{i}"}
        if i % 2:
            body["source"] = {"kind": "ftp"}
        try:
            return shared.load(body)["projectId"]
        except ValidationError as exc:
            return sorted(exc.messages)

    results = [g.value for g in gevent.joinall([gevent.spawn(load, i) for i in range(20)])]
    assert results == [f"p{i}" if i % 2 == 0 else ["source"] for i in range(20)]
