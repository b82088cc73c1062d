"""Property tests: any valid schema, any batch for it, every input form → encode → decode gives
the same bits back, as views into the frame."""

from __future__ import annotations

import inspect
import pickle
import re
import warnings
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import py_wire
from py_wire import PackedTensor, Schema
from py_wire._dtypes import DTYPES
from py_wire.testing import assert_batch_equal, batches, schemas
from tests.helpers import decoded_tensors


def test_padded_decode_adds_lengths_in_the_declared_dtype() -> None:
    schema = Schema.model_validate(
        {
            "name": "probe",
            "sequence_field": "ids",
            "lengths_field": "n",
            "fields": {
                "ids": {"tier": "per_token", "dtype": "int64"},
                "n": {"tier": "scalar", "dtype": "int32", "required": False},
            },
        }
    )
    frame = py_wire.encode({"ids": [torch.arange(3)]}, schema)
    assert py_wire.decode(frame, layout="padded")["n"].dtype == torch.int32


def _present(batch: dict[str, Any]) -> set[str]:
    return {k for k, v in batch.items() if v is not None}


def _has_per_token(schema: Schema, batch: dict[str, Any]) -> bool:
    return any(schema.fields[k].tier == "per_token" for k in _present(batch))


def _buffer_range(buf: Any) -> tuple[int, int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # read-only buffers
        base = torch.frombuffer(buf, dtype=torch.uint8)
    return base.data_ptr(), base.data_ptr() + base.numel()


def _assert_views_into(decoded: dict[str, Any], buf: Any) -> None:
    lo, hi = _buffer_range(buf)
    for what, t in decoded_tensors(decoded):
        if t.numel() == 0:
            continue  # no bytes to copy (and torch reports data_ptr 0 for empty views)
        start = t.data_ptr()
        assert lo <= start < hi, f"{what}: data_ptr {start:#x} outside the frame [{lo:#x}, {hi:#x})"
        span = sum((d - 1) * s for d, s in zip(t.shape, t.stride(), strict=True)) + 1
        last = start + span * t.element_size()
        assert last <= hi, f"{what}: ends at {last:#x}, past the frame's end {hi:#x}"


def _decode_default(src: Any, schema: Schema, batch: dict[str, Any], rows: int) -> dict:
    """decode with the default layout (0-row frames decode to 0-row jagged tensors too)."""
    decoded = py_wire.decode(src)
    assert rows or all(
        not isinstance(v, torch.Tensor) or v.size(0) == 0 for v in decoded.values()
    ), "a 0-row frame decoded to rows"
    return decoded


def _check_as_tensor(decoded: dict[str, Any], schema: Schema) -> None:
    """PackedTensor.as_tensor() is every segment concatenated along the pack dim (None for no
    segments); with pad_to_max_shape, after zero-padding every other dim to its maximum."""
    for name, value in decoded.items():
        if not isinstance(value, PackedTensor):
            continue
        dim = schema.fields[name].pack_dim
        segs = [s for r in range(len(value)) for s in (value[r] or [])]
        if not segs:
            assert value.as_tensor() is None, f"{name}: as_tensor() of no segments is not None"
            assert value.as_tensor(pad_to_max_shape=True) is None, name
            continue
        target = [max(s.shape[d] for s in segs) for d in range(segs[0].dim())]
        padded = []
        for s in segs:
            want = list(target)
            want[dim] = s.shape[dim]
            p = torch.zeros(want, dtype=s.dtype)
            p[tuple(slice(0, n) for n in s.shape)] = s
            padded.append(p)
        checks = [(True, torch.cat(padded, dim=dim))]
        if len({tuple(d for i, d in enumerate(s.shape) if i != dim) for s in segs}) == 1:
            checks.append((False, torch.cat(segs, dim=dim)))
        for pad, expected in checks:
            whole = value.as_tensor(pad_to_max_shape=pad)
            what = f"{name}: as_tensor(pad_to_max_shape={pad})"
            assert whole is not None, f"{what} is None but there are segments"
            assert whole.shape == expected.shape, (what, whole.shape, expected.shape)
            assert torch.equal(_byte_view(whole), _byte_view(expected)), f"{what} differs"


def _byte_view(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@given(st.data())
def test_roundtrip_every_layout(data: st.DataObject) -> None:
    schema = data.draw(schemas(), label="schema")
    batch = data.draw(batches(schema), label="batch")
    frame = py_wire.encode(batch, schema)
    rows = frame.num_rows

    decoded = _decode_default(frame, schema, batch, rows)
    assert_batch_equal(decoded, batch, schema)
    _assert_views_into(decoded, frame)
    _check_as_tensor(decoded, schema)

    # bytes and bytearray copies of the frame decode to the same data.
    as_bytes = bytes(frame)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from_bytes = _decode_default(as_bytes, schema, batch, rows)
    # Read-only input: documented read-only views, and no stray warnings.
    assert not caught, [str(w.message) for w in caught]
    assert_batch_equal(from_bytes, batch, schema)
    as_bytearray = bytearray(frame)
    from_bytearray = _decode_default(as_bytearray, schema, batch, rows)
    assert_batch_equal(from_bytearray, batch, schema)
    if _buffer_range(as_bytearray)[0] % 16 == 0:  # a misaligned base is copied, by design
        _assert_views_into(from_bytearray, as_bytearray)

    # Other buffer kinds decode without copying: a numpy uint8 array and a torch uint8 tensor
    # over the frame, and a frame pickled with protocol 5 (out-of-band buffer) or 4 (bytes).
    kind = data.draw(st.sampled_from(("numpy", "tensor", "pickle5", "pickle4")), label="source")
    if kind == "numpy":
        source: Any = np.frombuffer(frame, dtype=np.uint8)
    elif kind == "tensor":
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            source = torch.frombuffer(frame, dtype=torch.uint8)
    elif kind == "pickle5":
        buffers: list[pickle.PickleBuffer] = []
        dumped = pickle.dumps(frame, protocol=5, buffer_callback=buffers.append)
        source = pickle.loads(dumped, buffers=buffers)
    else:
        source = pickle.loads(pickle.dumps(frame, protocol=4))
    from_source = _decode_default(source, schema, batch, rows)
    assert_batch_equal(from_source, batch, schema)
    if kind in ("numpy", "tensor", "pickle5"):
        _assert_views_into(from_source, frame)

    as_list = py_wire.decode(frame, layout="list")
    assert_batch_equal(as_list, batch, schema)
    _assert_views_into(as_list, frame)

    padded = py_wire.decode(frame, layout="padded")
    lengths_field = schema.lengths_field
    added = lengths_field in padded and lengths_field not in _present(batch)
    # assert_batch_equal checks each row's prefix, that the tail is the pad value, and the
    # lengths the decode adds.
    assert_batch_equal(padded, batch, schema)
    if lengths_field in padded:
        # With the schema's lengths field, a padded decode encodes again: to the same frame,
        # unless the decode added that field.
        again = py_wire.encode(padded, schema)
        if added:
            assert_batch_equal(py_wire.decode(again, layout="list"), batch, schema)
        else:
            assert bytes(again) == bytes(frame), "encode(decode(f, layout='padded')) != f"

    # A decoded batch encodes again to the very same bytes (views in, views out).
    assert bytes(py_wire.encode(decoded, schema)) == bytes(frame), "encode(decode(f)) != f"
    assert bytes(py_wire.encode(as_list, schema)) == bytes(frame), "encode(decode(f)) != f"

    # The frame's own schema, and decoding against the right schema, both work.
    assert frame.schema.fingerprint == schema.fingerprint
    py_wire.decode(frame, schema, layout="list")


@given(st.data())
def test_stage_encode_and_decode(data: st.DataObject) -> None:
    """encode(stage=) demands exactly the required fields that stage needs; decode(stage=)
    returns the stage's fields that the frame holds, plus empty rows for its absent packed
    fields."""
    schema = data.draw(schemas(max_fields=4), label="schema")
    batch = data.draw(batches(schema, max_rows=3), label="batch")
    stage = data.draw(st.sampled_from(schema.stages), label="stage")
    lacking = sorted(set(schema.required_for(stage)) - _present(batch))
    if lacking:
        with pytest.raises(py_wire.BatchError, match=re.escape(repr(lacking[0]))):
            py_wire.encode(batch, schema, stage=stage)
        frame = py_wire.encode(batch, schema)
    else:
        frame = py_wire.encode(batch, schema, stage=stage)
    decoded = py_wire.decode(frame, stage=stage, layout="list")
    stage_fields = set(schema.fields_for(stage))
    # Packed stage fields the frame lacks come back as rows without segments ("no media").
    absent_media = {n for n in stage_fields - _present(batch) if schema.fields[n].tier == "packed"}
    assert set(decoded) == (stage_fields & _present(batch)) | absent_media
    for name in absent_media:
        assert decoded[name] == [None] * frame.num_rows
    assert_batch_equal(decoded, batch, schema, fields=sorted(stage_fields & _present(batch)))


@given(schemas())
def test_schema_survives_canonical_json(schema: Schema) -> None:
    again = Schema.model_validate_json(schema.canonical_json)
    assert again.fingerprint == schema.fingerprint
    assert again == schema
    assert Schema.from_json(schema.canonical_json).fingerprint == schema.fingerprint


def test_zero_rows_decode() -> None:
    """0 rows: per-token fields decode to 0-row jagged tensors; list and padded layouts too."""
    schema = py_wire.load_schema("text_grpo")
    empty = {
        "input_ids": [],
        "advantages": [],
        "generation_logprobs": [],
        "input_lengths": torch.zeros(0, dtype=torch.int64),
        "loss_multiplier": torch.zeros(0),
        "reward": np.zeros(0, dtype=np.float32),
    }
    frame = py_wire.encode(empty, schema)
    nested = py_wire.decode(frame)
    assert nested["input_ids"].is_nested and nested["input_ids"].size(0) == 0
    assert_batch_equal(nested, empty, schema)
    assert_batch_equal(py_wire.decode(frame, layout="list"), empty, schema)
    assert_batch_equal(py_wire.decode(frame, layout="padded"), empty, schema)


@given(st.data())
def test_roundtrip_with_wire_casts(data: st.DataObject) -> None:
    schema = data.draw(
        schemas(dtypes=["float32", "float64", "int64", "bool"], wire_casts=True), label="schema"
    )
    batch = data.draw(batches(schema), label="batch")
    frame = py_wire.encode(batch, schema)
    decoded = _decode_default(frame, schema, batch, frame.num_rows)
    assert_batch_equal(decoded, batch, schema)
    restored = py_wire.decode(frame, layout="list", source_dtype=True)
    for name, field in schema.fields.items():
        if name in restored and field.tier == "scalar":
            assert restored[name].dtype == DTYPES[field.dtype], name
    assert_batch_equal(restored, batch, schema)


_ORIGINAL_ENCODE = py_wire._native.encode
_PARALLEL_CALLS: list[int] = []


def _parallel_encode(*args: Any, **kwargs: Any) -> Any:
    """``py_wire._native.encode`` forced onto its multi-threaded copy path (4 threads, no size
    threshold), which batches this small never reach otherwise."""
    _PARALLEL_CALLS.append(1)
    bound = inspect.signature(_ORIGINAL_ENCODE).bind(*args, **kwargs)
    bound.arguments["threads"] = 4
    bound.arguments["parallel_threshold"] = 1
    return _ORIGINAL_ENCODE(*bound.args, **bound.kwargs)


@given(st.data())
def test_parallel_copies_give_identical_frames(data: st.DataObject) -> None:
    from unittest import mock

    from py_wire import _native

    schema = data.draw(schemas(), label="schema")
    batch = data.draw(batches(schema), label="batch")
    serial = bytes(py_wire.encode(batch, schema))
    assert bytes(py_wire.encode(batch, schema)) == serial, "encode is not deterministic"
    calls = len(_PARALLEL_CALLS)
    with mock.patch.object(_native, "encode", _parallel_encode):
        frame = py_wire.encode(batch, schema)
    assert len(_PARALLEL_CALLS) == calls + 1, "the parallel encode was not used"
    assert bytes(frame) == serial, "the multi-threaded copy wrote a different frame"


@given(st.data())
def test_encode_parts_and_out_buffer_give_the_same_frame(data: st.DataObject) -> None:
    """Scatter/gather parts, written one after another, and an encode into a caller's buffer
    are byte-identical to encode's frame."""
    schema = data.draw(schemas(), label="schema")
    batch = data.draw(batches(schema), label="batch")
    frame = bytes(py_wire.encode(batch, schema))
    min_borrow = data.draw(st.sampled_from((0, 1, 64, 1 << 16)), label="min_borrow")
    parts = py_wire.encode_parts(batch, schema, min_borrow=min_borrow)
    assert b"".join(bytes(memoryview(p)) for p in parts) == frame
    out = bytearray(len(frame))
    into = py_wire.encode(batch, schema, out=out)
    assert bytes(into) == frame
    assert_batch_equal(py_wire.decode(into, layout="list"), batch, schema)


@given(st.data())
def test_bundled_schemas_roundtrip(data: st.DataObject) -> None:
    """batches() works for the bundled, real-model schemas (contracts included)."""
    schema = py_wire.load_schema(data.draw(st.sampled_from(py_wire.bundled_schemas())))
    batch = data.draw(batches(schema, max_dim=4), label="batch")
    frame = py_wire.encode(batch, schema)
    decoded = _decode_default(frame, schema, batch, frame.num_rows)
    assert_batch_equal(decoded, batch, schema)
    assert_batch_equal(py_wire.decode(bytes(frame), layout="list"), batch, schema)


def test_padded_decode_of_bfloat16_and_multi_element_tokens_reads_the_frame_bytes() -> None:
    """The padded layout copies from the frame's bytes as unsigned ints of the dtype's width
    (numpy has no bfloat16): every dtype width and token shape pads as the jagged rows say."""
    schema = Schema.model_validate(
        {
            "name": "probe_widths",
            "sequence_field": "ids",
            "fields": {
                "ids": {"tier": "per_token", "dtype": "int64", "pad_value": 7},
                "h": {"tier": "per_token", "dtype": "bfloat16", "shape": [3], "pad_value": -1.5},
                "m": {"tier": "per_token", "dtype": "bool", "pad_value": True},
            },
        }
    )
    lengths = [2, 0, 5]
    batch = {
        "ids": [torch.arange(n) for n in lengths],
        "h": [torch.randn(n, 3).to(torch.bfloat16) for n in lengths],
        "m": [torch.zeros(n, dtype=torch.bool) for n in lengths],
    }
    out = py_wire.decode(py_wire.encode(batch, schema), layout="padded", pad_to_multiple_of=4)
    for name, pad in (("ids", 7), ("h", -1.5), ("m", True)):
        assert out[name].shape[:2] == (3, 8) and out[name].dtype == batch[name][0].dtype, name
        for r, n in enumerate(lengths):
            assert torch.equal(out[name][r, :n], batch[name][r]), (name, r)
            assert bool((out[name][r, n:] == pad).all()), (name, r)


def test_a_pooled_padded_output_outlives_its_frame_and_later_frames() -> None:
    """Padded outputs from 256 KiB up sit in the frame pool's pages: each keeps its pages
    until it dies (a later encode or decode reusing the pool never writes under it), and each
    has a storage of exactly its own bytes (it pickles as itself)."""
    schema = Schema.model_validate(
        {
            "name": "probe_pool",
            "sequence_field": "ids",
            "fields": {"ids": {"tier": "per_token", "dtype": "int64", "pad_value": -1}},
        }
    )
    rows = [torch.arange(n) for n in (40_000, 9_000, 0)]
    out = py_wire.decode(py_wire.encode({"ids": rows}, schema), layout="padded")["ids"]
    assert out.nbytes >= py_wire._decode.POOLED_OUTPUT_MIN
    assert out.untyped_storage().nbytes() == out.nbytes
    want = out.clone()
    for _ in range(3):  # frames and padded decodes of the same size, dropped at once
        other = [torch.full((n,), 7) for n in (40_000, 9_000, 0)]
        py_wire.decode(py_wire.encode({"ids": other}, schema), layout="padded")
    assert torch.equal(out, want)
    assert torch.equal(pickle.loads(pickle.dumps(out, protocol=5)), want)
