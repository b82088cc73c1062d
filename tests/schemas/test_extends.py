"""Schema files that extend a base: the merge rules, and every way a chain can be wrong."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch

import py_wire
from py_wire import SchemaError

#: The NeMo-RL schemas were rewritten as extensions of the neutral ones; the schemas they
#: resolve to (and so every frame's header) are byte for byte those of the full files before.
FINGERPRINTS_BEFORE_EXTENDS = {
    "nemo_rl/gemma3": "sha256:b0037af097bcbaad8eba49a8ef73556614ffd98db525b6d6a96e202e98f35d2e",
    "nemo_rl/nemotron_omni": "sha256:c877fec8cbe2f2c12ab879b6bd058bb939e2a61a5733cf4ce7cebf6a7665bcc3",  # noqa: E501
    "nemo_rl/qwen2_5_vl": "sha256:dc0f0f8967769db00489b669e8429b5be7b19ab2e280d9199dea31763bd2c530",
    "nemo_rl/qwen3_vl": "sha256:4d2359554ad803cf690f1fd30d2a3d2ddb9b647db2f8ae9d09c2b6268bd63d72",
    "nemo_rl/smolvlm": "sha256:4437786650bbeb3b849ae9f78c09f612d1c152bb7a19df39f58ae2e76a9e45ae",
    "nemo_rl/text": "sha256:95c92d1d9b4f22f333f42b4a153614e8fc315dbcc68915845ee674247437bb7e",
}

BASE = """
name = "base"
sequence_field = "input_ids"
lengths_field = "input_lengths"

[fields.input_ids]
tier = "per_token"
dtype = "int64"
description = "tokens"

[fields.input_lengths]
tier = "scalar"
dtype = "int64"

[fields.pixel_values]
tier = "packed"
dtype = "float32"
shape = ["*", 4]
required = false

[fields.reward]
tier = "scalar"
dtype = "float32"
description = "the base's reward"

[fields.image_grid_thw]
tier = "packed"
dtype = "int64"
shape = ["*", 3]
required = false

[[contracts]]
kind = "placeholder"
name = "images"
media_field = "pixel_values"
token_id = 7
count = "grid_thw"
grid_field = "image_grid_thw"
merge_size = 2
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("name", sorted(FINGERPRINTS_BEFORE_EXTENDS))
def test_rewritten_bundled_schemas_resolve_to_what_they_were(name: str) -> None:
    schema = py_wire.load_schema(name)
    # The media fields' `column = "media"` (issue 28) came later: without it, the schema is
    # byte for byte the full file's.
    doc = json.loads(schema.canonical_json)
    for field in doc["fields"].values():
        assert field.pop("column", "media") == "media"
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    assert (
        "sha256:" + hashlib.sha256(text.encode()).hexdigest() == FINGERPRINTS_BEFORE_EXTENDS[name]
    )
    assert "extends" not in schema.canonical_json and "drop_fields" not in schema.canonical_json


def test_a_child_merges_adds_drops_and_replaces_fields(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", BASE)
    child = write(
        tmp_path,
        "child.toml",
        """
extends = "base.toml"
name = "child"
drop_fields = ["reward", "input_lengths"]
lengths_field = "input_lengths"

[fields.input_ids]
pad_value = 3

[fields.input_lengths]
tier = "scalar"
dtype = "int32"

[fields.pixel_values]
dtype = "bfloat16"

[fields.advantages]
tier = "per_token"
dtype = "float32"
""",
    )
    schema = py_wire.load_schema(child)
    assert schema.name == "child"
    assert set(schema.fields) == {
        "input_ids",
        "input_lengths",
        "pixel_values",
        "image_grid_thw",
        "advantages",
    }
    ids = schema.fields["input_ids"]
    assert (ids.pad_value, ids.description, ids.dtype) == (3, "tokens", "int64")  # merged
    assert schema.fields["input_lengths"].dtype == "int32"  # replaced
    pixels = schema.fields["pixel_values"]
    assert (pixels.dtype, pixels.shape, pixels.required) == ("bfloat16", ("*", 4), False)
    assert [c.name for c in schema.contracts] == ["images"]  # inherited
    # The frame carries the resolved schema and reads back without the files.
    batch = {
        "input_ids": [torch.tensor([1, 2])],
        "input_lengths": torch.tensor([2], dtype=torch.int32),
        "advantages": [torch.zeros(2)],
    }
    frame = py_wire.encode(batch, schema)
    assert py_wire.Frame.from_buffer(bytes(frame)).schema.fingerprint == schema.fingerprint


def test_a_child_replaces_contracts_when_it_gives_any(tmp_path: Path) -> None:
    write(tmp_path, "base.toml", BASE)
    child = write(
        tmp_path,
        "child.toml",
        """
extends = "base.toml"
name = "child"

[[contracts]]
kind = "placeholder"
name = "other"
media_field = "pixel_values"
token_id = 9
count = "grid_thw"
grid_field = "image_grid_thw"
merge_size = 2
""",
    )
    assert [c.token_id for c in py_wire.load_schema(child).contracts] == [9]


def test_a_bundled_base_by_name(tmp_path: Path) -> None:
    child = write(
        tmp_path,
        "mine.toml",
        'extends = "qwen2_5_vl"\nname = "mine"\n[fields.reward]\ndescription = "mine"\n',
    )
    schema = py_wire.load_schema(child)
    base = py_wire.load_schema("qwen2_5_vl")
    assert set(schema.fields) == set(base.fields)
    assert schema.fields["reward"].description == "mine"
    assert schema.contracts == base.contracts


@pytest.mark.parametrize(
    ("child", "message"),
    [
        ('extends = "base.toml"\n', "needs its own name"),
        ('extends = 3\nname = "c"\n', "extends must be a schema name or a path, not 3"),
        ('extends = "nope"\nname = "c"\n', "'nope', which is neither a bundled schema"),
        ('extends = "missing.toml"\nname = "c"\n', "missing.toml does not exist"),
        ('name = "c"\ndrop_fields = ["reward"]\n', "drop_fields needs extends"),
        (
            'extends = "base.toml"\nname = "c"\ndrop_fields = ["nope"]\n',
            r"drop_fields names 'nope', which 'base.toml' does not declare \(its fields: ",
        ),
        ('extends = "base.toml"\nname = "c"\ndrop_fields = "reward"\n', "list of field names"),
        (
            'extends = "base.toml"\nname = "c"\n[fields.extra]\ndtype = "int64"\n',
            "extra",  # a new field must be whole: no tier
        ),
        (
            'extends = "base.toml"\nname = "c"\n[fields.input_ids]\ndtype = "int65"\n',
            r"fields\.input_ids\.dtype: must be a dtype .*got 'int65'",
        ),
    ],
)
def test_a_bad_extension_names_the_file_and_the_problem(
    tmp_path: Path, child: str, message: str
) -> None:
    write(tmp_path, "base.toml", BASE)
    path = write(tmp_path, "child.toml", child)
    with pytest.raises(SchemaError, match=message):
        py_wire.load_schema(path)


def test_loops_and_deep_chains_are_refused(tmp_path: Path) -> None:
    write(tmp_path, "a.toml", 'extends = "b.toml"\nname = "a"\n')
    write(tmp_path, "b.toml", 'extends = "a.toml"\nname = "b"\n')
    with pytest.raises(SchemaError, match="extends forms a loop"):
        py_wire.load_schema(tmp_path / "a.toml")
    write(tmp_path, "s0.toml", BASE)
    for i in range(1, 10):
        write(tmp_path, f"s{i}.toml", f'extends = "s{i - 1}.toml"\nname = "s{i}"\n')
    assert py_wire.load_schema(tmp_path / "s7.toml").name == "s7"
    with pytest.raises(SchemaError, match="more than 8 deep"):
        py_wire.load_schema(tmp_path / "s9.toml")


def test_from_toml_text_cannot_extend() -> None:
    with pytest.raises(SchemaError, match=r"use py_wire\.load_schema"):
        py_wire.Schema.from_toml('extends = "qwen2_5_vl"\nname = "x"\n')
