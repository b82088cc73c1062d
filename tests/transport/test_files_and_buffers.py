"""Frames inside larger buffers, frame sizes from prefixes and batches, files (atomic save,
copy-on-write load)."""

from __future__ import annotations

import mmap
import os

import numpy as np
import pytest
import torch

import py_wire
from py_wire.testing import assert_batch_equal
from tests.helpers import small_text_batch, small_vlm_batch

SCHEMA = "qwen2_5_vl"


BATCH = small_vlm_batch()


@pytest.fixture
def frame() -> py_wire.Frame:
    return py_wire.encode(BATCH, SCHEMA)


def _same(decoded: dict) -> None:
    assert_batch_equal(decoded, BATCH, py_wire.load_schema(SCHEMA))


def _addr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def test_frame_in_a_larger_buffer_is_read_by_its_own_length(frame: py_wire.Frame) -> None:
    raw = bytes(frame)
    segment = np.zeros(len(raw) + 4096 + 17, dtype=np.uint8)  # a reused shm segment
    segment[: len(raw)] = np.frombuffer(raw, dtype=np.uint8)
    segment[len(raw) :] = 0xAB
    inner = py_wire.Frame.from_buffer(segment)
    assert len(inner) == len(raw)
    assert bytes(inner) == raw  # the export stops at the frame's end
    out = py_wire.decode(segment)
    _same(out)
    # Zero-copy: the views lie in the segment.
    base = segment.ctypes.data
    assert base <= _addr(out["reward"]) < base + len(raw)
    # A misaligned base is copied: only the frame, not the trailing bytes.
    shifted = np.zeros(len(raw) + 100, dtype=np.uint8)[1:]
    shifted[: len(raw)] = segment[: len(raw)]
    assert len(py_wire.Frame.from_buffer(shifted)) == len(raw)
    # Frame ops see the frame only.
    assert bytes(py_wire.take_rows(inner, range(3))) == bytes(py_wire.take_rows(frame, range(3)))


def test_strictness_kept_inside_a_larger_buffer(frame: py_wire.Frame) -> None:
    raw = bytes(frame)
    with pytest.raises(py_wire.FrameError, match="truncated"):
        py_wire.Frame.from_buffer(raw[:-1])
    with pytest.raises(py_wire.FrameError, match="truncated"):
        py_wire.Frame.from_buffer(raw[:-65] + b"\0" * 64)  # one 64 short + garbage is not 64 more


def test_frame_nbytes_from_a_prefix(frame: py_wire.Frame) -> None:
    raw = bytes(frame)
    header_end = 8 + int.from_bytes(raw[:8], "little")
    assert py_wire.frame_nbytes(raw[:header_end]) == len(raw)
    assert py_wire.frame_nbytes(raw + b"junk" * 10) == len(raw)
    with pytest.raises(
        py_wire.FrameError, match=f"needs {header_end} bytes, {header_end - 100} more"
    ):
        py_wire.frame_nbytes(raw[:100])
    with pytest.raises(py_wire.FrameError, match="needs 8 bytes, 5 more"):
        py_wire.frame_nbytes(raw[:3])
    bad = bytearray(raw[:header_end])
    bad[8] = ord("[")
    with pytest.raises(py_wire.FrameError):
        py_wire.frame_nbytes(bytes(bad))


@pytest.mark.parametrize("stage", [None, "generation"])
def test_encoded_nbytes_is_exact_and_sizes_out(stage: str | None) -> None:
    batch = small_vlm_batch()
    batch["mm_token_type_ids"] = [
        torch.zeros(len(r), dtype=torch.int64) for r in batch["input_ids"]
    ]
    n = py_wire.encoded_nbytes(batch, SCHEMA, stage=stage)
    assert n == len(py_wire.encode(batch, SCHEMA, stage=stage))
    out = bytearray(n)
    f = py_wire.encode(batch, SCHEMA, stage=stage, out=out)
    assert len(f) == n
    text = small_text_batch((3, 100, 0))
    assert py_wire.encoded_nbytes(text, "text_grpo") == len(py_wire.encode(text, "text_grpo"))
    del text["reward"]
    with pytest.raises(py_wire.BatchError, match="reward"):
        py_wire.encoded_nbytes(text, "text_grpo")


def test_save_load_zero_copy_and_copy_on_write(frame: py_wire.Frame, tmp_path) -> None:
    path = tmp_path / "batch.safetensors"
    py_wire.save(frame, path)
    on_disk = path.read_bytes()
    assert on_disk == bytes(frame)
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]  # no temp file left
    loaded = py_wire.load(path)
    assert not loaded.readonly_buffer
    out = py_wire.decode(loaded)
    _same(out)
    # Zero-copy: the views lie in the frame's own memory (the mapping).
    view = memoryview(loaded)
    base = np.frombuffer(view, dtype=np.uint8).ctypes.data
    for t in (out["reward"], out["input_ids"].values(), out["pixel_values"][0][0]):
        assert base <= _addr(t) < base + len(loaded)
    # A write to a view works (no SIGSEGV) and never reaches the file.
    out["reward"].add_(100)
    out["pixel_values"][0][0].zero_()
    assert float(out["reward"][0]) == 100.0
    assert path.read_bytes() == on_disk
    assert float(py_wire.decode(py_wire.load(path))["reward"][0]) == 0.0


def test_load_with_trailing_bytes_and_errors(frame: py_wire.Frame, tmp_path) -> None:
    path = tmp_path / "padded.bin"
    path.write_bytes(bytes(frame) + b"\xff" * 5000)
    assert len(py_wire.load(path)) == len(frame)
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    with pytest.raises(py_wire.FrameError, match="empty"):
        py_wire.load(empty)
    junk = tmp_path / "junk"
    junk.write_bytes(b"x" * 100)
    with pytest.raises(py_wire.FrameError):
        py_wire.load(junk)
    with pytest.raises(py_wire.FrameError):
        py_wire.save(b"not a frame", tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_save_replaces_atomically_while_mapped(frame: py_wire.Frame, tmp_path) -> None:
    path = tmp_path / "f"
    py_wire.save(frame, path)
    first = py_wire.decode(py_wire.load(path))
    other = py_wire.encode(small_text_batch((2, 2)), "text_grpo")
    py_wire.save(other, path)
    assert float(first["reward"][2]) == 2.0  # the old mapping still reads the old file
    assert py_wire.load(path).num_rows == 2
    assert os.stat(path).st_mode & 0o777 == 0o666 & ~_umask()


def test_save_without_fsync_is_still_atomic(frame: py_wire.Frame, tmp_path, monkeypatch) -> None:
    """fsync=False skips only the wait for the device: the same bytes, renamed into place."""
    calls: list[int] = []
    monkeypatch.setattr(os, "fsync", lambda fd: calls.append(fd))
    path = tmp_path / "scratch"
    py_wire.save(frame, path, fsync=False)
    assert calls == [] and path.read_bytes() == bytes(frame)
    assert not [p for p in tmp_path.iterdir() if p.name != path.name]
    py_wire.save(frame, path)  # the durable default waits for the device
    assert len(calls) == 1
    with pytest.raises(TypeError, match="fsync"):
        py_wire.save(frame, path, fsync="no")  # type: ignore[arg-type]


def _umask() -> int:
    m = os.umask(0)
    os.umask(m)
    return m


def test_read_only_mmap_still_decodes(frame: py_wire.Frame, tmp_path) -> None:
    path = tmp_path / "ro"
    py_wire.save(frame, path)
    with open(path, "rb") as f:
        ro = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    assert py_wire.Frame.from_buffer(ro).readonly_buffer


def test_load_refuses_what_is_not_a_regular_file(frame: py_wire.Frame, tmp_path) -> None:
    with pytest.raises(py_wire.FrameError, match="is a directory, not a regular file"):
        py_wire.load(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    # Opened without blocking and refused: no writer ever comes.
    with pytest.raises(py_wire.FrameError, match="is a FIFO, not a regular file"):
        py_wire.load(fifo)


def test_load_maps_the_frame_not_the_whole_file(frame: py_wire.Frame, tmp_path) -> None:
    sparse = tmp_path / "sparse"
    with open(sparse, "wb") as f:
        f.write(bytes(frame))
        f.truncate(1 << 40)  # 1 TiB, almost all of it a hole
    loaded = py_wire.load(sparse)
    assert len(loaded) == len(frame) and len(memoryview(loaded)) == len(frame)
    _same(py_wire.decode(loaded))


def test_load_refuses_a_truncated_file_by_its_header(frame: py_wire.Frame, tmp_path) -> None:
    path = tmp_path / "cut"
    path.write_bytes(bytes(frame)[: len(frame) - 100])
    with pytest.raises(py_wire.FrameError, match=rf"holds {len(frame) - 100} bytes .*truncated"):
        py_wire.load(path)
    header_only = tmp_path / "header_only"
    header_only.write_bytes(bytes(frame)[:20])
    with pytest.raises(py_wire.FrameError, match="header claims"):
        py_wire.load(header_only)
    huge = tmp_path / "huge_header"
    huge.write_bytes((1 << 40).to_bytes(8, "little") + b"{}")
    with pytest.raises(py_wire.FrameError, match="exceeds the 100000000-byte limit"):
        py_wire.load(huge)


def test_load_verifies_checksums_unless_asked_not_to(tmp_path) -> None:
    checked = py_wire.encode(small_vlm_batch(), "qwen2_5_vl", checksum=True)
    field = next(f for f in checked.layout.fields if f.name == "pixel_values")
    damaged = bytearray(bytes(checked))
    damaged[field.values.offset + 3] ^= 1
    path = tmp_path / "damaged"
    path.write_bytes(bytes(damaged))
    with pytest.raises(py_wire.FrameError, match="pixel_values"):
        py_wire.load(path)
    lazy = py_wire.load(path, verify=False)
    assert bytes(lazy) == bytes(damaged)
    with pytest.raises(py_wire.FrameError, match="pixel_values"):
        lazy.verify()
    intact = tmp_path / "intact"
    py_wire.save(checked, intact)
    assert bytes(py_wire.load(intact)) == bytes(checked)
    with pytest.raises(TypeError, match="verify"):
        py_wire.load(intact, verify="yes")  # type: ignore[arg-type]
