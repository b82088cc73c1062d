"""encode rejects every schema violation with the field, row, segment, expected and found."""

from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import py_wire
from py_wire import BatchError, WireError
from tests.helpers import small_text_batch, small_vlm_batch

QWEN = py_wire.load_schema("qwen2_5_vl")
TEXT = py_wire.load_schema("text_grpo")


def expect(match: str, batch: dict, schema=QWEN, **kw) -> BatchError:
    with pytest.raises(BatchError, match=match) as info:
        py_wire.encode(batch, schema, **kw)
    assert isinstance(info.value, WireError) and isinstance(info.value, ValueError)
    return info.value


def test_undeclared_field_is_never_dropped():
    batch = small_vlm_batch()
    batch["pixel_attention_mask"] = [None, None, None]
    error = expect(r"\['pixel_attention_mask'\] are not in schema 'qwen2_5_vl'", batch)
    assert (error.field, error.kind) == ("pixel_attention_mask", "unknown_field")


def test_missing_required_field():
    batch = small_vlm_batch()
    del batch["advantages"]
    expect(r"missing fields \['advantages'\]", batch)


def test_stage_requires_its_required_fields_only():
    batch = small_text_batch()
    # Optional fields (mm_token_type_ids, pixel_values, image_grid_thw, token_mask) are never
    # demanded; the stage's required fields are, and the message lists what the stage needs.
    schema = py_wire.load_schema(QWEN)
    needs = schema.required_for("train")
    assert needs == ["input_ids", "advantages", "generation_logprobs", "input_lengths",
                     "loss_multiplier", "reward"]  # fmt: skip
    del batch["reward"]
    expect(
        r"missing fields \['reward'\] \(stage 'train' needs \['input_ids', 'advantages', "
        r"'generation_logprobs', 'input_lengths', 'loss_multiplier', 'reward'\]\)",
        batch,
        stage="train",
    )
    # The generation stage needs only its own fields: the train-only ones may be absent.
    gen = {k: batch[k] for k in ("input_ids", "input_lengths")}
    decoded = py_wire.decode(py_wire.encode(gen, QWEN, stage="generation"), stage="generation")
    assert set(decoded) == {"input_ids", "input_lengths"}
    with pytest.raises(py_wire.BatchError, match=r"missing fields \['advantages'"):
        py_wire.encode(gen, QWEN)  # no stage: every required field
    batch["reward"] = torch.zeros(3)
    decoded = py_wire.decode(py_wire.encode(batch, QWEN, stage="train"), stage="train")
    # A stage's packed field the frame lacks still decodes as "no media", never a missing key.
    assert decoded["pixel_values"].as_tensor() is None
    assert decoded["pixel_values"].segment_counts() == [0, 0, 0]


def test_wrong_dtype_names_row_and_segment():
    batch = small_vlm_batch()
    batch["pixel_values"][2][1] = batch["pixel_values"][2][1].double()
    expect(
        re.escape(
            'field "pixel_values", row 2, segment 1: dtype float64 but the schema declares float32'
        ),
        batch,
    )


def test_static_dim_violated():
    batch = small_vlm_batch()
    batch["pixel_values"][0] = torch.randn(8, 1175)
    expect(
        r'"pixel_values", row 0, segment 0: shape \[8, 1175\] does not match the schema\'s '
        r'\["\*", 1176\] \(dim 1: expected 1176, found 1175\)',
        batch,
    )


def test_rank_violated():
    batch = small_vlm_batch()
    batch["image_grid_thw"][0] = torch.tensor([1, 2, 4])
    expect(r'"image_grid_thw", row 0, segment 0: shape \[3\] has rank 1', batch)


def test_row_counts_disagree():
    batch = small_vlm_batch()
    batch["reward"] = torch.zeros(2)
    expect(r'fields disagree on the number of rows: "input_ids" has 3, "reward" has 2', batch)


def test_per_token_length_differs_from_sequence():
    batch = small_vlm_batch()
    batch["advantages"][1] = torch.zeros(4)
    expect(r'"advantages", row 1: sequence length 4 but "input_ids" has 3 tokens', batch)


def test_lengths_field_must_match_sequence():
    batch = small_text_batch()
    batch["input_lengths"] = torch.tensor([5, 1, 7])
    expect(
        r'"input_lengths", row 1: 1 but "input_ids" has 0 tokens in that row \(1 rows disagree',
        batch,
        schema=TEXT,
    )


def test_scalar_static_shape():
    batch = small_text_batch()
    batch["reward"] = torch.zeros(3, 2)
    expect(r'"reward": row shape \[2\] has rank 1', batch, schema=TEXT)


def test_per_token_none_row():
    batch = small_text_batch()
    batch["advantages"][0] = None
    expect(
        r'"advantages", row 0: a per-token field needs exactly one tensor per row, found 0',
        batch,
        schema=TEXT,
    )


def test_dense_packed_column_is_refused():
    batch = small_vlm_batch()
    batch["pixel_values"] = torch.randn(3, 4, 1176)
    expect(r"field 'pixel_values' is packed: pass a PackedTensor or a list", batch)


def test_wrong_type_in_rows():
    batch = small_vlm_batch()
    batch["pixel_values"][0] = "not a tensor"
    expect(r'"pixel_values", row 0: expected a torch.Tensor or numpy array, got str', batch)


def test_padded_needs_lengths():
    schema = py_wire.Schema.from_dict(
        {
            "name": "t",
            "sequence_field": "ids",
            "fields": {"ids": {"tier": "per_token", "dtype": "int64"}},
        }
    )
    with pytest.raises(BatchError, match="padded per-token tensor needs per-row lengths"):
        py_wire.encode({"ids": torch.zeros(2, 3, dtype=torch.int64)}, schema)


def test_padded_row_longer_than_width():
    batch = small_text_batch((2, 3))
    batch["advantages"] = torch.zeros(2, 2)
    expect(r'"advantages", row 1: length 3 exceeds the padded width 2', batch, schema=TEXT)


def test_pack_dim_mismatch():
    batch = small_vlm_batch()
    batch["pixel_values"] = py_wire.PackedTensor([torch.randn(2, 1176), None, None], 1)
    expect(r"packs along dim 1 but the schema says pack_dim = 0", batch)


def test_numpy_inputs_are_accepted():
    batch = small_text_batch()
    batch["advantages"] = [t.numpy() for t in batch["advantages"]]
    batch["reward"] = np.arange(3, dtype=np.float32)
    decoded = py_wire.decode(py_wire.encode(batch, TEXT), layout="list")
    assert torch.equal(decoded["reward"], torch.arange(3, dtype=torch.float32))
    assert torch.equal(decoded["advantages"][2], torch.full((7,), 0.5))


def test_numpy_dtype_is_checked_too():
    batch = small_text_batch()
    batch["reward"] = np.arange(3, dtype=np.float64)
    expect(r'"reward": dtype float64 but the schema declares float32', batch, schema=TEXT)


def test_meta_device_tensor_is_refused():
    batch = small_text_batch()
    batch["reward"] = torch.zeros(3, device="meta")
    expect(r'"reward": tensor is on meta; py_wire encodes host memory', batch, schema=TEXT)
