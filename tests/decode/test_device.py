"""Frames in device memory: validated on the host from their header and index tables, decoded
as views of the device buffer.

The host-shadow validation runs everywhere. The CUDA and NCCL tests need a GPU: CI has none, so
they skip there and run where one is lent (see docs/moving-frames.md)."""

from __future__ import annotations

import os
import socket

import numpy as np
import pytest
import torch

import py_wire
from py_wire._device import host_shadow
from py_wire.synth.registry import generate

SCHEMA = "qwen2_5_vl"
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _frame(rows: int = 6, seed: int = 5) -> py_wire.Frame:
    return py_wire.encode(generate(SCHEMA, rows, seed=seed), SCHEMA)


def _as_tensor(frame: py_wire.Frame) -> torch.Tensor:
    return torch.frombuffer(bytearray(bytes(frame)), dtype=torch.uint8)


def _layout(frame: py_wire.Frame) -> list[object]:
    layout = frame.layout
    seq = layout.seq_offsets
    key: list[object] = [layout.num_rows, None if seq is None else (seq.offset, seq.nbytes)]
    for f in layout.fields:
        key.append((f.name, f.tier, f.values.offset, f.values.shape, f.in_order))
    return key


def test_the_host_shadow_validates_like_the_frame_and_holds_no_payload() -> None:
    frame = _frame()
    shadow = host_shadow(_as_tensor(frame))
    assert _layout(shadow) == _layout(frame)
    assert len(shadow) == len(frame)
    data = np.frombuffer(memoryview(shadow), dtype=np.uint8)
    original = np.frombuffer(memoryview(frame), dtype=np.uint8)
    for f in frame.layout.fields:
        loc = f.values
        assert not data[loc.offset : loc.offset + loc.nbytes].any(), f"{f.name} was copied"
    pixels = next(f.values for f in frame.layout.fields if f.name == "pixel_values")
    assert original[pixels.offset : pixels.offset + pixels.nbytes].any()


def test_trailing_bytes_after_the_frame_are_ignored() -> None:
    frame = _frame()
    padded = torch.cat([_as_tensor(frame), torch.full((100,), 7, dtype=torch.uint8)])
    assert _layout(host_shadow(padded)) == _layout(frame)


@pytest.mark.parametrize(
    "cut", ["empty", "short_length", "short_header", "short_data", "bad_index", "not_uint8"]
)
def test_damaged_device_frames_are_frame_errors(cut: str) -> None:
    frame = _frame()
    t = _as_tensor(frame)
    header_len = int.from_bytes(bytes(frame)[:8], "little")
    if cut == "empty":
        t = t[:0]
    elif cut == "short_length":
        t = t[:5]
    elif cut == "short_header":
        t = t[: 8 + header_len // 2]
    elif cut == "short_data":
        t = t[: len(frame) - 64]
    elif cut == "bad_index":
        seq = frame.layout.seq_offsets
        assert seq is not None
        t = t.clone()
        t[seq.offset : seq.offset + 8] = 0xFF  # a negative first offset
    else:
        t = t.view(torch.int8)
    with pytest.raises(py_wire.FrameError):
        host_shadow(t)


def _addr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def _assert_same(got: object, want: object) -> None:
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor)
        if want.is_nested:
            assert got.is_nested
            assert torch.equal(got.values().cpu(), want.values())
            assert torch.equal(got.offsets().cpu(), want.offsets())
        else:
            assert got.dtype == want.dtype and torch.equal(got.cpu(), want)
    elif isinstance(want, py_wire.PackedTensor):
        assert isinstance(got, py_wire.PackedTensor)
        assert torch.equal(got.as_tensor().cpu(), want.as_tensor())
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want)
        for g, w in zip(got, want, strict=True):
            _assert_same(g, w)
    else:
        assert got == want


@pytest.mark.parametrize("trailing", [(), (3,)])
@pytest.mark.parametrize("lengths", [[3, 0, 5, 1], [0, 0], [], [4]])
def test_torch_padding_of_device_values_is_the_codecs(lengths: list[int], trailing: tuple) -> None:
    # Device values are padded by torch (the codec's pad_rows reads host memory); on the CPU
    # both run, and must write the same tensor.
    from py_wire._decode import _padded, _padded_by_torch

    lens = torch.tensor(lengths, dtype=torch.int64)
    offsets = torch.nn.functional.pad(lens.cumsum(0), (1, 0))
    values = torch.arange(int(lens.sum()) * int(np.prod(trailing)), dtype=torch.float32)
    values = values.reshape(-1, *trailing)
    for width in ([int(lens.max())] if lengths else [0]) + [7]:
        want = _padded(values, offsets, lens, -1.5, width)
        assert torch.equal(_padded_by_torch(values, lens, -1.5, width), want)


@needs_cuda
@pytest.mark.parametrize(
    "options",
    [
        {},
        {"layout": "padded", "pad_to_multiple_of": 8, "attention_mask": True},
        {"layout": "list"},
        {"rows": range(1, 4)},
        {"stage": "logprob"},
        {"writable": "copy"},
    ],
)
def test_a_cuda_frame_decodes_on_the_device_as_views(options: dict[str, object]) -> None:
    frame = _frame()
    device_buf = _as_tensor(frame).cuda()
    out = py_wire.decode(device_buf, **options)
    ref = py_wire.decode(frame, **options)
    assert out.keys() == ref.keys()
    lo, hi = device_buf.data_ptr(), device_buf.data_ptr() + device_buf.numel()
    for name, want in ref.items():
        got = out[name]
        _assert_same(got, want)
        values = got.values() if isinstance(got, torch.Tensor) and got.is_nested else got
        if isinstance(values, torch.Tensor):
            assert values.is_cuda, name
            in_buffer = lo <= _addr(values) < hi
            zero_copy = options.get("layout") != "padded" and "writable" not in options
            if zero_copy and name in frame.schema.fields and values.numel():
                assert in_buffer, f"{name} was copied"
            if options.get("writable") == "copy" and values.numel():
                assert not in_buffer, f"{name} shares the received buffer"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _nccl_pair(rank: int, port: int, shared: bool) -> None:
    import torch.distributed as dist

    from py_wire import distributed as pwd

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(0 if shared else rank)
    dist.init_process_group("nccl", rank=rank, world_size=2)
    try:
        frames = [_frame(rows=4, seed=5), _frame(rows=5, seed=1)]
        mine = frames[rank]
        if rank == 0:
            pwd.send(mine, dst=1)
        else:
            got = pwd.recv(src=0)
            assert isinstance(got, torch.Tensor) and got.is_cuda
            assert bytes(got.cpu().numpy()) == bytes(frames[0])
        gathered = pwd.all_gather(mine)
        other = gathered[1 - rank]
        assert isinstance(other, torch.Tensor) and other.is_cuda
        assert bytes(other.cpu().numpy()) == bytes(frames[1 - rank])
        out = py_wire.decode(other)
        want = py_wire.decode(frames[1 - rank])
        assert torch.equal(out["input_ids"].values().cpu(), want["input_ids"].values())
        assert torch.equal(out["pixel_values"].as_tensor().cpu(), want["pixel_values"].as_tensor())
        shard = pwd.scatter(frames[0] if rank == 0 else None, src=0)
        expected = py_wire.shard(frames[0], rank, 2)
        assert bytes(shard.cpu().numpy() if isinstance(shard, torch.Tensor) else shard) == bytes(
            expected
        )
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(
    torch.cuda.device_count() < 2 and os.environ.get("PY_WIRE_NCCL_SHARE_GPU") != "1",
    reason="needs two CUDA devices (or PY_WIRE_NCCL_SHARE_GPU=1 to try two ranks on one)",
)
def test_nccl_between_two_ranks() -> None:
    import torch.multiprocessing as mp

    shared = torch.cuda.device_count() < 2
    mp.spawn(_nccl_pair, args=(_free_port(), shared), nprocs=2, join=True)
