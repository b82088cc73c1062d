"""Frames over ``torch.distributed``: a small fixed header (magic, format version, byte
length), then the frame's bytes as one uint8 tensor. No payload is pickled; the receiver
takes a buffer of exactly the announced size from py_wire's frame pool (64-byte aligned, the
warm pages of a dropped frame when one fits), receives into it and wraps it as a validated
:class:`Frame` without copying. The frame is writable, so ``decode`` gives views into it
(``writable="auto"``), and its memory goes back to the pool once the frame and every view are
dropped.

Works with any backend whose collectives take uint8 tensors. With ``gloo`` the bytes move as
host tensors (the sender's tensor is a view of the frame, no copy). With ``nccl`` (GPUs) the
bytes must travel as device tensors: the sender copies the frame to its current CUDA device
once, and a receiver gets the frame as a validated CUDA uint8 tensor (its header and index
tables, a few bytes per row, are copied to the host and checked; the payload stays on the
device). ``py_wire.decode`` of that tensor gives views on the device. CI has no GPU; the NCCL
path runs in ``tests/decode/test_device.py`` where one is lent.

Every call must be made by every rank of ``group`` involved, as for ``torch.distributed``.

What a receive can trust. ``torch.distributed`` does not tell a receiver how many bytes
arrived, and gloo accepts a message shorter than the buffer. The announcement therefore
carries the frame's last 8 bytes, and the receiver fills the end of its buffer with their
bitwise complement before receiving: a send that stops short never writes the last byte, so
it is a :class:`FrameError`, never a frame completed by whatever the (pooled, recycled)
buffer held before. A frame that carries payload checksums (``encode(..., checksum=True)``)
is verified on the host after every receive (``verify=False`` skips it; device frames are
not verified: the checksum runs on the host), so bytes that changed in flight are a
``FrameError`` naming the field. Peers are processes of one job: a peer that sends *more*
bytes than it announced makes gloo abort the receiving process in its own size check
(``op.preamble.length <= op.nbytes``), as a plain ``dist.recv`` does; py_wire's senders
never do, and nothing in Python can catch that abort.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist

from py_wire._args import flag
from py_wire._device import host_shadow
from py_wire._native import Frame, FrameError, ReceiveBuffer, WireError
from py_wire._ops import shard
from py_wire._source import as_frame

__all__ = [
    "all_gather",
    "broadcast",
    "recv",
    "scatter",
    "send",
]

#: "PYWIREFR" as a little-endian int64: the first word of every announcement.
MAGIC = int.from_bytes(b"PYWIREFR", "little") & 0x7FFF_FFFF_FFFF_FFFF
#: The announcement's layout version (bumped if the header grows). 2: the frame's last 8
#: bytes joined the announcement.
VERSION = 2
_HEADER_WORDS = 4  # magic, version, frame length in bytes, the frame's last 8 bytes
_TAIL = 8

#: What a receive returns: a host frame, or under NCCL the frame's bytes as a validated device
#: tensor (decode it with ``py_wire.decode``: views on the device).
Received = Frame | torch.Tensor


def _device(group: Any) -> torch.device:
    """Where tensors of ``group``'s backend must live: the current CUDA device for NCCL."""
    backend = dist.get_backend(group)
    if backend == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def _header(frame: Frame, device: torch.device) -> torch.Tensor:
    tail = int.from_bytes(memoryview(frame)[-_TAIL:], "little", signed=True)
    return torch.tensor([MAGIC, VERSION, len(frame), tail], dtype=torch.int64, device=device)


def _empty_header(device: torch.device) -> torch.Tensor:
    return torch.zeros(_HEADER_WORDS, dtype=torch.int64, device=device)


def _announced(header: torch.Tensor, peer: str) -> tuple[int, int]:
    """The announced frame length and the frame's last 8 bytes (as a signed int64)."""
    magic, version, nbytes, tail = header.tolist()
    if magic != MAGIC:
        raise FrameError(
            f"{peer} did not send a py_wire frame announcement (magic {magic:#x}); are both "
            "sides calling py_wire.distributed in the same order?"
        )
    if version != VERSION:
        raise FrameError(f"{peer} speaks announcement version {version}; this is {VERSION}")
    if nbytes < _TAIL:
        raise FrameError(f"{peer} announced a {nbytes}-byte frame")
    return int(nbytes), int(tail)


def _tail_bytes(tail: int) -> torch.Tensor:
    return torch.tensor([tail], dtype=torch.int64).view(torch.uint8)


def _arm(received: torch.Tensor, nbytes: int, tail: int) -> None:
    """Fill the frame's last 8 bytes in ``received`` with the complement of what the sender
    announced: only a send of the whole frame overwrites them (see the module doc)."""
    end = received[nbytes - _TAIL : nbytes]
    end.copy_(torch.bitwise_not(_tail_bytes(tail)).to(end.device))


def _check_arrived(received: torch.Tensor, nbytes: int, tail: int, peer: str) -> None:
    got = received[nbytes - _TAIL : nbytes].cpu()
    want = _tail_bytes(tail)
    if not torch.equal(got, want):
        raise FrameError(
            f"{peer} announced {nbytes} bytes but its message ended early (the frame's last "
            f"bytes are {bytes(got.numpy()).hex()}, the announcement said "
            f"{bytes(want.numpy()).hex()}): a short or mismatched send"
        )


def _payload(frame: Frame, device: torch.device) -> torch.Tensor:
    """The frame's bytes as one uint8 tensor: a view on the host, one copy for a device."""
    with warnings.catch_warnings():
        # A read-only frame gives a tensor torch cannot mark read-only; it is only read here.
        warnings.simplefilter("ignore", UserWarning)
        host = torch.frombuffer(frame, dtype=torch.uint8)
    return host if device.type == "cpu" else host.to(device)


def _receive_buffer(nbytes: int, device: torch.device) -> tuple[torch.Tensor, ReceiveBuffer | None]:
    """Where a receive of ``nbytes`` lands: on the host, a tensor over a pooled
    :class:`ReceiveBuffer` (which then becomes the frame, no copy); for NCCL, a device tensor."""
    if device.type != "cpu":
        return torch.empty(nbytes, dtype=torch.uint8, device=device), None
    host = ReceiveBuffer(nbytes)
    return torch.frombuffer(host, dtype=torch.uint8), host


def _to_frame(
    received: torch.Tensor,
    host: ReceiveBuffer | None,
    nbytes: int,
    peer: str,
    *,
    tail: int | None = None,
    verify: bool = True,
) -> Received:
    """The first ``nbytes`` received, validated as a frame of exactly that size (whose last
    8 bytes are ``tail``, the announced ones, when given), its checksums checked when it
    carries them and ``verify``."""
    if tail is not None:
        _check_arrived(received, nbytes, tail, peer)
    if host is None:  # a device tensor: validated from its header and index tables, kept there
        device_frame = received[:nbytes]
        shadow = host_shadow(device_frame)
        if len(shadow) != nbytes:
            raise FrameError(f"{peer} announced {nbytes} bytes but sent a {len(shadow)}-byte frame")
        return device_frame
    frame = Frame.from_buffer(memoryview(host)[:nbytes])
    if len(frame) != nbytes:
        raise FrameError(f"{peer} announced {nbytes} bytes but sent a {len(frame)}-byte frame")
    if verify and frame.has_checksum:
        frame.verify()
    return frame


def _receive(
    src: int,
    header: torch.Tensor,
    device: torch.device,
    fill: Callable[[torch.Tensor], object],
    verify: bool,
) -> Received:
    """Reads the announcement in ``header``, then ``fill(tensor)`` receives into a buffer of
    that size."""
    flag("verify", verify)
    peer = f"rank {src}"
    nbytes, tail = _announced(header, peer)
    received, host = _receive_buffer(nbytes, device)
    _arm(received, nbytes, tail)
    fill(received)
    return _to_frame(received, host, nbytes, peer, tail=tail, verify=verify)


def send(frame: Any, dst: int, group: Any = None, tag: int = 0) -> None:
    """Send ``frame`` (a Frame or frame bytes) to rank ``dst``, which calls :func:`recv`."""
    frame = as_frame(frame)
    device = _device(group)
    dist.send(_header(frame, device), dst, group=group, tag=tag)
    dist.send(_payload(frame, device), dst, group=group, tag=tag)


def recv(src: int, group: Any = None, tag: int = 0, *, verify: bool = True) -> Received:
    """Receive a frame that rank ``src`` sent with :func:`send` (validated; its checksums
    checked when it carries them, unless ``verify=False``)."""
    device = _device(group)
    header = _empty_header(device)
    dist.recv(header, src, group=group, tag=tag)
    return _receive(src, header, device, lambda t: dist.recv(t, src, group=group, tag=tag), verify)


def broadcast(frame: Any | None, src: int, group: Any = None, *, verify: bool = True) -> Received:
    """Rank ``src`` passes its frame, every other rank ``None``; all get the frame (checksums
    checked on receivers as in :func:`recv`)."""
    device = _device(group)
    me = dist.get_rank()
    if me == src:
        if frame is None:
            raise WireError(f"rank {src} is the source of the broadcast and must pass a frame")
        frame = as_frame(frame)
        dist.broadcast(_header(frame, device), src, group=group)
        dist.broadcast(_payload(frame, device), src, group=group)
        return frame
    header = _empty_header(device)
    dist.broadcast(header, src, group=group)
    return _receive(src, header, device, lambda t: dist.broadcast(t, src, group=group), verify)


def scatter(
    frame: Any | None,
    src: int,
    group: Any = None,
    *,
    batch_size: int | None = None,
    allow_uneven: bool = False,
    verify: bool = True,
) -> Received:
    """Rank ``src`` passes a frame; each rank receives only its data-parallel shard, cut on
    ``src`` by :func:`py_wire.shard` without decoding (``batch_size`` / ``allow_uneven``:
    NeMo-RL's chunk-interleaved sharding). Ranks are the group's ranks."""
    device = _device(group)
    world = dist.get_world_size(group)
    me = dist.get_rank(group)
    src_in_group = src if group is None else dist.get_group_rank(group, src)
    if me == src_in_group:
        if frame is None:
            raise WireError(f"rank {src} is the source of the scatter and must pass a frame")
        frame = as_frame(frame)
        shards = [
            shard(frame, r, world, batch_size=batch_size, allow_uneven=allow_uneven)
            for r in range(world)
        ]
        headers = [_header(s, device) for s in shards]
        mine = _empty_header(device)
        dist.scatter(mine, headers, src=src, group=group)
        pending = [
            dist.isend(_payload(s, device), _global(group, r), group=group)
            for r, s in enumerate(shards)
            if r != me
        ]
        for p in pending:
            if p is not None:  # None only when this rank is not in the group
                p.wait()
        return shards[me]
    header = _empty_header(device)
    dist.scatter(header, None, src=src, group=group)
    return _receive(src, header, device, lambda t: dist.recv(t, src, group=group), verify)


def _global(group: Any, rank: int) -> int:
    return rank if group is None else dist.get_global_rank(group, rank)


def all_gather(frame: Any, group: Any = None, *, verify: bool = True) -> list[Received]:
    """Every rank passes its frame; every rank gets all of them, in rank order.

    Lengths are gathered first; frames then travel in one ``all_gather`` of buffers of the
    longest frame's size (each rank copies its own frame once into such a buffer; each
    received frame is read by its own length, the padding after it ignored)."""
    flag("verify", verify)
    frame = as_frame(frame)
    device = _device(group)
    world = dist.get_world_size(group)
    headers = [_empty_header(device) for _ in range(world)]
    dist.all_gather(headers, _header(frame, device), group=group)
    announced = [_announced(h, f"rank {r}") for r, h in enumerate(headers)]
    width = max(n for n, _ in announced)
    mine, _ = _receive_buffer(width, device)
    mine[: len(frame)].copy_(_payload(frame, device))
    mine[len(frame) :].zero_()
    received = [_receive_buffer(width, device) for _ in range(world)]
    for (t, _), (n, tail) in zip(received, announced, strict=True):
        _arm(t, n, tail)
    dist.all_gather([t for t, _ in received], mine, group=group)
    del mine
    me = dist.get_rank(group)
    return [
        frame if r == me else _to_frame(t, host, n, f"rank {r}", tail=tail, verify=verify)
        for r, ((t, host), (n, tail)) in enumerate(zip(received, announced, strict=True))
    ]
