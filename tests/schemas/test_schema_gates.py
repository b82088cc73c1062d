"""The codec's schema gates (``rust_codec/src/python/schema_data.rs``, through
``py_wire/_schema/text.py``): Python data and source text are refused there, naming the key's
path and what was found, before the schema model or a parser reads them. Python repeats none of
these checks; each case here read the same before the checks moved from Python to the codec."""

from __future__ import annotations

from typing import Any

import pytest

import py_wire
from py_wire import FieldDef, Schema, SchemaError

BASE: dict[str, Any] = {
    "name": "gates",
    "sequence_field": "input_ids",
    "fields": {"input_ids": {"tier": "per_token", "dtype": "int64"}},
}


def _with_field(decl: Any) -> dict[str, Any]:
    return {**BASE, "fields": {**BASE["fields"], "x": decl}}


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**BASE, "fields": {1: {"tier": "scalar"}}}, "fields: keys are strings, not int 1"),
        (_with_field({"tier": "scalar", "dtype": "int64", "shape": {1, 2}}), "fields.x.shape: "),
        (_with_field({"tier": "scalar", "dtype": "int64", "shape": {1, 2}}), "not set"),
        (_with_field({"tier": "scalar", "dtype": "int64", "pad_value": 2**300}), "301 bits"),
        (_with_field({"tier": "scalar", "dtype": "int64", "stages": ["a"] * 4097}), "4097 items"),
        (
            {
                **BASE,
                "description": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],
            },
            "nested deeper than 32",
        ),
        ({**BASE, "fields": {str(i): None for i in range(4097)}}, "4097 entries"),
        (range(2**62), "the schema: must be a table"),
    ],
    ids=["int-key", "set-path", "set-type", "huge-int", "wide-list", "deep", "wide-table", "range"],
)
def test_python_data_is_refused_naming_the_key(data: Any, message: str) -> None:
    with pytest.raises(SchemaError, match=r"^<dict>: ") as e:
        Schema.from_dict(data)
    assert message in str(e.value)


def test_plain_python_data_reads_as_its_json() -> None:
    field = FieldDef(tier="scalar", dtype="int64")
    data = {
        **BASE,
        "description": "caf\xe9 \U0001f600",
        "stages": ("train",),  # a tuple is a list
        "fields": {**BASE["fields"], "x": field},  # a view is read as its dump
    }
    schema = Schema.from_dict(data)
    assert schema.description == "caf\xe9 \U0001f600"
    assert schema.stages == ("train",)
    assert schema.fields["x"] == field
    assert Schema.from_json(schema.canonical_json) == Schema.from_dict(schema.model_dump())
    # A lone surrogate reaches the schema model, which names the key.
    with pytest.raises(SchemaError, match="description: holds a lone surrogate"):
        Schema.from_dict({**BASE, "description": "\ud800"})


def test_source_text_is_refused_before_parsing() -> None:
    with pytest.raises(SchemaError, match=r"^t\.json: nested deeper than 32 levels$"):
        Schema.from_json("[" * 33 + "]" * 33, "t.json")
    with pytest.raises(SchemaError, match=r"^t\.json: 1048577 characters; a schema is at most"):
        Schema.from_json(" " * (1 << 20) + "{", "t.json")
    with pytest.raises(SchemaError, match=r"^t\.toml: nested deeper than 32 levels$"):
        Schema.from_toml("a = " + "[" * 33 + "]" * 33, "t.toml")
    with pytest.raises(SchemaError, match=r"t\.toml: not valid TOML"):
        Schema.from_toml("a = '\ud800", "t.toml")


def test_toml_brackets_in_strings_and_comments_do_not_count() -> None:
    decoy = "[" * 40
    toml = (
        f'name = """{decoy}\n{decoy}"""\n'
        f"description = '''{decoy}'''\n"
        f"# {decoy}\n"
        'sequence_field = "input_ids"\n'
        f'[fields.input_ids]\ntier = "per_token"\ndtype = "int64"\ndescription = "\\"{decoy}"\n'
    )
    schema = Schema.from_toml(toml)
    assert schema.name == f"{decoy}\n{decoy}"
    assert schema.fields["input_ids"].description == f'"{decoy}'


def test_stages_are_the_codecs_plan() -> None:
    """What a stage needs (``rust_codec/src/schema/stages.rs``): a field's stages, every stage
    when it names none (or an empty list); a stage is held to a contract only when it carries
    the contract's media field."""
    schema = py_wire.load_schema("qwen2_5_vl")
    media = {c.media_field for c in schema.contracts}
    for stage in schema.stages:
        fields = schema.fields_for(stage)
        assert fields == [n for n in schema.fields if stage in schema.field_stages(n)]
        assert schema.required_for(stage) == [n for n in fields if schema.fields[n].required]
        held = [c.model_dump_json() for c in schema.contracts if c.media_field in fields]
        assert schema._contracts_for(stage) == held
    assert any(m not in schema.fields_for("generation") for m in media)
    assert schema.required_for() == [n for n, f in schema.fields.items() if f.required]
    every = Schema.from_dict(_with_field({"tier": "scalar", "dtype": "int64", "stages": []}))
    assert every.field_stages("x") == every.stages
    with pytest.raises(SchemaError, match=r"has no stage 'bogus'; stages: \["):
        schema.fields_for("bogus")
    with pytest.raises(TypeError, match="stage must be a str"):
        schema.required_for(3)  # type: ignore[arg-type]
