"""The second hop: decoded data behaves like freshly allocated tensors downstream.

Every tensor ``decode`` returns has a storage of exactly its own bytes, so a shard, a row or a
micro-batch that is pickled, saved or deep-copied carries what it references, not the frame.
A read-only source backed by a shared file mapping decodes copy-on-write (zero-copy, and a write
never reaches the source); every other read-only source decodes into private memory, index
tables included. Micro-batches are views of one decoded frame."""

from __future__ import annotations

import copy
import io
import itertools
import mmap
import os
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch

import py_wire
from py_wire.synth.registry import generate
from tests import nemo_rl_model
from tests.helpers import mapping_of

SCHEMA = "qwen2_5_vl"


@pytest.fixture(scope="module")
def vlm() -> py_wire.Frame:
    return py_wire.encode(generate(SCHEMA, 12, seed=2), SCHEMA)  # media rows and text rows


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    """Every tensor a decoded value holds, nested tensors' values and offsets included."""
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            yield value.values()
            yield value.offsets()
        else:
            yield value
    elif isinstance(value, py_wire.PackedTensor):
        yield from value.segments
        whole = value.as_tensor()
        if whole is not None:
            yield whole
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)


OPTIONS = [
    {},
    {"layout": "list"},
    {"layout": "padded", "attention_mask": True},
    {"stage": "logprob"},
    {"source_dtype": True},
    {"rows": range(3, 9)},
    {"rows": range(3, 9), "layout": "list"},
]


@pytest.mark.parametrize("options", OPTIONS, ids=str)
@pytest.mark.parametrize("writable", ["auto", "view", "copy"])
def test_every_decoded_tensor_owns_exactly_its_bytes(
    vlm: py_wire.Frame, options: dict[str, Any], writable: str
) -> None:
    out = py_wire.decode(vlm, writable=writable, **options)  # type: ignore[arg-type]
    seen = 0
    for t in _tensors(out):
        assert t.untyped_storage().nbytes() == t.nbytes, (t.shape, t.dtype)
        seen += 1
    assert seen >= len(out)


def test_row_window_packed_rows_own_their_segments(vlm: py_wire.Frame) -> None:
    out = py_wire.decode(vlm, rows=range(2, 5))
    for row in out["pixel_values"]:
        for seg in row or []:
            assert seg.untyped_storage().nbytes() == seg.nbytes


def _shard(batch: dict[str, Any], rows: range) -> dict[str, Any]:
    """What ``BatchedDataDict.slice`` does: tensors sliced, PackedTensors ``slice``d."""
    return {
        k: v.slice(list(rows)) if hasattr(v, "tensors") else v[rows.start : rows.stop]
        for k, v in batch.items()
    }


def test_a_shard_of_a_decoded_nemo_rl_batch_pickles_like_the_original(
    vlm: py_wire.Frame, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys
    import types

    pkg, data = types.ModuleType("nemo_rl"), types.ModuleType("nemo_rl.data")
    monkeypatch.setitem(sys.modules, "nemo_rl", pkg)
    monkeypatch.setitem(sys.modules, "nemo_rl.data", data)
    monkeypatch.setitem(sys.modules, "nemo_rl.data.multimodal_utils", nemo_rl_model)
    from py_wire.interop import nemo_rl

    original = nemo_rl.from_frame(py_wire.Frame.from_buffer(bytearray(bytes(vlm))))
    fresh = {
        k: copy.deepcopy(v) if not isinstance(v, torch.Tensor) else v.clone()
        for k, v in original.items()
    }
    for source in (vlm, bytes(vlm)):
        decoded = nemo_rl.from_frame(source)
        for rows in (range(0, 3), range(8, 12)):  # a group sharing one image; text rows
            shard = _shard(decoded, rows)
            size = len(pickle.dumps(shard, protocol=5))
            want = len(pickle.dumps(_shard(fresh, rows), protocol=5))
            assert size <= 1.2 * want, (rows, size, want, vlm.nbytes)
            buf = io.BytesIO()
            torch.save(shard, buf)
            assert buf.tell() <= 1.2 * want + 65536
        # Text rows: the padded [B, L] fields, as for the original, and none of the media.
        assert len(pickle.dumps(_shard(decoded, range(8, 12)))) < vlm.nbytes / 20


@pytest.mark.parametrize("layout", ["nested", "list", "padded"])
def test_pickled_and_deepcopied_rows_carry_only_themselves(vlm: py_wire.Frame, layout: str) -> None:
    out = py_wire.decode(vlm, layout=layout)  # type: ignore[arg-type]
    row = out["pixel_values"][0]
    assert row is not None
    nbytes = sum(s.nbytes for s in row)
    assert len(pickle.dumps(row)) < nbytes + 4096
    assert sum(s.nbytes for s in copy.deepcopy(row)) == nbytes
    reward = out["reward"][:2]
    assert len(pickle.dumps(reward)) < 2048


def test_a_read_only_mmap_decodes_from_a_private_copy(vlm: py_wire.Frame, tmp_path: Path) -> None:
    """A read-only mapping of a file (here and under /dev/shm) is not pinned by anyone: its
    owner may rewrite or truncate the file after the decode returned. The default decode
    copies it (never a mapping of the file's pages), a write stays in this process, and every
    other reader still sees the file's bytes."""
    dirs = [tmp_path] + ([Path("/dev/shm")] if Path("/dev/shm").is_dir() else [])
    for where in dirs:
        path = where / f"py_wire_cow_{os.getpid()}.frame"
        py_wire.save(vlm, path)
        try:
            with open(path, "rb") as f:
                source = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            frame = py_wire.Frame.from_buffer(source)
            assert frame.storage == "readonly-buffer" and frame.pinned_by is None
            assert frame.copy_on_write() is None
            assert "does not keep its bytes unchanged" in (frame.copy_on_write_refusal() or "")
            out = py_wire.decode(source)
            pixels = out["pixel_values"].segments[0]
            line = mapping_of(pixels.data_ptr())
            inode = str(os.stat(path).st_ino)
            assert line.split()[4] != inode, line  # not the file's pages: a private copy
            pixels.add_(1)
            out["input_ids"].offsets().add_(1)
            out["reward"].zero_()
            assert bytes(source) == bytes(vlm)
            assert path.read_bytes() == bytes(vlm)
            again = py_wire.decode(source, writable="view")
            assert torch.equal(again["reward"], py_wire.decode(vlm)["reward"])
            del out, pixels, again, frame
            source.close()
        finally:
            path.unlink()


def test_copy_on_write_refuses_memory_it_cannot_remap(vlm: py_wire.Frame) -> None:
    raw = py_wire.Frame.from_buffer(bytes(vlm))
    assert raw.storage == "readonly-buffer"
    assert raw.copy_on_write() is None
    # Nobody pins a bytes object's memory for py_wire (only Ray's object store does).
    refusal = raw.copy_on_write_refusal() or ""
    assert "does not keep its bytes unchanged" in refusal, refusal
    assert vlm.copy_on_write() is None  # py_wire's own memory is already writable
    assert vlm.storage == "owned"


@pytest.mark.parametrize(
    "options",
    [
        {"stage": "logprob"},
        {"source_dtype": True},
        {"attention_mask": True},
        {"rows": range(1, 4)},
        {"rows": range(1, 4), "layout": "list"},
        {"stage": "train", "layout": "padded", "attention_mask": True},
        {},
    ],
    ids=str,
)
def test_no_tensor_from_a_read_only_source_reaches_it(
    vlm: py_wire.Frame, options: dict[str, Any], tmp_path: Path
) -> None:
    """Finding 4 of issue 15: under the default policy nothing returned may view a read-only
    source: not values, not offsets, not CSR tables (bytes and a read-only mmap alike)."""
    path = tmp_path / "f.frame"
    py_wire.save(vlm, path)
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    raw = bytes(vlm)
    for source in (raw, mapped):
        frame = py_wire.Frame.from_buffer(source)
        start = _address(source)
        end = start + len(frame)
        out = py_wire.decode(source, **options)
        for t in _tensors(out):
            if t.nbytes:
                assert not (start <= t.data_ptr() < end), (options, t.shape)
        for t in _tensors(out):
            t.zero_() if t.dtype != torch.bool else t.logical_not_()
        assert bytes(source[: len(raw)]) == raw
        del frame, out
    mapped.close()


def _address(source: Any) -> int:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.frombuffer(source, dtype=torch.uint8).data_ptr()


# -- row selection: one rule -----------------------------------------------------------------


@pytest.mark.parametrize(
    "rows",
    [
        slice(None, None, -1),
        range(2, -1, -1),
        slice(None, None, -2),
        range(0, 6, 2),
        slice(1, 8, 3),
    ],
    ids=str,
)
def test_reversed_or_strided_windows_are_errors(vlm: py_wire.Frame, rows: Any) -> None:
    with pytest.raises(py_wire.WireError, match="rows="):
        py_wire.decode(vlm, rows=rows)


def test_row_selection_arguments(vlm: py_wire.Frame) -> None:
    with pytest.raises(TypeError, match="rows: slice bounds must be ints"):
        py_wire.decode(vlm, rows=slice("a", "b"))  # type: ignore[arg-type]
    with pytest.raises(py_wire.WireError, match="step cannot be zero"):
        py_wire.take_rows(vlm, slice(None, None, 0))
    with pytest.raises(py_wire.RowIndexError, match="row -3 is out of range for 12 rows"):
        py_wire.decode(vlm, rows=range(-3, 2))
    reversed_frame = py_wire.take_rows(vlm, slice(None, None, -1))
    assert py_wire.decode(reversed_frame)["reward"].tolist() == (
        py_wire.decode(vlm)["reward"].flip(0).tolist()
    )
    # One row, any step: a window of that row.
    assert py_wire.decode(vlm, rows=slice(4, 3, -1))["reward"].shape == (1,)
    assert py_wire.decode(vlm, rows=slice(12, 40))["reward"].shape == (0,)
    with pytest.raises(py_wire.RowIndexError, match="row 12 is out of range for 12 rows"):
        py_wire.decode(vlm, rows=range(12, 40))  # a range names rows: one row rule (issue 27)


# -- micro-batches ---------------------------------------------------------------------------


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and a.is_nested:
        return torch.equal(a.values(), b.values()) and torch.equal(a.offsets(), b.offsets())
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, py_wire.PackedTensor):
        return _same(a.rows(), b.rows())
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize("layout", ["nested", "padded", "list"])
@pytest.mark.parametrize("size", [1, 4, 5, 12, 50])
def test_fixed_micro_batches_equal_row_windows(vlm: py_wire.Frame, layout: str, size: int) -> None:
    batches = py_wire.trainer.iter_micro_batches(vlm, size, layout=layout, attention_mask=True)
    assert len(batches) == -(-12 // size)
    starts = list(range(0, 12, size))
    for mb, a in itertools.zip_longest(batches, starts):
        want = py_wire.decode(
            vlm, rows=range(a, min(a + size, 12)), layout=layout, attention_mask=True
        )  # type: ignore[arg-type]
        assert mb.keys() == want.keys()
        for k in want:
            assert _same(mb[k], want[k]), (k, layout, a)
    # Views of the one decoded batch: no payload copy per micro-batch.
    mb = next(iter(batches))
    first, full = mb["pixel_values"][0], batches.decoded["pixel_values"][0]
    assert first is not None and full is not None
    assert first[0].data_ptr() == full[0].data_ptr()
    if layout == "nested":
        assert mb["reward"].data_ptr() == batches.decoded["reward"].data_ptr()


def test_token_budget_groups_and_bins(vlm: py_wire.Frame) -> None:
    groups = py_wire.trainer.micro_batches(vlm, 4096, padded=False)
    batches = py_wire.trainer.iter_micro_batches(vlm, groups, layout="padded", pad_to_multiple_of=8)
    for rows, mb in zip(groups, batches, strict=True):
        want = py_wire.decode(py_wire.take_rows(vlm, rows), layout="padded", pad_to_multiple_of=8)
        for k in want:
            assert _same(mb[k], want[k]), k
    bins = py_wire.trainer.pack_sequences(vlm, 4096)
    for b, mb in zip(bins, py_wire.trainer.iter_micro_batches(vlm, bins), strict=True):
        assert _same(mb["reward"], py_wire.decode(py_wire.take_rows(vlm, b.rows))["reward"])
    with pytest.raises(py_wire.WireError, match="groups"):
        py_wire.trainer.iter_micro_batches(vlm, 0)
    with pytest.raises(py_wire.WireError, match="row 40 is out of range"):
        py_wire.trainer.iter_micro_batches(vlm, [[1, 40]])
    with pytest.raises(TypeError, match="groups"):
        py_wire.trainer.iter_micro_batches(vlm, "4")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"layout": "padded", "attention_mask": True},
        {"layout": "padded", "pad_to_multiple_of": 64},
        {"layout": "list"},
        {"stage": "train"},
        {"attention_mask": True},
    ],
    ids=str,
)
@pytest.mark.parametrize("writable", ["auto", "copy"])
def test_a_micro_batch_pickles_to_its_own_bytes(
    vlm: py_wire.Frame, options: dict[str, Any], writable: str
) -> None:
    """Finding 4 of issue 27: a micro-batch carries its rows only (not the frame, not other
    rows), as ``decode(rows=)`` of the same rows does; every tensor owns exactly its bytes."""
    batches = py_wire.trainer.iter_micro_batches(vlm, 4, writable=writable, **options)
    for a, mb in zip(range(0, 12, 4), batches, strict=True):
        for t in _tensors(mb):
            assert t.untyped_storage().nbytes() == t.nbytes, (options, t.shape)
        want = py_wire.decode(vlm, rows=range(a, a + 4), writable=writable, **options)
        size, own = len(pickle.dumps(mb, protocol=5)), len(pickle.dumps(want, protocol=5))
        assert size <= 1.2 * own, (a, size, own, vlm.nbytes)
        if a == 8:  # text rows: none of the media (the frame is mostly pixels)
            assert size < vlm.nbytes / 20
        back = pickle.loads(pickle.dumps(mb))
        for k in want:
            assert _same(back[k], want[k]), k


def test_a_narrowed_padded_micro_batch_is_its_own_cells(vlm: py_wire.Frame) -> None:
    """On the host, padded micro-batches are each written at their own width (their storage:
    exactly their cells). Padded by torch (``pad_on_device``), they are views of the padded
    batch's rows while at most 1.2x narrower than the batch (their storage: those rows, at most
    1.2x their cells), a copy of their own cells when narrower still."""
    host = py_wire.trainer.iter_micro_batches(vlm, 3, layout="padded")
    full = host.decoded["input_ids"]
    for a, mb in zip(range(0, 12, 3), host, strict=True):
        ids = mb["input_ids"]
        assert ids.untyped_storage().nbytes() == ids.nbytes
        assert torch.equal(ids, full[a : a + 3, : ids.shape[1]])
    batches = py_wire.trainer.iter_micro_batches(
        vlm, 3, layout="padded", device="cpu", pad_on_device=True
    )
    full = batches.decoded["input_ids"]
    kinds = set()
    for a, mb in zip(range(0, 12, 3), batches, strict=True):
        ids = mb["input_ids"]
        assert ids.untyped_storage().nbytes() <= 1.2 * ids.nbytes
        view = ids.data_ptr() == full[a].data_ptr()
        assert view == (ids.shape[1] * 1.2 >= full.shape[1]), (a, ids.shape, full.shape)
        kinds.add(view)
        assert torch.equal(ids, full[a : a + 3, : ids.shape[1]])
    assert kinds == {True, False}, kinds  # this batch has both
