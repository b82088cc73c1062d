"""``_native.ReceiveBuffer``: a writable, 64-byte-aligned buffer from the frame pool that a
receiver fills and wraps as a Frame without copying; its memory returns to the pool only when
the buffer, the frame and every view are gone."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import py_wire
from py_wire._native import ReceiveBuffer
from py_wire.synth.registry import generate

SCHEMA = "qwen2_5_vl"
# A size no other test allocates, so the pool (shared by the whole test process) can hold only
# this test's mapping of it.
UNIQUE = (173 << 20) + 4321


def _fill(buf: ReceiveBuffer, frame: py_wire.Frame) -> None:
    torch.frombuffer(buf, dtype=torch.uint8)[: len(frame)].copy_(
        torch.frombuffer(frame, dtype=torch.uint8)
    )


def _address(frame: py_wire.Frame) -> int:
    return torch.frombuffer(frame, dtype=torch.uint8).data_ptr()


@pytest.fixture(scope="module")
def frame() -> py_wire.Frame:
    return py_wire.encode(generate(SCHEMA, 4, seed=3), SCHEMA)


@pytest.mark.parametrize("nbytes", [0, 1, 100, 5 << 20])
def test_aligned_writable_and_sized(nbytes: int) -> None:
    buf = ReceiveBuffer(nbytes)
    assert len(buf) == nbytes
    assert buf.address % 64 == 0
    view = memoryview(buf)
    assert not view.readonly and view.nbytes == nbytes
    if nbytes:
        t = torch.frombuffer(buf, dtype=torch.uint8)
        assert t.data_ptr() == buf.address
        t.fill_(0xAB)
        assert bytes(view[-1:]) == b"\xab"


def test_wraps_as_a_frame_without_copying(frame: py_wire.Frame) -> None:
    buf = ReceiveBuffer(len(frame) + 1000)  # a frame in a larger buffer is read by its length
    _fill(buf, frame)
    address = buf.address
    got = py_wire.Frame.from_buffer(buf)
    del buf
    assert bytes(got) == bytes(frame)
    assert _address(got) == address
    assert not got.readonly_buffer
    out = py_wire.decode(got)  # writable: "auto" decodes views into the received bytes
    assert address <= out["reward"].data_ptr() < address + len(got)
    assert torch.equal(out["reward"], py_wire.decode(frame)["reward"])


#: Run in a fresh process: the pool is shared by the whole process and hands out the smallest
#: pooled mapping that fits, so a larger mapping another test left there would serve the request
#: (a full CI run once got another address that way).
POOL_REUSE = f"""
import gc, torch, py_wire
from py_wire._native import ReceiveBuffer
from py_wire.synth.registry import generate
frame = py_wire.encode(generate({SCHEMA!r}, 4, seed=3), {SCHEMA!r})
buf = ReceiveBuffer({UNIQUE})
source = torch.frombuffer(frame, dtype=torch.uint8)
torch.frombuffer(buf, dtype=torch.uint8)[: len(frame)].copy_(source)
address = buf.address
view = py_wire.decode(py_wire.Frame.from_buffer(buf))["reward"]
del buf
gc.collect()
held = ReceiveBuffer({UNIQUE})  # a view still lives: the memory is not handed out again
assert held.address != address, "handed out while a view lived"
assert torch.equal(view, py_wire.decode(frame)["reward"])
del view
again = ReceiveBuffer({UNIQUE})
assert again.address == address, "not reused after the last view"
"""


def test_memory_returns_to_the_pool_after_the_last_view() -> None:
    run = subprocess.run(
        [sys.executable, "-c", POOL_REUSE], capture_output=True, text=True, timeout=100
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_garbage_is_a_frame_error() -> None:
    buf = ReceiveBuffer(64)
    torch.frombuffer(buf, dtype=torch.uint8).fill_(0xFF)
    with pytest.raises(py_wire.FrameError):
        py_wire.Frame.from_buffer(buf)


@pytest.mark.parametrize("nbytes", [-1, -(1 << 40), 1 << 63, 1 << 70])
def test_a_negative_or_huge_size_is_a_wire_error(nbytes: int) -> None:
    with pytest.raises(py_wire.WireError, match=rf"0 <= nbytes <= \d+, not {nbytes}"):
        ReceiveBuffer(nbytes)


@pytest.mark.parametrize("nbytes", [None, 1.0, "8", True])
def test_a_size_of_another_type_is_a_type_error(nbytes: object) -> None:
    with pytest.raises(TypeError, match="nbytes must be an int"):
        ReceiveBuffer(nbytes)  # type: ignore[arg-type]


def test_an_impossible_size_is_a_wire_error() -> None:
    with pytest.raises(py_wire.WireError, match="cannot allocate"):
        ReceiveBuffer(1 << 62)
