"""py_wire's PackedTensor against NeMo-RL's own (``tests/nemo_rl_standin.py``: its class
verbatim): the same calls on the same data give the same results, method by method, for values
built in memory and for values decoded from a frame (zero-copy where NeMo-RL would copy)."""

from __future__ import annotations

import pickle

import pytest
import torch

import py_wire
from py_wire import PackedTensor
from tests.nemo_rl_standin import PackedTensor as Nemo

A, B0, B1 = torch.randn(4, 6), torch.randn(2, 6), torch.randn(3, 6)


def nemo_grpo() -> Nemo:
    """The docstring's worked example: prompt A one image, prompt B two, G = 3."""
    return Nemo(
        [A, B0, B1],
        0,
        _row_offsets=[0, 1, 2, 3, 5, 7, 9],
        _segment_indices=[0, 0, 0, 1, 2, 1, 2, 1, 2],
        _segment_provenance=[b"a" * 16, b"b" * 16, b"c" * 16],
    )


def ours_of(n: Nemo) -> PackedTensor:
    return PackedTensor(
        list(n.tensors),
        n.dim_to_pack,
        pad_to_max_shape=n.pad_to_max_shape,
        _row_offsets=n._row_offsets,
        _segment_indices=n._segment_indices,
        _segment_provenance=n._segment_provenance,
    )


def same(ours: PackedTensor, ref: Nemo) -> None:
    assert len(ours) == len(ref)
    assert ours.dim_to_pack == ref.dim_to_pack and ours.pad_to_max_shape == ref.pad_to_max_shape
    assert ours._row_offsets == ref._row_offsets
    assert ours._segment_indices == ref._segment_indices
    assert ours.deduplication_enabled == ref.deduplication_enabled
    assert len(ours.tensors) == len(ref.tensors)
    for x, y in zip(ours.tensors, ref.tensors, strict=True):
        assert (x is None and y is None) or torch.equal(x, y)
    assert ours.logical_segment_counts_by_row() == ref.logical_segment_counts_by_row()
    a, b = ours.as_tensor(), ref.as_tensor()
    assert (a is None and b is None) or torch.equal(a, b)


LEGACY = [A, None, B0]


@pytest.mark.parametrize("make", [lambda: Nemo(list(LEGACY), 0), nemo_grpo])
def test_methods_match_nemo(make) -> None:
    ref, ours = make(), ours_of(make())
    same(ours, ref)
    for idx in ([0, 2], [2, 1, 1], torch.tensor([1, 0]), [-1]):
        same(ours.slice(idx), ref.slice(idx))
    same(PackedTensor.concat([ours, ours]), Nemo.concat([ref, ref]))
    same(PackedTensor.empty_rows_like(ours, 3), Nemo.empty_rows_like(ref, 3))
    same(PackedTensor.empty_rows_like(ours, 0), Nemo.empty_rows_like(ref, 0))
    same(PackedTensor.empty_like(ours), Nemo.empty_like(ref))
    same(PackedTensor.merge_segments([ours, ours]), Nemo.merge_segments([ref, ref]))
    assert list(ours.iter_logical_segments()) is not None
    for x, y in zip(ours.iter_logical_segments(), ref.iter_logical_segments(), strict=True):
        assert (x is None and y is None) or torch.equal(x, y)
    cast_o, cast_r = ours.to_dtype(torch.bfloat16), ref.to_dtype(torch.bfloat16)
    same(cast_o, cast_r)
    if ref.deduplication_enabled:  # a value-changing op mints new provenance
        assert cast_o._segment_provenance != ours._segment_provenance
        assert ours.to_dtype(torch.float32)._segment_provenance == ours._segment_provenance
    same(ours.to("cpu"), ref.to("cpu"))
    same(pickle.loads(pickle.dumps(ours)), ref)


def test_flattened_concat_and_mixed_instances() -> None:
    p1 = Nemo([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])], dim_to_pack=0)
    p2 = PackedTensor([torch.tensor([7, 8, 9])], dim_to_pack=0)
    flat = PackedTensor.flattened_concat([p1, p2])
    assert [t.tolist() for t in flat.tensors] == [[1, 2, 3, 4, 5, 6], [7, 8, 9]]
    assert flat.as_tensor().tolist() == list(range(1, 10))
    mixed = PackedTensor.concat([p1, p2])  # NeMo-RL's instance and ours, in one call
    assert [t.tolist() for t in mixed.tensors] == [[1, 2, 3], [4, 5, 6], [7, 8, 9]]
    same(
        PackedTensor.concat([ours_of(nemo_grpo()), nemo_grpo()]),
        Nemo.concat([nemo_grpo(), nemo_grpo()]),
    )
    with pytest.raises(ValueError):
        PackedTensor.concat([p2, PackedTensor([torch.ones(1)], dim_to_pack=1)])


def test_as_tensor_signature_is_nemo_rl_s() -> None:
    ours = PackedTensor([torch.ones(1, 3), torch.ones(2, 5)], 0, pad_to_max_shape=True)
    assert ours.as_tensor("cpu").shape == (3, 5)  # "cpu" is the device, not pad_to_max_shape
    ref = Nemo([torch.ones(1, 3), torch.ones(2, 5)], 0, pad_to_max_shape=True)
    assert torch.equal(ours.as_tensor(device="cpu"), ref.as_tensor(device="cpu"))
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
    ref = nemo_grpo()
    frame = py_wire.encode({"pv": ref}, SCHEMA)  # NeMo-RL's object in, as is
    layout = {f.name: f for f in frame.layout.fields}["pv"]
    assert (layout.num_segments, layout.num_refs) == (3, 9)  # stored once on the wire
    pv = py_wire.decode(frame)["pv"]
    assert pv.deduplication_enabled
    assert pv._row_offsets == ref._row_offsets and pv._segment_indices == ref._segment_indices
    same(pv, Nemo(list(pv.tensors), 0, _row_offsets=pv._row_offsets,
                  _segment_indices=pv._segment_indices,
                  _segment_provenance=pv._segment_provenance))  # fmt: skip
    for x, y in zip(pv.tensors, ref.tensors, strict=True):
        assert torch.equal(x, y)
    # shared after decode: rows 3 and 4 reference the same physical views
    assert pv[3][0].data_ptr() == pv[4][0].data_ptr()
    same(pv.slice([4, 5]), ours_of(ref).slice([4, 5]))
    merged = PackedTensor.concat([pv, ref])
    assert len(merged) == 12 and len(merged.tensors) == 6  # different provenance: kept apart
    again = py_wire.decode(py_wire.encode({"pv": pv}, SCHEMA))["pv"]
    assert again._segment_indices == ref._segment_indices
