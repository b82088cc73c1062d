"""Frame operations: take_rows, chunk, split, shard, concat, without decoding."""

from __future__ import annotations

import itertools

import pytest
import safetensors.torch
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import py_wire
from py_wire.synth import qwen2_5_vl_batch
from py_wire.synth.registry import generate
from py_wire.testing import assert_batch_equal

QWEN = py_wire.load_schema("qwen2_5_vl")


def take(batch: dict, rows: list[int]) -> dict:
    return {k: [v[i] for i in rows] if isinstance(v, list) else v[rows] for k, v in batch.items()}


@pytest.fixture(scope="module")
def batch_and_frame():
    batch = qwen2_5_vl_batch(8, seed=1)
    return batch, py_wire.encode(batch, QWEN)


def test_select_rows_in_any_order(batch_and_frame):
    batch, frame = batch_and_frame
    rows = [7, 0, 3, 3]
    picked = py_wire.take_rows(frame, rows)
    assert picked.num_rows == 4 and picked.schema == QWEN
    assert_batch_equal(py_wire.decode(picked), take(batch, rows), QWEN)
    py_wire.check_contracts(picked)


def test_select_keeps_shared_segments_shared(batch_and_frame):
    batch, frame = batch_and_frame
    # Rows 0-3 are one GRPO group sharing one pixel tensor.
    assert batch["pixel_values"][0] is batch["pixel_values"][1]
    picked = safetensors.torch.load(bytes(py_wire.take_rows(frame, [0, 1])))
    assert picked["pixel_values.seg_shapes"].shape[0] == 1
    assert picked["pixel_values.row_segments"].tolist() == [0, 0]


def test_split_shard_and_concat_round_trip(batch_and_frame):
    batch, frame = batch_and_frame
    parts = py_wire.chunk(frame, 3)
    assert [p.num_rows for p in parts] == [3, 3, 2]
    assert [p.num_rows for p in py_wire.split(frame, [5, 0, 3])] == [5, 0, 3]
    shards = [py_wire.shard(frame, r, 3) for r in range(3)]
    assert [bytes(s) for s in shards] == [bytes(p) for p in parts]
    joined = py_wire.concat(parts)
    assert_batch_equal(py_wire.decode(joined), batch, QWEN)
    with pytest.raises(ValueError, match="do not add up"):
        py_wire.split(frame, [4, 5])


def test_concat_text_only_and_multimodal_in_either_order(batch_and_frame):
    batch, frame = batch_and_frame
    text_rows = [r for r, px in enumerate(batch["pixel_values"]) if px is None]
    text_only = {
        k: v
        for k, v in take(batch, text_rows).items()
        if k not in ("pixel_values", "image_grid_thw")
    }
    text_frame = py_wire.encode(text_only, QWEN)  # no media columns at all
    for frames, rows in [
        ([frame, text_frame], list(range(8)) + text_rows),
        ([text_frame, frame], text_rows + list(range(8))),
    ]:
        joined = py_wire.concat(frames)
        py_wire.check_contracts(joined)
        assert_batch_equal(py_wire.decode(joined), take(batch, rows), QWEN)


def test_concat_refuses_other_schemas(batch_and_frame):
    _, frame = batch_and_frame
    other = py_wire.encode(generate("text_grpo", 2), "text_grpo")
    with pytest.raises(py_wire.SchemaError, match="different schemas"):
        py_wire.concat([frame, other])


def test_bad_rows(batch_and_frame):
    _, frame = batch_and_frame
    assert py_wire.take_rows(frame, [-1]).num_rows == 1
    assert py_wire.take_rows(frame, []).num_rows == 0
    assert py_wire.take_rows(frame, slice(2, 5)).num_rows == 3
    with pytest.raises(py_wire.WireError, match="row 8 is out of range for 8 rows"):
        py_wire.take_rows(frame, [8])
    with pytest.raises(py_wire.WireError, match="row -9 is out of range for 8 rows"):
        py_wire.take_rows(frame, [-9])
    with pytest.raises(py_wire.WireError, match="rank 3"):
        py_wire.shard(frame, 3, 3)
    with pytest.raises(py_wire.WireError, match="do not add up"):
        py_wire.split(frame, [3, 3])
    with pytest.raises(py_wire.WireError, match="between 1 and the 8 rows"):
        py_wire.chunk(frame, 9)
    with pytest.raises(py_wire.WireError, match="at least one frame"):
        py_wire.concat([])
    with pytest.raises(py_wire.WireError, match="sequence of ints"):
        py_wire.take_rows(frame, ["a"])


def test_wire_dtype_and_pack_dim_fields_survive():
    for name in ("nemotron_omni", "smolvlm"):
        schema = py_wire.load_schema(name)
        batch = generate(name, 4)
        frame = py_wire.encode(batch, schema)
        picked = py_wire.take_rows(frame, [2, 1])
        expected = py_wire.decode(py_wire.encode(take(batch, [2, 1]), schema))
        got = py_wire.decode(picked)
        for field, value in expected.items():
            if isinstance(value, py_wire.PackedTensor):
                assert value.segment_counts() == got[field].segment_counts(), field
                a, b = value.as_tensor(), got[field].as_tensor()
                assert (a is None and b is None) or torch.equal(a, b), field
            elif value.is_nested:
                assert all(
                    torch.equal(x, y)
                    for x, y in zip(value.unbind(), got[field].unbind(), strict=True)
                ), field
            else:
                assert torch.equal(value, got[field]), field


def test_split_takes_row_counts_and_points_an_int_to_chunk(batch_and_frame):
    """``torch.split`` reads an int as a chunk size, ``chunk`` as a part count: py_wire's
    ``split`` takes no int at all rather than guess (the pre-release int form is gone)."""
    _, frame = batch_and_frame
    with pytest.raises(TypeError, match=r"sections must be a list.*py_wire\.chunk\(frame, 3\)"):
        py_wire.split(frame, 3)  # type: ignore[arg-type]
    parts = py_wire.split(frame, [3, 3, 2])
    assert [bytes(p) for p in parts] == [bytes(p) for p in py_wire.chunk(frame, 3)]
    assert not hasattr(py_wire, "select")


def test_take_rows_of_spans_is_their_rows_in_order(batch_and_frame):
    _, frame = batch_and_frame
    spans = py_wire.take_rows(frame, [range(5, 7), range(0, 2)])
    assert bytes(spans) == bytes(py_wire.take_rows(frame, [5, 6, 0, 1]))
    with pytest.raises(py_wire.WireError, match="out of range"):
        py_wire.take_rows(frame, [range(6, 9)])
    with pytest.raises(py_wire.WireError, match=r"row span range\(0, 4, 2\) must have step 1"):
        py_wire.take_rows(frame, [range(0, 4, 2)])
    with pytest.raises(py_wire.WireError, match=r"non-negative rows, not range\(-1, 2\)"):
        py_wire.take_rows(frame, [range(-1, 2)])
    # An empty range takes no rows, as in Python.
    empty = py_wire.take_rows(frame, [range(5, 3), range(0, 2), range(4, 4)])
    assert bytes(empty) == bytes(py_wire.take_rows(frame, [0, 1]))


def test_more_rows_than_bytes_of_fields_that_store_nothing_per_row_are_refused():
    # Found by the gather fuzz target: rows backed by no bytes, concatenated until they
    # outnumber the frame's bytes, made a frame no reader accepts. The op refuses with the
    # encoder's row rule; fewer such rows still gather.
    schema = py_wire.Schema.model_validate(
        {
            "name": "empty_rows",
            "fields": {"e": {"tier": "scalar", "dtype": "float32", "shape": [0]}},
        }
    )
    frame = py_wire.encode({"e": torch.zeros(100, 0)}, schema)
    assert py_wire.take_rows(frame, [0, 1]).num_rows == 2
    with pytest.raises(py_wire.BatchError, match="1000 rows with no per-row data") as info:
        py_wire.concat([frame] * 10)
    assert info.value.kind == "rows_unbacked"


def test_take_rows_of_index_arrays_masks_and_their_refusals(batch_and_frame):
    """Index tensors and arrays are read as one int64 buffer; a boolean mask takes its true
    rows; what would be a silent cast (bools as rows 0 and 1, floats, a set's order, values
    past int64) is refused naming the value."""
    import numpy as np

    batch, frame = batch_and_frame
    rows = [7, 0, 3, 3, -1]
    want = py_wire.take_rows(frame, rows)
    for indices in (
        np.array(rows),
        np.array(rows, dtype=np.int32),
        np.array(rows, dtype=np.int64)[::1],
        np.array([9, 7, 9, 0, 9, 3, 9, 3, 9, -1])[1::2],  # strided: 7, 0, 3, 3, -1
        torch.tensor(rows),
        torch.tensor(rows, dtype=torch.int16),
        (7, 0, 3, 3, -1),
    ):
        got = py_wire.take_rows(frame, indices)
        assert bytes(memoryview(got)) == bytes(memoryview(want)), type(indices)
    mask = [True, False, False, True, False, False, False, True]
    for indices in (np.array(mask), torch.tensor(mask)):
        got = py_wire.take_rows(frame, indices)
        assert_batch_equal(py_wire.decode(got), take(batch, [0, 3, 7]), QWEN)
    assert py_wire.take_rows(frame, np.zeros(0, dtype=np.int64)).num_rows == 0
    assert py_wire.take_rows(frame, np.array([5], dtype=np.uint64)).num_rows == 1

    with pytest.raises(py_wire.WireError, match=r"rows\[1\] is True, a bool"):
        py_wire.take_rows(frame, [0, True])
    with pytest.raises(py_wire.WireError, match=r"one value per row \(8\), not 3"):
        py_wire.take_rows(frame, np.array([True, False, True]))
    with pytest.raises(py_wire.WireError, match=r"must hold integers, not torch\.float32"):
        py_wire.take_rows(frame, torch.tensor([0.0, 1.0]))
    with pytest.raises(py_wire.WireError, match="must hold integers, not float64"):
        py_wire.take_rows(frame, np.array([0.0, 1.0]))
    with pytest.raises(py_wire.WireError, match=r"1-D, not of shape \(2, 2\)"):
        py_wire.take_rows(frame, np.zeros((2, 2), dtype=np.int64))
    with pytest.raises(py_wire.WireError, match="row 18446744073709551615 is out of range"):
        py_wire.take_rows(frame, np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(py_wire.WireError, match=r"rows\[0\] is 1\.5"):
        py_wire.take_rows(frame, [1.5])
    with pytest.raises(py_wire.WireError, match="sequence of ints, not set"):
        py_wire.take_rows(frame, {0, 1})  # type: ignore[arg-type]
    with pytest.raises(py_wire.WireError, match="row 8 is out of range for 8 rows"):
        py_wire.take_rows(frame, np.array([8]))


@given(
    picks=st.lists(st.integers(-8, 7), max_size=12),
    dtype=st.sampled_from(["int8", "int16", "int32", "int64", "uint8", "uint16", "uint64"]),
    as_tensor=st.booleans(),
    step=st.integers(1, 3),
)
def test_index_arrays_take_what_the_same_list_takes(batch_and_frame, picks, dtype, as_tensor, step):
    """Any integer dtype, strided or not, tensor or array: the frame a list of the same ints
    takes, byte for byte (negative rows count from the end, repeats allowed)."""
    import numpy as np

    _, frame = batch_and_frame
    if dtype.startswith("uint"):
        picks = [p % 8 for p in picks]
    wide = np.zeros(len(picks) * step, dtype=dtype)
    wide[::step] = picks
    rows = wide[::step]  # strided when step > 1
    if as_tensor and dtype not in ("uint16", "uint64"):  # torch cannot take these from numpy
        rows = torch.from_numpy(rows)
    got = py_wire.take_rows(frame, rows)
    assert bytes(memoryview(got)) == bytes(memoryview(py_wire.take_rows(frame, picks)))


#: One packed field, so the property below reads each row's segments and ids directly.
MEDIA = py_wire.Schema.from_dict(
    {"name": "media", "fields": {"img": {"tier": "packed", "dtype": "uint8", "shape": ["*", 4]}}}
)


def _identified_frame() -> tuple[py_wire.Frame, list[list[tuple[bytes, torch.Tensor]]]]:
    """Four prompts of three rows each (GRPO): prompt p has p % 2 + 1 images, every row of a
    prompt references them, each image with its own id; and each row's (id, image) list."""
    segments, ids, offsets, refs = [], [], [0], []
    for p in range(4):
        mine = []
        for j in range(p % 2 + 1):
            mine.append(len(segments))
            segments.append(torch.full((j + 1, 4), 16 * p + j, dtype=torch.uint8))
            ids.append(bytes([p + 1, j + 1]) * 8)
        for _ in range(3):
            refs.extend(mine)
            offsets.append(len(refs))
    value = py_wire.PackedTensor.from_csr(segments, offsets, refs, 0, ids)
    rows = [[(ids[s], segments[s]) for s in refs[a:b]] for a, b in itertools.pairwise(offsets)]
    return py_wire.encode({"img": value}, MEDIA), rows


@settings(max_examples=30, deadline=None)
@given(st.data())
def test_segment_identity_survives_any_sequence_of_take_rows_and_concat(data) -> None:
    """Whatever take_rows and concat do to a frame's rows (repeats, reorders, frames of one
    source joined), each row keeps its images' ids and bytes, and the frame stores each image
    (each id) once."""
    source, source_rows = _identified_frame()
    pool = [(source, list(range(source.num_rows)))]
    for _ in range(data.draw(st.integers(1, 5), label="ops")):
        if data.draw(st.booleans(), label="concat") and len(pool) > 1:
            picked = data.draw(
                st.lists(st.sampled_from(range(len(pool))), min_size=2, max_size=3),
                label="frames",
            )
            frame = py_wire.concat([pool[i][0] for i in picked])
            rows = [r for i in picked for r in pool[i][1]]
        else:
            f, f_rows = pool[data.draw(st.sampled_from(range(len(pool))), label="frame")]
            take = data.draw(
                st.lists(st.integers(0, max(len(f_rows) - 1, 0)), max_size=8)
                if f_rows
                else st.just([]),
                label="rows",
            )
            frame = py_wire.take_rows(f, take)
            rows = [f_rows[i] for i in take]
        pool.append((frame, rows))
    frame, rows = pool[-1]
    value = py_wire.decode(frame)["img"]
    segments, offsets, refs = value.csr()
    ids = value.segment_ids
    for r, src in enumerate(rows):
        mine = refs[offsets[r] : offsets[r + 1]]
        want = source_rows[src]
        assert ([] if ids is None else [ids[s] for s in mine]) == [i for i, _ in want]
        for s, (_, image) in zip(mine, want, strict=True):
            assert torch.equal(segments[s], image)
    layout = {f.name: f for f in frame.layout.fields}["img"]
    assert layout.num_segments == len({i for src in rows for i, _ in source_rows[src]})
