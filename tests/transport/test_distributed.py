"""py_wire.distributed over gloo with 2 and 3 processes on localhost: send/recv, broadcast,
scatter and all_gather of a real multimodal frame, checking bytes and decoded contents.

The NCCL path itself is not run here (CI has no GPU); its receive branch (validate, keep the
bytes where they landed) is tested on host tensors here and on a GPU in
tests/decode/test_device.py."""

from __future__ import annotations

import gc
import socket

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import py_wire
from py_wire import distributed as pwd
from py_wire.synth.registry import generate

pytestmark = pytest.mark.slow  # spawned processes (see pyproject's markers)

SCHEMA = "qwen2_5_vl"


def _frame(rows: int, seed: int) -> py_wire.Frame:
    return py_wire.encode(generate(SCHEMA, rows, seed=seed), SCHEMA)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _addr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr() + t.storage_offset() * t.element_size()


def _check(got: py_wire.Frame, want: py_wire.Frame, *, received: bool = True) -> None:
    assert bytes(got) == bytes(want)
    out = py_wire.decode(got)
    ref = py_wire.decode(want)
    assert torch.equal(out["input_ids"].values(), ref["input_ids"].values())
    assert torch.equal(out["reward"], ref["reward"])
    a, b = out["pixel_values"].as_tensor(), ref["pixel_values"].as_tensor()
    assert (a is None and b is None) or torch.equal(a, b)
    if received:
        # Received into a pooled, writable buffer: the default ("auto") decodes views into it,
        # with no copy after the receive.
        assert not got.readonly_buffer
        base = py_wire._decode.FrameViews(got).base
        assert _addr(base) % 64 == 0
        assert _addr(base) <= _addr(out["reward"]) < _addr(base) + len(got)
        assert _addr(base) <= _addr(out["input_ids"].values()) < _addr(base) + len(got)


def _worker(rank: int, world: int, port: int) -> None:
    dist.init_process_group(
        "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world
    )
    try:
        full = _frame(12, seed=0)
        # send / recv: ring, every rank sends its own frame to the next.
        mine = _frame(2 + rank, seed=rank + 1)
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        if rank % 2 == 0:
            pwd.send(mine, nxt)
            got = pwd.recv(prv)
        else:
            got = pwd.recv(prv)
            pwd.send(mine, nxt)
        _check(got, _frame(2 + prv, seed=prv + 1))
        # broadcast from the last rank; the source may pass read-only bytes.
        src = world - 1
        got = pwd.broadcast(bytes(full) if rank == src else None, src)
        _check(got, full, received=rank != src)
        # scatter: contiguous and NeMo-RL interleaved shards, each rank only its own.
        got = pwd.scatter(full if rank == 0 else None, 0)
        _check(got, py_wire.shard(full, rank, world))
        got = pwd.scatter(full if rank == 0 else None, 0, batch_size=world * 2)
        assert got.num_rows == 12 // world
        _check(got, py_wire.shard(full, rank, world, batch_size=world * 2))
        # all_gather of frames of different sizes.
        frames = pwd.all_gather(mine)
        assert len(frames) == world
        for r, f in enumerate(frames):
            _check(f, _frame(2 + r, seed=r + 1))
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world", [2, 3])
def test_gloo_frames(world: int) -> None:
    mp.spawn(_worker, args=(world, _free_port()), nprocs=world, join=True)


def _frame_span(frame: py_wire.Frame) -> tuple[int, int]:
    base = py_wire._decode.FrameViews(frame).base
    return _addr(base), _addr(base) + len(frame)


def _pooled_receiver(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        # Two frames, then the first again; each above the pool's 4 MiB floor.
        frames = [_frame(12, seed=0), _frame(12, seed=1)]
        assert min(len(f) for f in frames) > 4 << 20
        if rank == 0:
            for f in (frames[0], frames[1], frames[0]):
                pwd.send(f, 1)
            return
        first = pwd.recv(0)
        _check(first, frames[0])
        first_span = _frame_span(first)
        view = py_wire.decode(first)["reward"]
        del first
        # While any view of the first frame lives, its memory is never handed out again.
        second = pwd.recv(0)
        _check(second, frames[1])
        second_span = _frame_span(second)
        assert second_span[0] >= first_span[1] or second_span[1] <= first_span[0]
        # Once its last view is gone, the next receive of that size reuses its pages, even
        # after an allocation of the same size elsewhere (which, without the pool, would
        # usually be given the freed pages).
        del view
        decoy = torch.ones(first_span[1] - first_span[0], dtype=torch.uint8)
        third = pwd.recv(0)
        assert _frame_span(third) == first_span
        _check(third, frames[0])
        del second, third, decoy
    finally:
        dist.destroy_process_group()


def test_receives_reuse_pooled_buffers() -> None:
    mp.spawn(_pooled_receiver, args=(_free_port(),), nprocs=2, join=True)


def _bad_peer(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        if rank == 0:
            dist.send(torch.tensor([1, 2, 3], dtype=torch.int64), 1)
        else:
            with pytest.raises(py_wire.FrameError, match="announcement"):
                pwd.recv(0)
    finally:
        dist.destroy_process_group()


def test_a_foreign_message_is_a_frame_error() -> None:
    mp.spawn(_bad_peer, args=(_free_port(),), nprocs=2, join=True)


def _padded_bytes(frame: py_wire.Frame, extra: int) -> torch.Tensor:
    return torch.frombuffer(bytearray(bytes(frame) + b"\0" * extra), dtype=torch.uint8)


def test_a_device_receive_is_validated_and_kept_where_it_landed() -> None:
    # The NCCL path hands _to_frame a device tensor and no host buffer; any tensor takes the
    # same branch, so it runs here on the host (tests/decode/test_device.py runs it on a GPU).
    frame = _frame(2, seed=5)
    received = _padded_bytes(frame, 100)  # all_gather's buffers are padded to the longest
    got = pwd._to_frame(received, None, len(frame), "rank 0")
    assert isinstance(got, torch.Tensor)
    assert got.data_ptr() == received.data_ptr() and got.numel() == len(frame)
    assert bytes(got.numpy()) == bytes(frame)
    damaged = received.clone()
    seq = frame.layout.seq_offsets
    assert seq is not None
    damaged[seq.offset : seq.offset + 8] = 0xFF
    with pytest.raises(py_wire.FrameError):
        pwd._to_frame(damaged, None, len(frame), "rank 0")


def test_a_frame_shorter_than_announced_is_a_frame_error() -> None:
    frame = _frame(2, seed=5)
    received = _padded_bytes(frame, 128)
    for host in (None, py_wire.ReceiveBuffer(len(frame) + 128)):
        if host is not None:
            torch.frombuffer(host, dtype=torch.uint8).copy_(received)
            received = torch.frombuffer(host, dtype=torch.uint8)
        with pytest.raises(py_wire.FrameError, match=rf"rank 3 announced {len(frame) + 128}"):
            pwd._to_frame(received, host, len(frame) + 128, "rank 3")


def _same_size_frames() -> tuple[py_wire.Frame, py_wire.Frame]:
    """Two different frames of one size above the pool's floor: a receive of the second
    reuses the pooled buffer of the first once it is dropped."""
    batch = generate(SCHEMA, 12, seed=0)
    a = py_wire.encode(batch, SCHEMA)
    batch["advantages"] = [t + 1 for t in batch["advantages"]]
    batch["reward"] = batch["reward"] + 1
    b = py_wire.encode(batch, SCHEMA)
    assert len(a) == len(b) > 4 << 20 and bytes(a) != bytes(b)
    return a, b


def _raw_send(frame_bytes: bytes, announce: py_wire.Frame, dst: int) -> None:
    """What a hostile or broken peer does: announce ``announce``, send ``frame_bytes``."""
    dist.send(pwd._header(announce, torch.device("cpu")), dst)
    dist.send(torch.frombuffer(bytearray(frame_bytes), dtype=torch.uint8), dst)


def _hostile_peer(rank: int, port: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    try:
        a, b = _same_size_frames()
        checked = py_wire.encode(generate(SCHEMA, 3, seed=1), SCHEMA, checksum=True)
        flipped = bytearray(bytes(checked))
        ids = next(f for f in checked.layout.fields if f.name == "input_ids").values
        flipped[ids.offset + 5] ^= 0x10
        if rank == 0:
            pwd.send(a, 1)
            # 1. short: B announced, a third of it sent; the buffer last held A.
            _raw_send(bytes(b)[: len(b) // 3], b, 1)
            # 2. all but the last byte.
            _raw_send(bytes(b)[:-1], b, 1)
            # 3. garbage of the announced length whose last bytes match the announcement.
            junk = bytearray(b"\x5a" * len(b))
            junk[-8:] = bytes(b)[-8:]
            _raw_send(bytes(junk), b, 1)
            # 4. one payload bit flipped in flight in a frame that carries checksums.
            _raw_send(bytes(flipped), checked, 1)
            # 5. the same, received with verify=False: a valid frame of the changed bytes.
            _raw_send(bytes(flipped), checked, 1)
            pwd.send(b, 1)
            return
        first = pwd.recv(0)
        _check(first, a)
        span = _frame_span(first)
        del first  # its pooled buffer is the next receive's
        with pytest.raises(py_wire.FrameError, match=r"rank 0 announced .* ended early"):
            pwd.recv(0)
        with pytest.raises(py_wire.FrameError, match="ended early"):
            pwd.recv(0)
        with pytest.raises(py_wire.FrameError):
            pwd.recv(0)
        with pytest.raises(py_wire.FrameError, match="input_ids"):
            pwd.recv(0)
        unverified = pwd.recv(0, verify=False)
        assert bytes(unverified) == bytes(flipped)
        with pytest.raises(py_wire.FrameError, match="input_ids"):
            unverified.verify()
        del unverified
        gc.collect()  # the refused receives' buffers, held by their tracebacks until now
        last = pwd.recv(0)
        _check(last, b)
        # Every receive of B's size landed in A's recycled buffer, the short ones included:
        # the buffer held A's bytes, and the end-of-message check is what refused them.
        assert _frame_span(last) == span
    finally:
        dist.destroy_process_group()


def test_a_hostile_peer_never_yields_another_frames_bytes() -> None:
    mp.spawn(_hostile_peer, args=(_free_port(),), nprocs=2, join=True)


def _dying_peer(rank: int, port: int) -> None:
    import datetime
    import os

    dist.init_process_group(
        "gloo",
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=datetime.timedelta(seconds=60),
    )
    a, b = _same_size_frames()
    if rank == 0:
        pwd.send(a, 1)
        dist.send(pwd._header(b, torch.device("cpu")), 1)
        os._exit(0)  # dies after the announcement, before the payload
    first = pwd.recv(0)
    _check(first, a)
    del first
    with pytest.raises(RuntimeError):  # gloo: the connection closed; no frame comes back
        pwd.recv(0)
    os._exit(0)


def test_a_peer_dying_mid_send_yields_no_frame() -> None:
    mp.spawn(_dying_peer, args=(_free_port(),), nprocs=2, join=True)
