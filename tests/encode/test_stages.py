"""Stage semantics: ``encode(batch, schema, stage=s)`` demands exactly the required fields that
stage needs (``schema.required_for(s)``), and ``fields_for`` / ``decode(stage=)`` agree with it,
for every stage of every bundled schema."""

from __future__ import annotations

import pytest

import py_wire
from py_wire.synth.registry import generate

CASES = [
    (name, stage)
    for name in py_wire.bundled_schemas()
    for stage in py_wire.load_schema(name).stages
]


@pytest.mark.parametrize(("name", "stage"), CASES)
def test_stage_encodes_with_only_its_required_fields(name: str, stage: str) -> None:
    schema = py_wire.load_schema(name)
    full = generate(name, 4, seed=1)
    needs = schema.required_for(stage)
    assert set(needs) <= set(schema.fields_for(stage))
    assert all(schema.fields[n].required for n in needs)
    batch = {k: v for k, v in full.items() if k in needs}
    assert set(batch) == set(needs), f"the generator lacks {set(needs) - set(batch)}"
    # The contracts the stage is held to name media the tokens reference: rows with
    # placeholder tokens need their (optional) media, or the batch is image-blind.
    media = _contract_fields(schema, stage)
    if media:
        with pytest.raises(py_wire.ContractError):
            py_wire.encode(batch, schema, stage=stage)
        batch.update({k: full[k] for k in media})
    frame = py_wire.encode(batch, schema, stage=stage)
    decoded = py_wire.decode(frame, stage=stage)
    assert set(needs) <= set(decoded) <= set(schema.fields_for(stage))
    # Each required field is demanded: dropping any one of them names it and the stage.
    for missing in [n for n in needs if n not in media]:
        short = {k: v for k, v in batch.items() if k != missing}
        with pytest.raises(py_wire.BatchError, match=rf"missing fields \['{missing}'\] "
                           rf"\(stage '{stage}' needs"):  # fmt: skip
            py_wire.encode(short, schema, stage=stage)
    # Fields outside the stage may be present too (they are encoded).
    everything = py_wire.encode(full, schema, stage=stage)
    assert set(py_wire.decode(everything)) == {k for k, v in full.items() if v is not None}


def _contract_fields(schema: py_wire.Schema, stage: str) -> list[str]:
    carried = schema.fields_for(stage)
    out: list[str] = []
    for c in schema.contracts:
        if c.media_field in carried:
            named = (c.media_field, c.grid_field, c.sizes_field, c.count_field)
            out += [n for n in named if n is not None and n not in out]
    return out


def test_optional_fields_are_never_demanded() -> None:
    for name in py_wire.bundled_schemas():
        schema = py_wire.load_schema(name)
        for stage in schema.stages:
            optional = [n for n in schema.fields_for(stage) if not schema.fields[n].required]
            assert not set(optional) & set(schema.required_for(stage))
    # The example: Qwen2.5-VL generation with ids, type ids and lengths only.
    full = generate("qwen2_5_vl", 4)
    gen = {k: full[k] for k in ("input_ids", "mm_token_type_ids", "input_lengths")}
    py_wire.encode(gen, "qwen2_5_vl", stage="generation")
    # train without mm_token_type_ids (transformers < 5.3 batches have none)
    train = {k: v for k, v in full.items() if k != "mm_token_type_ids"}
    py_wire.encode(train, "qwen2_5_vl", stage="train")


def test_unknown_stage_is_a_schema_error() -> None:
    with pytest.raises(py_wire.SchemaError, match="no stage 'bogus'"):
        py_wire.encode(generate("text_grpo", 4), "text_grpo", stage="bogus")
