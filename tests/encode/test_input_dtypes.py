"""Declared input dtypes: ``accept = [...]`` lists lossless widenings into the field's dtype;
encode casts exactly those (a copy of that field), never anything undeclared."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import py_wire
from py_wire._schema import LOSSLESS_WIDENINGS
from tests.helpers import small_text_batch


def schema(dtype: str, accept: list[str], tier: str = "scalar") -> py_wire.Schema:
    field = {"tier": tier, "dtype": dtype, "accept": accept}
    if tier == "packed":
        field["shape"] = ["*"]
    return py_wire.Schema.from_dict({"name": "acc", "fields": {"x": field}})


@pytest.mark.parametrize(
    ("dtype", "src"),
    [("float32", "float64"), ("bfloat16", "float32"), ("int32", "int64"), ("int64", "uint64"),
     ("bool", "int8"), ("float16", "bfloat16"), ("int16", "uint16"), ("int64", "int64")],
)  # fmt: skip
def test_narrowing_or_same_dtype_is_refused_at_load(dtype: str, src: str) -> None:
    with pytest.raises(py_wire.SchemaError, match=f"accept: .*{src}"):
        schema(dtype, [src])


def test_every_table_entry_is_lossless() -> None:
    """Each declared widening round-trips every value of the source dtype's extremes exactly."""
    from py_wire._dtypes import DTYPES

    for src, targets in LOSSLESS_WIDENINGS.items():
        s = DTYPES[src]
        if s == torch.bool:
            x = torch.tensor([False, True])
        elif s.is_complex:
            info = torch.finfo(torch.float32)
            x = torch.tensor([complex(info.max, info.tiny), 1 + 2j], dtype=s)
        elif s.is_floating_point:
            info = torch.finfo(s)
            vals = [info.min, info.max, info.tiny, -info.tiny, info.eps, 0.0]
            x = torch.tensor(vals, dtype=torch.float64).to(s)
        else:
            info = torch.iinfo(s)
            x = torch.tensor([info.min, info.max, info.min + 1, info.max - 1], dtype=torch.int64)
            x = x.to(s)
        for t in targets:
            y = x.to(DTYPES[t])
            back = y.real if y.is_complex() and not x.is_complex() else y
            assert torch.equal(back.to(s), x), (src, t)
            if not x.is_complex():
                exact = y.to(torch.complex128).real if y.is_complex() else y.to(torch.float64)
                assert torch.equal(exact, x.to(torch.float64)), (src, t)
        schema_ok = [schema(t, [src]) for t in targets if t != "bool"]
        assert schema_ok or not targets


def test_accepted_dtype_is_cast_on_encode_and_decodes_as_declared() -> None:
    s = schema("int64", ["int32"])
    x = torch.tensor([1, -2, 2**31 - 1], dtype=torch.int32)
    out = py_wire.decode(py_wire.encode({"x": x}, s))["x"]
    assert out.dtype == torch.int64 and torch.equal(out, x.to(torch.int64))
    out = py_wire.decode(py_wire.encode({"x": x.numpy()}, s))["x"]
    assert out.dtype == torch.int64 and torch.equal(out, x.to(torch.int64))
    # Undeclared dtypes are refused, never cast implicitly.
    with pytest.raises(py_wire.BatchError, match="int16"):
        py_wire.encode({"x": x.to(torch.int16)}, s)
    with pytest.raises(py_wire.BatchError):
        py_wire.encode({"x": np.array([1.5, 2.5], dtype=np.float32)}, s)


def test_accept_on_packed_rows_keeps_sharing() -> None:
    s = schema("float32", ["bfloat16"], tier="packed")
    shared = torch.randn(5).to(torch.bfloat16)
    frame = py_wire.encode({"x": [shared, None, shared, torch.ones(2)]}, s)
    layout = {f.name: f for f in frame.layout.fields}["x"]
    assert layout.num_segments == 2 and layout.num_refs == 3  # the shared row is stored once
    rows = py_wire.decode(frame, layout="list")["x"]
    assert rows[0][0].dtype == torch.float32
    assert torch.equal(rows[2][0], shared.to(torch.float32)) and rows[1] is None


def test_nemo_rl_int32_lengths_into_the_neutral_schema() -> None:
    batch = small_text_batch()
    batch["input_lengths"] = batch["input_lengths"].to(torch.int32)
    frame = py_wire.encode(batch, "text_grpo")
    assert py_wire.decode(frame)["input_lengths"].dtype == torch.int64
    assert py_wire.load_schema("text_grpo").fields["input_lengths"].accept == ("int32",)
