"""Errors carry structured context (kind, field, row, segment, item, expected, found), so a
trainer can act on a bad row without parsing the message."""

from __future__ import annotations

import pickle

import pytest
import torch

import py_wire
from py_wire._errors import with_context
from tests.helpers import PAD, small_text_batch, small_vlm_batch

CONTEXT = ("field", "row", "segment", "item", "expected", "found")


def test_every_class_has_the_attributes_and_a_kind():
    kinds = {
        py_wire.WireError: "argument",
        py_wire.SchemaError: "schema",
        py_wire.BatchError: "batch",
        py_wire.ContractError: "contract",
        py_wire.FrameError: "frame",
        py_wire.InternalError: "internal",
    }
    for cls, kind in kinds.items():
        err = cls("raised from Python")
        assert err.kind == kind
        assert all(getattr(err, name) is None for name in CONTEXT)


def test_a_dtype_error_names_field_row_segment_and_both_dtypes():
    batch = small_vlm_batch()
    batch["pixel_values"][2] = [torch.randn(4, 1176), torch.randn(8, 1176, dtype=torch.float64)]
    with pytest.raises(py_wire.BatchError) as caught:
        py_wire.encode(batch, "qwen2_5_vl")
    err = caught.value
    assert (err.kind, err.field, err.row, err.segment) == ("dtype", "pixel_values", 2, 1)
    assert (err.expected, err.found) == ("float32", "float64")


def test_a_shape_error_carries_both_shapes():
    batch = small_vlm_batch()
    batch["pixel_values"][0] = torch.randn(8, 1175)
    with pytest.raises(py_wire.BatchError) as caught:
        py_wire.encode(batch, "qwen2_5_vl")
    err = caught.value
    assert (err.kind, err.field, err.row, err.segment) == ("shape", "pixel_values", 0, 0)
    assert err.expected == ["*", 1176] and err.found == [8, 1175]


def test_a_length_mismatch_names_the_row_and_both_lengths():
    batch = small_text_batch((5, 0, 7))
    batch["advantages"][2] = torch.zeros(6)
    with pytest.raises(py_wire.BatchError) as caught:
        py_wire.encode(batch, "text_grpo")
    err = caught.value
    assert (err.kind, err.field, err.row, err.expected, err.found) == (
        "length",
        "advantages",
        2,
        7,
        6,
    )


def test_a_broken_placeholder_run_names_row_image_and_counts():
    batch = small_vlm_batch()
    ids = batch["input_ids"][2]
    # Row 2's second image (4 features) loses one placeholder token.
    last = int((ids == PAD).nonzero()[-1])
    batch["input_ids"][2] = torch.cat([ids[:last], ids[last + 1 :]])
    batch["advantages"][2] = batch["advantages"][2][:-1]
    batch["generation_logprobs"][2] = batch["generation_logprobs"][2][:-1]
    batch["input_lengths"][2] -= 1
    with pytest.raises(py_wire.ContractError) as caught:
        py_wire.encode(batch, "qwen2_5_vl")
    err = caught.value
    assert (err.kind, err.field, err.row, err.item) == ("placeholder_count", "pixel_values", 2, 1)
    assert (err.expected, err.found) == (2, 1)


def test_frame_errors_and_argument_errors_have_kinds():
    with pytest.raises(py_wire.FrameError) as caught:
        py_wire.decode(b"\x00" * 16)
    assert caught.value.kind == "frame"
    frame = py_wire.encode(small_text_batch(), "text_grpo")
    with pytest.raises(py_wire.WireError) as caught:
        py_wire.take_rows(frame, [7])
    # A row outside the frame has its own class and kind (issue 27's one row rule).
    assert type(caught.value) is py_wire.RowIndexError and caught.value.kind == "row_index"
    with pytest.raises(py_wire.WireError) as caught:
        py_wire.decode(frame, writable="sometimes")  # type: ignore[arg-type]
    assert type(caught.value) is py_wire.WireError and caught.value.kind == "argument"


def test_context_survives_pickling():
    batch = small_text_batch((5, 0, 7))
    batch["advantages"][2] = torch.zeros(6)
    with pytest.raises(py_wire.BatchError) as caught:
        py_wire.encode(batch, "text_grpo")
    again = pickle.loads(pickle.dumps(caught.value))
    assert (again.kind, again.field, again.row) == ("length", "advantages", 2)
    assert str(again) == str(caught.value)


def test_python_raised_errors_take_context_too():
    err = with_context(py_wire.BatchError("missing"), kind="missing_field", field="reward")
    assert (err.kind, err.field, err.row) == ("missing_field", "reward", None)
    with pytest.raises(TypeError):
        with_context(py_wire.BatchError("x"), rows=3)
