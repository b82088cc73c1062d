"""py_wire's PackedTensor against NeMo-RL's documented semantics: rows are logical rows (with
deduplication, a CSR map ``_row_offsets`` over ``_segment_indices`` into the physical
``tensors``), and every operation is checked against what it must do to those rows, for values
built in memory and for values decoded from a frame (zero-copy where NeMo-RL would copy).
``tests/nemo_rl_model.py`` models NeMo-RL's class for the mixed-instance cases."""

from __future__ import annotations

import itertools
import pickle

import pytest
import torch

import py_wire
from py_wire import PackedTensor
from tests.nemo_rl_model import PackedTensor as NemoModel

A, B0, B1 = torch.randn(4, 6), torch.randn(2, 6), torch.randn(3, 6)


def grpo() -> PackedTensor:
    """A GRPO group of G = 3 per prompt: prompt A with one image, prompt B with two, each
    physical segment stored once and referenced by three rows."""
    return PackedTensor(
        [A, B0, B1],
        0,
        _row_offsets=[0, 1, 2, 3, 5, 7, 9],
        _segment_indices=[0, 0, 0, 1, 2, 1, 2, 1, 2],
        _segment_provenance=[b"a" * 16, b"b" * 16, b"c" * 16],
    )


def legacy() -> PackedTensor:
    return PackedTensor([A, None, B0], 0)


def rows_of(pt: PackedTensor) -> list[list[torch.Tensor]]:
    """The logical rows, read from the public attributes as NeMo-RL defines them."""
    if pt._row_offsets is None:
        return [[] if t is None else [t] for t in pt.tensors]
    offsets, ids = pt._row_offsets, pt._segment_indices
    assert ids is not None
    return [
        [t for t in (pt.tensors[i] for i in ids[a:b]) if t is not None]
        for a, b in itertools.pairwise(offsets)
    ]


def same_rows(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> None:
    assert [len(r) for r in got] == [len(r) for r in want]
    for g, w in zip(got, want, strict=True):
        for x, y in zip(g, w, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)


def consistent(pt: PackedTensor) -> None:
    """len, counts, iteration and as_tensor all say what the logical rows say."""
    rows = rows_of(pt)
    assert len(pt) == len(rows)
    assert pt.logical_segment_counts_by_row() == [len(r) for r in rows]
    flat = [t for r in rows for t in r]
    # A legacy row without media is one None segment reference.
    same_rows([[t for t in pt.iter_logical_segments() if t is not None]], [flat])
    whole = pt.as_tensor()
    assert (whole is None) == (not flat)
    if flat:
        assert torch.equal(whole, torch.cat(flat, dim=pt.dim_to_pack))


@pytest.mark.parametrize("make", [legacy, grpo])
def test_methods_keep_nemo_rl_s_row_semantics(make) -> None:
    pt = make()
    rows = rows_of(pt)
    consistent(pt)
    for idx in ([0, 2], [2, 1, 1], torch.tensor([1, 0]), [-1]):
        picked = pt.slice(idx)
        consistent(picked)
        same_rows(rows_of(picked), [rows[int(i)] for i in idx])
    twice = PackedTensor.concat([pt, pt])
    consistent(twice)
    same_rows(rows_of(twice), rows + rows)
    for n in (3, 0):
        empty = PackedTensor.empty_rows_like(pt, n)
        assert len(empty) == n and empty.as_tensor() is None
        assert empty.dim_to_pack == pt.dim_to_pack
    assert len(PackedTensor.empty_like(pt)) == len(pt)
    assert PackedTensor.empty_like(pt).as_tensor() is None
    merged = PackedTensor.merge_segments([pt, pt])
    consistent(merged)
    cast = pt.to_dtype(torch.bfloat16)
    consistent(cast)
    same_rows(rows_of(cast), [[t.to(torch.bfloat16) for t in r] for r in rows])
    if pt.deduplication_enabled:  # a value-changing op mints new provenance
        assert cast._segment_provenance != pt._segment_provenance
        assert pt.to_dtype(torch.float32)._segment_provenance == pt._segment_provenance
        # sharing survives: still three physical segments for nine references
        assert len(cast.tensors) == 3 and cast._segment_indices == pt._segment_indices
    moved = pt.to("cpu")
    same_rows(rows_of(moved), rows)
    again = pickle.loads(pickle.dumps(pt))
    same_rows(rows_of(again), rows)
    assert again._segment_provenance == pt._segment_provenance


def test_flattened_concat_and_mixed_instances() -> None:
    p1 = NemoModel([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])], dim_to_pack=0)
    p2 = PackedTensor([torch.tensor([7, 8, 9])], dim_to_pack=0)
    flat = PackedTensor.flattened_concat([p1, p2])
    assert [t.tolist() for t in flat.tensors] == [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    assert flat.as_tensor().tolist() == list(range(1, 10))
    mixed = PackedTensor.concat([p1, p2])  # a NeMo-RL-shaped instance and ours, in one call
    assert [t.tolist() for t in mixed.tensors] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    nemo_grpo = NemoModel(
        [A, B0, B1],
        0,
        _row_offsets=[0, 1, 2, 3, 5, 7, 9],
        _segment_indices=[0, 0, 0, 1, 2, 1, 2, 1, 2],
        _segment_provenance=[b"a" * 16, b"b" * 16, b"c" * 16],
    )
    joined = PackedTensor.concat([grpo(), nemo_grpo])
    consistent(joined)
    same_rows(rows_of(joined), rows_of(grpo()) + nemo_grpo.logical_rows())
    with pytest.raises(ValueError):
        PackedTensor.concat([p2, PackedTensor([torch.ones(1)], dim_to_pack=1)])


def test_as_tensor_signature_is_nemo_rl_s() -> None:
    ours = PackedTensor([torch.ones(1, 3), torch.ones(2, 5)], 0, pad_to_max_shape=True)
    assert ours.as_tensor("cpu").shape == (3, 5)  # "cpu" is the device, not pad_to_max_shape
    assert ours.as_tensor(device="cpu").shape == (3, 5)
    plain = PackedTensor([torch.ones(1, 3), torch.ones(2, 5)], 0)
    with pytest.raises(ValueError):
        plain.as_tensor("cpu")
    assert PackedTensor([None, None], 0).as_tensor() is None
    with pytest.raises(IndexError):
        PackedTensor([torch.ones(2, 2)], 5, pad_to_max_shape=True).as_tensor()


# -- decoded values --------------------------------------------------------------------------

SCHEMA = py_wire.Schema.from_dict(
    {"name": "pv", "fields": {"pv": {"tier": "packed", "dtype": "float32", "shape": ["*", 6]}}}
)


def frame_span(frame: py_wire.Frame) -> tuple[int, int]:
    base = torch.frombuffer(frame, dtype=torch.uint8)
    return base.data_ptr(), base.data_ptr() + len(frame)


def inside(t: torch.Tensor, span: tuple[int, int]) -> bool:
    return span[0] <= t.data_ptr() < span[1]


def test_decoded_in_order_stays_a_view_after_tensors_and_iteration() -> None:
    rows = [torch.randn(2, 6), None, torch.randn(3, 6), torch.randn(1, 6)]
    frame = py_wire.encode({"pv": rows}, SCHEMA)
    pv = py_wire.decode(frame)["pv"]
    span = frame_span(frame)
    whole = pv.as_tensor()
    assert inside(whole, span)
    tensors = pv.tensors  # legacy form: one entry per row, None for none
    assert tensors[1] is None and all(inside(t, span) for t in tensors if t is not None)
    list(pv)
    pv.rows()
    again = pv.as_tensor()
    assert again.data_ptr() == whole.data_ptr() and torch.equal(
        again, torch.cat([rows[0], rows[2], rows[3]])
    )
    # tensors is one stable list: writes persist, and as_tensor() then honours them
    assert pv.tensors is tensors
    pv.tensors[0] = torch.zeros(2, 6)
    assert pv.tensors[0].abs().sum() == 0
    assert torch.equal(pv.as_tensor()[:2], torch.zeros(2, 6))
    assert not inside(pv.as_tensor(), span)


def test_decoded_slices_are_zero_copy_and_chunk_like_batched_data_dict() -> None:
    rows = [torch.randn(i % 3 + 1, 6) if i % 4 else None for i in range(12)]
    frame = py_wire.encode({"pv": rows}, SCHEMA)
    pv = py_wire.decode(frame)["pv"]
    span = frame_span(frame)
    part = pv[0:4]
    assert isinstance(part, PackedTensor) and len(part) == 4
    assert part.logical_segment_counts_by_row() == [0, 1, 1, 1]
    assert inside(part.as_tensor(), span)
    # BatchedDataDict.chunk / shard_by_batch_size: row ranges, then concatenated back
    chunks = [pv[i : i + 3] for i in range(0, 12, 3)]
    for c, start in zip(chunks, range(0, 12, 3), strict=True):
        want = [r for r in rows[start : start + 3] if r is not None]
        got = c.as_tensor()
        assert (got is None and not want) or (
            inside(got, span) and torch.equal(got, torch.cat(want))
        )
    back = PackedTensor.concat(chunks)
    assert torch.equal(back.as_tensor(), pv.as_tensor())
    assert back.logical_segment_counts_by_row() == pv.logical_segment_counts_by_row()
    picked = pv.slice([5, 1, 5])  # select_indices
    assert picked.logical_segment_counts_by_row() == [1, 1, 1]
    assert torch.equal(picked.as_tensor(), torch.cat([rows[5], rows[1], rows[5]]))
    assert pv[11] is not None and torch.equal(pv[11][0], rows[11])
    assert pv[-4] is None and len(pv[3:3]) == 0


def test_decoded_grpo_sharing_is_nemo_rl_s_dedup_csr() -> None:
    ref = grpo()
    frame = py_wire.encode({"pv": ref}, SCHEMA)
    layout = {f.name: f for f in frame.layout.fields}["pv"]
    assert (layout.num_segments, layout.num_refs) == (3, 9)  # stored once on the wire
    pv = py_wire.decode(frame)["pv"]
    assert pv.deduplication_enabled
    assert pv._row_offsets == ref._row_offsets and pv._segment_indices == ref._segment_indices
    consistent(pv)
    same_rows(rows_of(pv), rows_of(ref))
    for x, y in zip(pv.tensors, ref.tensors, strict=True):
        assert torch.equal(x, y)
    # shared after decode: rows 3 and 4 reference the same physical views
    assert pv[3][0].data_ptr() == pv[4][0].data_ptr()
    same_rows(rows_of(pv.slice([4, 5])), rows_of(ref.slice([4, 5])))
    merged = PackedTensor.concat([pv, ref])
    assert len(merged) == 12 and len(merged.tensors) == 6  # different provenance: kept apart
    again = py_wire.decode(py_wire.encode({"pv": pv}, SCHEMA))["pv"]
    assert again._segment_indices == ref._segment_indices
