"""``decode(..., writable=)``: ``"auto"`` (the default) views writable sources and privately
copies read-only ones, ``"view"`` always views, ``"copy"`` always copies; ``None`` is the
deprecated spelling of ``"view"``. Checked by address and by the source's bytes."""

from __future__ import annotations

import mmap
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire.testing import assert_batch_equal
from tests.helpers import small_vlm_batch

SCHEMA = "qwen2_5_vl"
BATCH = small_vlm_batch()


def _span(data: object) -> tuple[int, int]:
    if isinstance(data, torch.Tensor):
        return data.data_ptr(), data.data_ptr() + data.nbytes
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        base = torch.frombuffer(data, dtype=torch.uint8)  # type: ignore[call-overload]
    return base.data_ptr(), base.data_ptr() + base.numel()


def _inside(t: torch.Tensor, span: tuple[int, int]) -> bool:
    return span[0] <= t.data_ptr() and t.data_ptr() + t.nbytes <= span[1]


def _decoded_tensors(out: dict[str, Any], row: int = 2) -> list[torch.Tensor]:
    # (The batch's rows share an image, so as_tensor() would be a concatenated copy.)
    return [out["reward"], out["input_ids"].values(), *out["pixel_values"][row]]


def _sources() -> dict[str, Any]:
    frame = py_wire.encode(BATCH, SCHEMA)
    raw = bytes(frame)
    read_only = np.frombuffer(raw, dtype=np.uint8)
    assert not read_only.flags.writeable
    return {
        "frame": frame,
        "bytearray": bytearray(raw),
        "numpy": np.frombuffer(bytearray(raw), dtype=np.uint8),
        "tensor": torch.frombuffer(bytearray(raw), dtype=torch.uint8),
        "bytes": raw,
        "memoryview(bytes)": memoryview(raw),
        "read-only numpy": read_only,
    }


WRITABLE_SOURCES = ["frame", "bytearray", "numpy", "tensor"]
READ_ONLY_SOURCES = ["bytes", "memoryview(bytes)", "read-only numpy"]


@pytest.mark.parametrize("kind", WRITABLE_SOURCES)
def test_auto_views_a_writable_source(kind: str) -> None:
    source = _sources()[kind]
    assert not py_wire.Frame.from_buffer(
        source.numpy() if kind == "tensor" else source
    ).readonly_buffer
    out = py_wire.decode(source, SCHEMA)
    assert_batch_equal(out, BATCH, py_wire.load_schema(SCHEMA))
    for t in _decoded_tensors(out):
        assert _inside(t, _span(source)), "auto copied a writable source"
    out["reward"].add_(1)  # the caller's own buffer: the write lands in it
    assert py_wire.decode(source, SCHEMA)["reward"].equal(BATCH["reward"] + 1)  # type: ignore[operator]


@pytest.mark.parametrize("kind", READ_ONLY_SOURCES)
def test_auto_copies_a_read_only_source_once(kind: str) -> None:
    source = _sources()[kind]
    assert py_wire.Frame.from_buffer(source).readonly_buffer
    before = bytes(memoryview(source))
    out = py_wire.decode(source, SCHEMA)
    assert_batch_equal(out, BATCH, py_wire.load_schema(SCHEMA))
    tensors = _decoded_tensors(out)
    for t in tensors:
        assert not _inside(t, _span(source)), "auto viewed a read-only source"
    # One private copy of the whole frame: the views lie at the same distances from each other
    # as in the source (a copy per tensor, or per field, would place them anew), inside one
    # buffer of the frame's size, and the copied frame's first byte is 64-byte aligned.
    viewed = _decoded_tensors(py_wire.decode(source, SCHEMA, writable="view"))
    base = _span(source)[0]
    assert [t.data_ptr() - tensors[0].data_ptr() for t in tensors] == [
        t.data_ptr() - viewed[0].data_ptr() for t in viewed
    ]
    lo = min(t.data_ptr() for t in tensors)
    hi = max(t.data_ptr() + t.nbytes for t in tensors)
    assert hi - lo <= len(before)
    copy_base = tensors[0].data_ptr() - (viewed[0].data_ptr() - base)
    assert copy_base % 64 == 0
    out["reward"].add_(100)
    out["input_ids"].values().zero_()
    out["pixel_values"][2][1].fill_(7)
    assert bytes(memoryview(source)) == before


@pytest.mark.parametrize("kind", READ_ONLY_SOURCES + WRITABLE_SOURCES)
def test_view_never_copies(kind: str) -> None:
    source = _sources()[kind]
    out = py_wire.decode(source, SCHEMA, writable="view")
    assert_batch_equal(out, BATCH, py_wire.load_schema(SCHEMA))
    for t in _decoded_tensors(out):
        assert _inside(t, _span(source))


@pytest.mark.parametrize("kind", READ_ONLY_SOURCES + WRITABLE_SOURCES)
def test_copy_is_private(kind: str) -> None:
    source = _sources()[kind]
    before = bytes(memoryview(source.numpy() if kind == "tensor" else source))
    out = py_wire.decode(source, SCHEMA, writable="copy")
    assert_batch_equal(out, BATCH, py_wire.load_schema(SCHEMA))
    span = _span(source)
    for t in _decoded_tensors(out):
        assert not _inside(t, span)
    out["reward"].add_(100)
    out["input_ids"].values().zero_()
    out["pixel_values"][2][1].fill_(7)
    assert bytes(memoryview(source.numpy() if kind == "tensor" else source)) == before


def test_private_copy_is_aligned_writable_and_validated() -> None:
    frame = py_wire.Frame.from_buffer(bytes(py_wire.encode(BATCH, SCHEMA)))
    copy = frame.copy()
    assert not copy.readonly_buffer
    assert bytes(copy) == bytes(frame)
    lo, _ = _span(copy)
    assert lo % 64 == 0 and lo != _span(frame)[0]
    assert copy.num_rows == frame.num_rows and copy.metadata == frame.metadata
    # Validated: the copy's own bytes are parsed again, not the source's layout trusted. A
    # writable source changed after it was wrapped gives a copy that is refused.
    raw = bytearray(py_wire.encode(BATCH, SCHEMA))
    wrapped = py_wire.Frame.from_buffer(raw)
    key = b'"py_wire.num_rows":"'
    at = raw.index(key) + len(key)
    assert raw[at : at + 1] == str(wrapped.num_rows).encode()[:1]
    raw[at : at + 1] = b"9" if raw[at : at + 1] != b"9" else b"8"
    with pytest.raises(py_wire.FrameError):
        wrapped.copy()


@pytest.mark.parametrize("bad", ["yes", "copy ", "", 1, True, b"copy", None])
def test_a_bad_policy_names_the_value(bad: object) -> None:
    frame = py_wire.encode(BATCH, SCHEMA)
    with pytest.raises(py_wire.WireError, match=f"writable must be one of .*not {bad!r}"):
        py_wire.decode(frame, SCHEMA, writable=bad)  # type: ignore[arg-type]


def test_rows_on_a_read_only_source_copy_only_the_window() -> None:
    raw = bytes(py_wire.encode(BATCH, SCHEMA))
    span = _span(raw)
    for policy in ("auto", "copy"):
        out = py_wire.decode(raw, SCHEMA, rows=range(2, 3), writable=policy)  # type: ignore[arg-type]
        whole = py_wire.decode(raw, SCHEMA, writable="view")
        assert out["reward"].equal(BATCH["reward"][2:3])  # type: ignore[index]
        assert out["input_ids"].values().equal(BATCH["input_ids"][2])  # type: ignore[index]
        assert out["pixel_values"][0][0].equal(BATCH["pixel_values"][2][0])  # type: ignore[index]
        for t in _decoded_tensors(out, row=0):
            assert not _inside(t, span)
        # The per-token copy is the window's, not the field's.
        assert out["input_ids"].values().numel() == 9 < whole["input_ids"].values().numel()
        out["reward"].add_(100)
        out["input_ids"].values().zero_()
        out["pixel_values"][0][1].fill_(7)
        assert bytes(raw) == bytes(py_wire.encode(BATCH, SCHEMA))
    view = py_wire.decode(raw, SCHEMA, rows=range(2, 3), writable="view")
    assert _inside(view["reward"], span) and _inside(view["input_ids"].values(), span)


def test_rows_on_a_writable_source_stay_views() -> None:
    frame = py_wire.encode(BATCH, SCHEMA)
    out = py_wire.decode(frame, SCHEMA, rows=range(0, 2))
    for t in (out["reward"], out["input_ids"].values()):
        assert _inside(t, _span(frame))


def test_source_dtype_with_a_window_casts_only_the_window() -> None:
    schema = py_wire.load_schema(SCHEMA)
    cast = [n for n, f in schema.fields.items() if f.wire_dtype is not None]
    raw = bytes(py_wire.encode(BATCH, SCHEMA))
    out = py_wire.decode(raw, SCHEMA, rows=range(0, 1), source_dtype=True)
    full = py_wire.decode(raw, SCHEMA, source_dtype=True)
    for name in cast:
        assert out[name].dtype == full[name].dtype
    assert out["reward"].equal(full["reward"][:1])


_READ_ONLY_MMAP_WRITE = """
import mmap, sys
import py_wire

with open(sys.argv[1], "rb") as fh:
    m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
assert py_wire.Frame.from_buffer(m).readonly_buffer
out = py_wire.decode(m, "qwen2_5_vl")  # the default: a private copy of a read-only mapping
out["reward"].add_(100)  # a write to a view of the mapping itself would be a SIGSEGV
out["input_ids"].values().zero_()
out["pixel_values"][2][1].fill_(7)
print(float(out["reward"].sum()))
"""


def test_read_only_mmap_takes_in_place_writes_with_the_default(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    on_disk = bytes(py_wire.encode(BATCH, SCHEMA))
    path.write_bytes(on_disk)
    # In a child process: were the default a view, the write would kill the process.
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(_READ_ONLY_MMAP_WRITE), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    expected = float(BATCH["reward"].sum()) + 100 * 3  # type: ignore[attr-defined]
    assert float(done.stdout.split()[-1]) == expected
    assert path.read_bytes() == on_disk


def test_view_of_a_read_only_mmap_lies_in_the_mapping(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(py_wire.encode(BATCH, SCHEMA)))
    with open(path, "rb") as fh:
        m = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
    out = py_wire.decode(m, SCHEMA, writable="view")
    assert _inside(out["reward"], _span(m))
    assert out["reward"].equal(BATCH["reward"])  # type: ignore[arg-type]
    default = py_wire.decode(m, SCHEMA)
    assert not _inside(default["reward"], _span(m))


def test_load_decodes_views_by_default(tmp_path: Path) -> None:
    path = tmp_path / "f.bin"
    py_wire.save(py_wire.encode(BATCH, SCHEMA), path)
    loaded = py_wire.load(path)  # private copy-on-write: writable, so "auto" views it
    out = py_wire.decode(loaded, SCHEMA)
    assert _inside(out["reward"], _span(loaded))


def _flat(value: Any) -> list[torch.Tensor]:
    """Every tensor a decoded field holds (its rows' tensors for lists and packed fields)."""
    if isinstance(value, list):
        rows = [row for row in value if row is not None]
        return [t for row in rows for t in (row if isinstance(row, list) else [row])]
    if isinstance(value, py_wire.PackedTensor):
        return [t for row in range(len(value)) for t in value[row] or []]
    return [value.values() if value.is_nested else value]


@pytest.mark.parametrize(
    "options",
    [{"layout": "padded"}, {"stage": "train"}, {"source_dtype": True}, {"layout": "list"}],
)
def test_private_decodes_own_every_tensor_however_they_decode(options: dict[str, Any]) -> None:
    # Without a whole-frame copy (padding, a stage or casts copy anyway), each returned tensor
    # is copied instead: none lies in the read-only source, and the values are the view's.
    raw = bytes(py_wire.encode(BATCH, SCHEMA))
    span = _span(raw)
    private = py_wire.decode(raw, SCHEMA, **options)
    shared = py_wire.decode(raw, SCHEMA, writable="view", **options)
    assert private.keys() == shared.keys()
    for name in private:
        mine, theirs = _flat(private[name]), _flat(shared[name])
        assert len(mine) == len(theirs) > 0, name
        assert not any(_inside(t, span) for t in mine if t.numel()), name
        assert all(torch.equal(a, b) for a, b in zip(mine, theirs, strict=True)), name
