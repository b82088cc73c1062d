"""py_wire's PackedTensor: rows of 0..k segments in CSR form (``segments``, ``row_offsets`` over
``row_segments``), a segment several rows use stored once. Every operation is checked against
what it must do to the rows, for values built in memory and for values decoded from a frame
(views of the frame where possible). NeMo-RL's class converts to and from it in
``py_wire.interop.nemo_rl`` (tests/interop/test_nemo_rl.py)."""

from __future__ import annotations

import pickle
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire import PackedTensor, RowIndexError, WireError

A, B0, B1 = torch.randn(4, 6), torch.randn(2, 6), torch.randn(3, 6)


def grpo() -> PackedTensor:
    """A GRPO group of G = 3 per prompt: prompt A with one image, prompt B with two, each
    segment stored once and referenced by three rows."""
    return PackedTensor.from_csr([A, B0, B1], [0, 1, 2, 3, 5, 7, 9], [0, 0, 0, 1, 2, 1, 2, 1, 2])


def plain() -> PackedTensor:
    return PackedTensor([A, None, [B0, B1]], 0)


def rows_of(pt: PackedTensor) -> list[list[torch.Tensor]]:
    """The rows, read from the CSR tables as the type defines them."""
    segments, offsets, refs = pt.csr()
    return [[segments[i] for i in refs[offsets[r] : offsets[r + 1]]] for r in range(len(pt))]


def same_rows(got: list[list[torch.Tensor]], want: list[list[torch.Tensor]]) -> None:
    assert [len(r) for r in got] == [len(r) for r in want]
    for g, w in zip(got, want, strict=True):
        for x, y in zip(g, w, strict=True):
            assert x.dtype == y.dtype and torch.equal(x, y)


def consistent(pt: PackedTensor) -> None:
    """len, counts, indexing, iteration and as_tensor all say what the CSR tables say."""
    rows = rows_of(pt)
    assert len(pt) == len(rows)
    assert pt.segment_counts() == [len(r) for r in rows]
    assert pt.num_segments == sum(len(r) for r in rows)
    same_rows([r or [] for r in pt.rows()], rows)
    same_rows([r or [] for r in pt], rows)
    same_rows([pt[i] or [] for i in range(len(pt))], rows)
    assert all((pt[i] is None) == (not rows[i]) for i in range(len(pt)))
    flat = [t for r in rows for t in r]
    whole = pt.as_tensor()
    assert (whole is None) == (not flat)
    if flat:
        assert torch.equal(whole, torch.cat(flat, dim=pt.dim_to_pack))


def test_rows_that_hold_one_tensor_share_its_segment() -> None:
    pt = PackedTensor([A, [A, B0], None, B0, []], 0)
    segments, offsets, refs = pt.csr()
    assert len(segments) == 2 and segments[0] is A and segments[1] is B0
    assert offsets == [0, 1, 3, 3, 4, 4] and refs == [0, 0, 1, 1]
    consistent(pt)


@pytest.mark.parametrize("make", [plain, grpo])
def test_operations_keep_the_rows(make) -> None:
    pt = make()
    rows = rows_of(pt)
    consistent(pt)
    for idx in ([0, 2], [2, 1, 1], torch.tensor([1, 0]), [-1], range(0, 3, 2)):
        picked = pt.slice(idx)
        consistent(picked)
        same_rows(rows_of(picked), [rows[int(i)] for i in idx])
        # rows picked twice, and rows sharing a segment, still reference it once
        assert len(picked.segments) == len({id(t) for r in rows_of(picked) for t in r})
    same_rows(rows_of(pt[1:]), rows[1:])
    twice = PackedTensor.concat([pt, pt])
    consistent(twice)
    same_rows(rows_of(twice), rows + rows)
    assert len(twice.segments) == len(pt.segments)  # the same tensors: stored once
    moved = pt.to("cpu")
    assert moved is not pt
    same_rows(rows_of(moved), rows)
    again = pickle.loads(pickle.dumps(pt))
    same_rows(rows_of(again), rows)
    assert again.csr()[1:] == pt.csr()[1:]  # sharing survives pickling


def test_from_csr_refuses_tables_that_do_not_describe_rows() -> None:
    with pytest.raises(py_wire.WireError, match="start at 0"):
        PackedTensor.from_csr([A], [1, 1], [])
    with pytest.raises(py_wire.WireError, match="decrease at row 1"):
        PackedTensor.from_csr([A], [0, 1, 0], [0])
    with pytest.raises(py_wire.WireError, match="end at 1, not at the 2"):
        PackedTensor.from_csr([A], [0, 1], [0, 0])
    with pytest.raises(py_wire.WireError, match=r"row_segments\[1\] is 3: out of range"):
        PackedTensor.from_csr([A], [0, 2], [0, 3])
    with pytest.raises(TypeError, match=r"segments\[0\] must be a tensor"):
        PackedTensor.from_csr([None], [0, 1], [0])
    with pytest.raises(TypeError, match="rows must be a list"):
        PackedTensor(A)
    with pytest.raises(TypeError, match=r"rows\[1\]\[0\] must be a tensor"):
        PackedTensor([A, [None]])


def test_concat_refuses_other_values_and_pack_dims() -> None:
    with pytest.raises(py_wire.WireError, match="different dims"):
        PackedTensor.concat([plain(), PackedTensor([torch.ones(1, 6)], dim_to_pack=1)])
    with pytest.raises(TypeError, match=r"values\[1\] must be a PackedTensor"):
        PackedTensor.concat([plain(), [A]])
    with pytest.raises(py_wire.WireError, match="at least one"):
        PackedTensor.concat([])


def test_as_tensor_pads_on_request_and_names_what_differs() -> None:
    pt = PackedTensor([torch.ones(1, 3), torch.ones(2, 5)], 0)
    assert pt.as_tensor("cpu", pad_to_max_shape=True).shape == (3, 5)
    with pytest.raises(py_wire.BatchError, match=r"row 1 segment 0.*dim 1 is 5, not 3"):
        pt.as_tensor("cpu")
    assert PackedTensor([None, None], 0).as_tensor() is None
    with pytest.raises(IndexError):
        PackedTensor([torch.ones(2, 2)], 5).as_tensor(pad_to_max_shape=True)


# -- decoded values --------------------------------------------------------------------------

SCHEMA = py_wire.Schema.from_dict(
    {"name": "pv", "fields": {"pv": {"tier": "packed", "dtype": "float32", "shape": ["*", 6]}}}
)


def frame_span(frame: py_wire.Frame) -> tuple[int, int]:
    base = torch.frombuffer(frame, dtype=torch.uint8)
    return base.data_ptr(), base.data_ptr() + len(frame)


def inside(t: torch.Tensor, span: tuple[int, int]) -> bool:
    return span[0] <= t.data_ptr() < span[1]


def test_decoded_in_order_stays_a_view_after_reading_segments_and_rows() -> None:
    rows = [torch.randn(2, 6), None, torch.randn(3, 6), torch.randn(1, 6)]
    frame = py_wire.encode({"pv": rows}, SCHEMA)
    pv = py_wire.decode(frame)["pv"]
    span = frame_span(frame)
    whole = pv.as_tensor()
    assert inside(whole, span)
    segments, offsets, refs = pv.csr()
    assert offsets == [0, 1, 1, 2, 3] and refs == [0, 1, 2]
    assert all(inside(t, span) for t in segments)
    list(pv)
    pv.rows()
    again = pv.as_tensor()
    assert again.data_ptr() == whole.data_ptr() and torch.equal(
        again, torch.cat([rows[0], rows[2], rows[3]])
    )
    # the lists handed out are copies: editing one changes nothing
    pv.segments.clear()
    assert len(pv.segments) == 3


def test_decoded_slices_are_zero_copy_and_concatenate_back() -> None:
    rows = [torch.randn(i % 3 + 1, 6) if i % 4 else None for i in range(12)]
    frame = py_wire.encode({"pv": rows}, SCHEMA)
    pv = py_wire.decode(frame)["pv"]
    span = frame_span(frame)
    part = pv[0:4]
    assert isinstance(part, PackedTensor) and len(part) == 4
    assert part.segment_counts() == [0, 1, 1, 1]
    assert inside(part.as_tensor(), span)
    chunks = [pv[i : i + 3] for i in range(0, 12, 3)]
    for c, start in zip(chunks, range(0, 12, 3), strict=True):
        want = [r for r in rows[start : start + 3] if r is not None]
        got = c.as_tensor()
        assert (got is None and not want) or (
            inside(got, span) and torch.equal(got, torch.cat(want))
        )
    back = PackedTensor.concat(chunks)
    assert torch.equal(back.as_tensor(), pv.as_tensor())
    assert back.segment_counts() == pv.segment_counts()
    picked = pv.slice([5, 1, 5])
    assert picked.segment_counts() == [1, 1, 1] and len(picked.segments) == 2
    assert torch.equal(picked.as_tensor(), torch.cat([rows[5], rows[1], rows[5]]))
    assert pv[11] is not None and torch.equal(pv[11][0], rows[11])
    assert pv[-4] is None and len(pv[3:3]) == 0


def test_decoded_grpo_sharing_is_kept() -> None:
    ref = grpo()
    frame = py_wire.encode({"pv": ref}, SCHEMA)
    layout = {f.name: f for f in frame.layout.fields}["pv"]
    assert (layout.num_segments, layout.num_refs) == (3, 9)  # stored once on the wire
    pv = py_wire.decode(frame)["pv"]
    assert pv.csr()[1:] == ref.csr()[1:]
    consistent(pv)
    same_rows(rows_of(pv), rows_of(ref))
    # shared after decode: rows 3 and 4 reference the same bytes
    assert pv[3][0].data_ptr() == pv[4][0].data_ptr()
    same_rows(rows_of(pv.slice([4, 5])), rows_of(ref.slice([4, 5])))
    # views of the same bytes (two slices of one decoded value) are stored once again
    halves = PackedTensor.concat([pv[:4], pv[4:]])
    assert len(halves.segments) == 3 and halves.csr()[1:] == ref.csr()[1:]
    merged = PackedTensor.concat([pv, ref])  # other bytes: kept apart
    assert len(merged) == 12 and len(merged.segments) == 6
    again = py_wire.decode(py_wire.encode({"pv": halves}, SCHEMA))["pv"]
    assert again.csr()[1:] == ref.csr()[1:]


IDS = [b"A" * 16, b"B" * 16, b"C" * 16]


def test_segment_ids_travel_with_the_segments() -> None:
    """Ids survive slice, to, pickle and encode/decode; concat interns by id (two decoded
    frames of one group's media) as it interns views of the same bytes."""
    ref = PackedTensor.from_csr([A, B0, B1], grpo().row_offsets, grpo().row_segments, 0, IDS)
    assert ref.segment_ids == IDS and grpo().segment_ids is None
    assert ref.slice([5, 0]).segment_ids == [IDS[1], IDS[2], IDS[0]]
    assert ref.to("cpu").segment_ids == IDS
    assert pickle.loads(pickle.dumps(ref)).segment_ids == IDS
    halves = [py_wire.decode(py_wire.encode({"pv": ref[a:b]}, SCHEMA))["pv"] for a, b in
              ((0, 4), (4, 6))]  # fmt: skip
    joined = PackedTensor.concat(halves)
    assert len(joined.segments) == 3 and joined.csr()[1:] == ref.csr()[1:]
    assert joined.segment_ids == IDS
    same_rows(rows_of(joined), rows_of(ref))
    # a decoded value re-encodes its table; pickled, it keeps it
    frame = py_wire.encode({"pv": halves[1]}, SCHEMA)
    assert {f.name: f for f in frame.layout.fields}["pv"].seg_ids is not None
    assert pickle.loads(pickle.dumps(halves[1])).segment_ids == IDS[1:]
    # without ids, other memory stays apart (the bytes are never compared)
    plain = [py_wire.decode(py_wire.encode({"pv": grpo()[a:b]}, SCHEMA))["pv"] for a, b in
             ((0, 4), (4, 6))]  # fmt: skip
    assert len(PackedTensor.concat(plain).segments) == 5  # B0, B1 in both halves
    # a segment without an id beside ones with: None
    mixed = PackedTensor.from_csr([A, B0], [0, 1, 2], [0, 1], 0, [None, IDS[1]])
    assert mixed.segment_ids == [None, IDS[1]]


@pytest.mark.parametrize(
    ("ids", "error", "match"),
    [
        ([b"A" * 16], py_wire.BatchError, "1 entries for 3 segments"),
        ([b"A" * 16, b"B" * 15, None], py_wire.BatchError, r"segment_ids\[1\] has 15 bytes"),
        ([b"A" * 16, "B" * 16, None], TypeError, r"segment_ids\[1\] must be bytes"),
    ],
)
def test_bad_segment_ids_are_refused_by_name(ids: list, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        PackedTensor.from_csr([A, B0, B1], [0, 3], [0, 1, 2], 0, ids)


def test_one_id_on_two_shapes_is_a_batch_error_naming_the_row() -> None:
    value = PackedTensor.from_csr([A, B0], [0, 1, 2], [0, 1], 0, [IDS[0], IDS[0]])
    with pytest.raises(py_wire.BatchError, match="one id names one segment") as err:
        py_wire.encode({"pv": value}, SCHEMA)
    assert (err.value.field, err.value.row) == ("pv", 1)


def test_as_tensor_pad_to_max_shape_is_bounded() -> None:
    pt = PackedTensor([torch.empty(2**40, 0), torch.empty(0, 2**40)])
    with pytest.raises(WireError, match="pad_to_max_shape"):
        pt.as_tensor(pad_to_max_shape=True)
    small = PackedTensor([torch.ones(1, 2), torch.ones(2, 3)])
    assert tuple(small.as_tensor(pad_to_max_shape=True).shape) == (3, 3)


@pytest.mark.parametrize(
    ("device", "error"),
    [("bogus", WireError), (-1, WireError), (2**63, WireError), (1.5, TypeError)],
)
def test_as_tensor_device_is_checked(device: Any, error: type[Exception]) -> None:
    pt = PackedTensor([torch.ones(2, 3)])
    with pytest.raises(error, match="device"):
        pt.as_tensor(device=device)
    with pytest.raises(error, match="device"):
        pt.to(device)


def test_packed_tensor_indexing_by_tensors_and_arrays() -> None:
    pt = PackedTensor([torch.zeros(2, 3), None, torch.ones(1, 3)])
    assert pt[torch.tensor(2)][0].shape == (1, 3)
    assert len(pt[torch.tensor([0, 1])]) == 2
    assert len(pt[np.array([2, 0])]) == 2
    with pytest.raises(IndexError, match="index: PackedTensor row 3 is out of range for 3 rows"):
        pt[3]
    with pytest.raises(RowIndexError):
        pt.slice([0, 5])
