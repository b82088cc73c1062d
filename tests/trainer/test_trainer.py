"""Feeding a trainer: zero-copy row windows, padded-batch options, moving a decoded batch,
token-budget micro-batches, sequence packing and NeMo-RL's interleaved shards."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import py_wire
from py_wire.synth.registry import generate
from tests.helpers import small_text_batch, small_vlm_batch

SCHEMA = "qwen2_5_vl"


def _addr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def _frame_span(frame: py_wire.Frame) -> tuple[int, int]:
    base = py_wire._decode.FrameViews(frame).base
    return _addr(base), _addr(base) + len(frame)


def _same(x, y, k: str) -> None:
    if x is None or y is None:
        assert x is None and y is None, k
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), k
        for s, t in zip(x, y, strict=True):
            _same(s, t, k)
    else:
        assert torch.equal(x, y), k


def _rows_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k in a:
        x, y = a[k], b[k]
        if isinstance(x, py_wire.PackedTensor):
            assert len(x) == len(y)
            for r in range(len(x)):
                rx, ry = x[r], y[r]
                assert (rx is None) == (ry is None), (k, r)
                if rx is not None:
                    assert len(rx) == len(ry)
                    for s, t in zip(rx, ry, strict=True):
                        assert torch.equal(s, t), (k, r)
        elif isinstance(x, torch.Tensor) and x.is_nested:
            assert torch.equal(x.offsets(), y.offsets()), k
            assert torch.equal(x.values(), y.values()), k
        elif isinstance(x, list):
            _same(x, y, k)
        else:
            assert torch.equal(x, y), k


@pytest.fixture(scope="module")
def vlm() -> py_wire.Frame:
    return py_wire.encode(generate("qwen2_5_vl", 12), SCHEMA)


@pytest.mark.parametrize("layout", [None, "list", "padded"])
@pytest.mark.parametrize(("a", "b"), [(0, 12), (3, 7), (11, 12), (5, 5)])
def test_row_window_matches_select(vlm: py_wire.Frame, layout: str | None, a: int, b: int) -> None:
    window = py_wire.decode(vlm, rows=range(a, b), layout=layout)
    picked = py_wire.decode(py_wire.take_rows(vlm, range(a, b)), layout=layout)
    _rows_equal(window, picked)


def test_row_window_is_views_into_the_frame(vlm: py_wire.Frame) -> None:
    lo, hi = _frame_span(vlm)
    out = py_wire.decode(vlm, rows=slice(4, 9))
    full = py_wire.decode(vlm)
    ids = out["input_ids"]
    assert lo <= _addr(ids.values()) < hi
    start = int(full["input_ids"].offsets()[4])
    assert _addr(ids.values()) == _addr(full["input_ids"].values()[start:])
    assert _addr(out["reward"]) == _addr(full["reward"][4:])
    for r in range(5):
        row = out["pixel_values"][r]
        if row is not None:
            for seg, whole in zip(row, full["pixel_values"][r + 4], strict=True):
                assert _addr(seg) == _addr(whole)
    in_order = {f.name: f.in_order for f in vlm.layout.fields}
    if in_order["pixel_values"]:  # stored in row order: the window is one view, no copy
        assert lo <= _addr(out["pixel_values"].as_tensor()) < hi
    text = py_wire.encode(small_text_batch((3, 4, 5)), "text_grpo")
    lo, hi = _frame_span(text)
    assert lo <= _addr(py_wire.decode(text, rows=range(1, 3))["input_ids"].values()) < hi


def test_row_window_shared_segments_stay_shared() -> None:
    frame = py_wire.encode(small_vlm_batch(), SCHEMA)  # rows 0 and 2 share an image
    out = py_wire.decode(frame, rows=range(1, 3))
    full = py_wire.decode(frame)
    assert _addr(out["pixel_values"][1][1]) == _addr(full["pixel_values"][0][0])
    assert out["pixel_values"][0] is None
    # Re-encoding the window sends only its rows.
    again = py_wire.decode(py_wire.encode(out, SCHEMA))
    _rows_equal(again, py_wire.decode(py_wire.take_rows(frame, range(1, 3))))


def test_row_window_errors(vlm: py_wire.Frame) -> None:
    with pytest.raises(py_wire.WireError, match="contiguous"):
        py_wire.decode(vlm, rows=range(0, 6, 2))
    with pytest.raises(TypeError, match="rows must be a range or a slice"):
        py_wire.decode(vlm, rows=[1, 2])  # type: ignore[arg-type]
    # One row rule (issue 27): a range names rows, which must exist; a slice clamps.
    with pytest.raises(py_wire.RowIndexError, match="row 98 is out of range for 12 rows"):
        py_wire.decode(vlm, rows=range(10, 99))
    assert py_wire.decode(vlm, rows=slice(10, 99))["reward"].shape == (2,)


def test_padded_options() -> None:
    frame = py_wire.encode(small_text_batch((5, 0, 7)), "text_grpo")
    out = py_wire.decode(
        frame,
        layout="padded",
        pad_to_multiple_of=4,
        pad_values={"input_ids": 99},
        attention_mask=True,
    )
    ids, mask = out["input_ids"], out["attention_mask"]
    assert ids.shape == (3, 8) and mask.shape == (3, 8) and mask.dtype == torch.bool
    assert mask.sum(1).tolist() == [5, 0, 7]
    assert (ids[~mask] == 99).all()
    assert torch.equal(ids[2, :7], torch.arange(7) + 10)
    assert (out["advantages"][~mask] == 0).all()  # the schema's pad value, not overridden
    plain = py_wire.decode(frame, layout="padded")
    assert plain["input_ids"].shape == (3, 7)
    window = py_wire.decode(frame, rows=range(0, 2), layout="padded", attention_mask=True)
    assert window["attention_mask"].shape == (2, 5)
    with pytest.raises(py_wire.WireError, match="pad_values"):
        py_wire.decode(frame, layout="padded", pad_values={"reward": 1})
    with pytest.raises(py_wire.WireError, match="pad_to_multiple_of"):
        py_wire.decode(frame, layout="padded", pad_to_multiple_of=0)
    with pytest.raises(py_wire.WireError, match="pad_to_multiple_of"):
        py_wire.decode(frame, pad_to_multiple_of=8)


def _leaves(x: Any) -> list[torch.Tensor]:
    """Every tensor a decoded batch holds: packed rows' segments, lists' rows, nested values."""
    if isinstance(x, py_wire.PackedTensor):
        return [x.as_tensor()] + [s for r in x.rows() for s in (r or [])]
    if isinstance(x, dict):
        return [t for v in x.values() for t in _leaves(v)]
    if isinstance(x, list | tuple):
        return [t for v in x for t in _leaves(v)]
    if x is None:
        return []
    assert isinstance(x, torch.Tensor)
    return [x.values(), x.offsets()] if x.is_nested else [x]


def test_to_device_moves_every_kind(vlm: py_wire.Frame, monkeypatch: pytest.MonkeyPatch) -> None:
    # The host is CI's one device with data, where Tensor.to returns the tensor itself: here it
    # copies, so each kind (packed, jagged per-token, scalar; the list layout's rows) must come
    # back in new memory, shapes, dtypes and values kept.
    real_to = torch.Tensor.to
    monkeypatch.setattr(
        torch.Tensor, "to", lambda self, *args, **kw: real_to(self, *args, **{**kw, "copy": True})
    )
    for layout in ("nested", "list"):
        out = py_wire.decode(vlm, layout=layout)  # type: ignore[arg-type]
        moved = py_wire.trainer.to(out, "cpu")
        assert moved.keys() == out.keys()
        kinds = {type(v).__name__ for v in moved.values()}
        nested = {"PackedTensor", "NestedTensor", "Tensor"}
        assert kinds == (nested if layout == "nested" else {"list", "Tensor"})
        before, after = _leaves(out), _leaves(moved)
        assert len(after) == len(before) > 0
        for a, b in zip(before, after, strict=True):
            assert (a.shape, a.dtype) == (b.shape, b.dtype) and torch.equal(a, b)
            moved_away = b.untyped_storage().data_ptr() != a.untyped_storage().data_ptr()
            assert b.numel() == 0 or moved_away, b
    monkeypatch.undo()
    # The values survive a move (to the host itself: the one device whose bytes can be read).
    out = py_wire.decode(vlm)
    _rows_equal(py_wire.trainer.to(out, torch.device("cpu")), out)
    if torch.cuda.is_available():  # pragma: no cover - no GPU in CI
        on_gpu = py_wire.trainer.to(out, "cuda", non_blocking=True, pin_memory=True)
        assert on_gpu["reward"].is_cuda and on_gpu["input_ids"].is_cuda
        assert on_gpu["pixel_values"].as_tensor().is_cuda
        _rows_equal(py_wire.trainer.to(on_gpu, "cpu"), out)
    else:
        with pytest.raises(py_wire.WireError, match="CUDA"):
            py_wire.trainer.to(out, "cpu", pin_memory=True)


@pytest.mark.parametrize("device", ["meta", torch.device("meta")], ids=["str", "torch.device"])
def test_a_device_that_holds_no_data_is_refused(vlm: py_wire.Frame, device: Any) -> None:
    """A batch moved to ``meta`` has shapes and dtypes but no values: refused by name, never
    handed to a trainer (issue 40, item 11)."""
    out = py_wire.decode(vlm)
    packed = out["pixel_values"]
    calls = [
        lambda: py_wire.trainer.to(out, device),
        lambda: list(py_wire.trainer.iter_micro_batches(vlm, 4, device=device)),
        lambda: packed.to(device),
        lambda: packed.as_tensor(device=device),
    ]
    for call in calls:
        with pytest.raises(py_wire.WireError, match="device meta holds no data"):
            call()


def test_micro_batches(vlm: py_wire.Frame) -> None:
    lengths = torch.diff(py_wire.decode(vlm)["input_ids"].offsets()).tolist()
    budget = 2 * max(lengths)
    for sort in (False, True):
        for padded in (True, False):
            groups = py_wire.trainer.micro_batches(vlm, budget, sort=sort, padded=padded)
            assert sorted(i for g in groups for i in g) == list(range(12))
            for g in groups:
                ls = [lengths[i] for i in g]
                assert (len(g) * max(ls) if padded else sum(ls)) <= budget
            if sort:
                flat = [lengths[i] for g in groups for i in g]
                assert flat == sorted(flat)
            else:
                # In order: contiguous ranges, decodable as views.
                assert [i for g in groups for i in g] == list(range(12))
    with pytest.raises(py_wire.WireError, match="more than max_tokens"):
        py_wire.trainer.micro_batches(vlm, max(lengths) - 1)


def test_pack_sequences(vlm: py_wire.Frame) -> None:
    lengths = torch.diff(py_wire.decode(vlm)["input_ids"].offsets())
    cap = int(lengths.max()) + 100
    bins = py_wire.trainer.pack_sequences(vlm, cap)
    assert sorted(r for b in bins for r in b.rows) == list(range(12))
    for b in bins:
        assert b.num_tokens <= cap
        assert torch.equal(b.lengths, lengths[b.rows])
        assert b.cu_seqlens.dtype == torch.int32
        assert torch.equal(b.cu_seqlens[1:].long(), torch.cumsum(b.lengths, 0))
        expect = torch.cat([torch.arange(int(n)) for n in b.lengths])
        assert torch.equal(b.position_ids, expect)
    # First-fit decreasing: the first row placed is the longest.
    assert int(lengths[bins[0].rows[0]]) == int(lengths.max())
    text = py_wire.encode(small_text_batch((4, 8, 1, 4, 2, 1)), "text_grpo")
    assert [b.rows for b in py_wire.trainer.pack_sequences(text, 10)] == [[1, 4], [0, 3, 2, 5]]
    rounded = py_wire.trainer.pack_sequences(text, 10, pad_to_multiple_of=4)
    assert all(sum(-(-int(n) // 4) * 4 for n in b.lengths) <= 10 for b in rounded)


def _nemo_shard(rows: list[int], shards: int, batch_size: int | None, uneven: bool) -> list[list]:
    """NeMo-RL's shard_by_batch_size index arithmetic (batched_data_dict.py), for a list."""
    total = len(rows)
    batch_size = total if batch_size is None else batch_size
    chunks = total // batch_size
    size = (batch_size + shards - 1) // shards if uneven else batch_size // shards
    out = []
    for s in range(shards):
        picked = []
        for c in range(chunks):
            a, b = c * batch_size + s * size, c * batch_size + (s + 1) * size
            if uneven:
                a, b = min(a, total), min(b, total)
            picked.extend(rows[a:b])
        out.append(picked)
    return out


@pytest.mark.parametrize(
    ("n", "world", "batch_size", "uneven"),
    [
        (8, 2, 4, False),
        (8, 2, None, False),
        (12, 3, 6, False),
        (5, 2, None, True),
        (7, 3, None, True),
    ],
)
def test_interleaved_shard_matches_nemo_rl(n: int, world: int, batch_size, uneven: bool) -> None:
    frame = py_wire.encode(small_text_batch(tuple(range(1, n + 1))), "text_grpo")
    expect = _nemo_shard(list(range(n)), world, batch_size, uneven)
    for rank in range(world):
        part = py_wire.shard(frame, rank, world, batch_size=batch_size, allow_uneven=uneven)
        assert py_wire.decode(part)["reward"].tolist() == [float(i) for i in expect[rank]]
    with pytest.raises(py_wire.WireError):
        py_wire.shard(frame, 0, world, batch_size=n + 1)


def test_row_window_in_order_packed_is_one_view() -> None:
    batch = small_vlm_batch()
    batch["pixel_values"] = [
        torch.randn(8, 1176),
        None,
        [torch.randn(4, 1176), torch.randn(8, 1176)],
    ]
    frame = py_wire.encode(batch, SCHEMA)
    assert {f.name: f.in_order for f in frame.layout.fields}["pixel_values"]
    lo, hi = _frame_span(frame)
    for a, b in [(0, 3), (1, 3), (2, 3), (0, 1), (1, 2)]:
        window = py_wire.decode(frame, rows=range(a, b))
        _rows_equal(window, py_wire.decode(py_wire.take_rows(frame, range(a, b))))
        pv = window["pixel_values"].as_tensor()
        expect = [
            t
            for r in batch["pixel_values"][a:b]
            if r is not None
            for t in (r if isinstance(r, list) else [r])
        ]
        if expect:
            assert torch.equal(pv, torch.cat(expect))
            assert lo <= _addr(pv) < hi  # a view of the frame, not a concatenation
        else:
            assert pv is None
