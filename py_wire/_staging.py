"""Micro-batches onto a device while the trainer computes: each micro-batch is packed into one
host buffer (page-locked with ``pin_memory=True``) by py_wire's copy threads, copied to the
device in one transfer on a side stream (``non_blocking``), and handed out as views of one
device buffer; the next micro-batch's copy is issued before the current one is handed out.

On a CUDA device the consumer's stream waits for the copy's event (no host synchronisation) and
the device buffer is recorded on the consumer's stream, so the caching allocator does not reuse
it while the step still reads it. Other devices (``"cpu"``...) take the same path
without streams: one buffer per micro-batch, its tensors views of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import torch

from py_wire._args import device as device_arg
from py_wire._args import flag
from py_wire._jagged import jagged
from py_wire._native import WireError, pack_into
from py_wire._packed import PackedTensor
from py_wire._typing import as_jagged

#: Each tensor starts at a multiple of this many bytes in the micro-batch's buffer.
ALIGN = 64
#: Host buffers a CUDA stager reuses in turn: the one being filled, and the one whose copy may
#: still be in flight.
RING = 2


def checked_device(device: object) -> torch.device:
    """``device`` as a torch device this process can allocate on (a :class:`WireError` naming
    it otherwise; a ``TypeError`` for a value that is not a device at all)."""
    dev: torch.device = device_arg("device", device)
    return dev


def checked_pin_memory(pin_memory: object) -> bool:
    """``pin_memory`` as a bool; True only where CUDA is (page-locked memory needs it)."""
    pin = flag("pin_memory", pin_memory)
    if pin and not torch.cuda.is_available():
        raise WireError("pin_memory needs CUDA, which this machine does not have")
    return pin


class Stager:
    """Stages micro-batches onto ``device``: :meth:`stage` issues one micro-batch's copy,
    :meth:`ready` hands it out once the consumer's stream may read it."""

    def __init__(self, device: object, pin_memory: object = False, threads: int | None = None):
        self.device = checked_device(device)
        self.pin_memory = checked_pin_memory(pin_memory)
        self.threads = threads
        self.stream: Any = None
        if self.device.type == "cuda":
            self.stream = torch.cuda.Stream(self.device)  # type: ignore[no-untyped-call]
        # Host buffers reused in turn on CUDA, each with the event of the last copy out of it.
        self._ring: list[tuple[torch.Tensor | None, Any]] = [(None, None)] * RING
        self._turn = 0

    def _host_buffer(self, nbytes: int) -> tuple[int, torch.Tensor]:
        """A host buffer of ``nbytes``. On CUDA one of the ring's, grown when too small, once
        the copy last issued from it has finished (the micro-batch before the one pending: it
        has, unless the copies lag the packing by two micro-batches). Page-locking a fresh
        buffer costs about as much as filling it, so the ring pays it once a run. Off CUDA the
        device buffer can be the host buffer itself, so each micro-batch has its own."""
        if self.stream is None:
            return -1, torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.pin_memory)
        slot, self._turn = self._turn, (self._turn + 1) % RING
        buffer, event = self._ring[slot]
        if event is not None:
            event.synchronize()
        if buffer is None or buffer.numel() < nbytes:
            grown = nbytes if buffer is None else max(nbytes, buffer.numel() * 5 // 4)
            buffer = torch.empty(grown, dtype=torch.uint8, pin_memory=self.pin_memory)
            self._ring[slot] = (buffer, None)
        return slot, buffer[:nbytes]

    def stage(self, batch: dict[str, Any]) -> tuple[dict[str, Any], Any, torch.Tensor]:
        """Pack ``batch`` into one host buffer and issue its copy to the device. Returns the
        micro-batch over the device buffer, the copy's event (None off CUDA) and the buffer."""
        leaves: list[torch.Tensor] = []
        plan = _plan(batch, leaves, {})
        offsets, total = packing(leaves)
        slot, host = self._host_buffer(total)
        # One multi-threaded copy in Rust, the GIL released: torch's copy_ per leaf was the
        # staged feed's bottleneck on an H200 (docs/trainer.md).
        pack_into(leaves, offsets, host.numpy(), self.threads)
        event = None
        if self.stream is not None:
            with torch.cuda.stream(self.stream):
                buffer = host.to(self.device, non_blocking=True)
                event = torch.cuda.Event()  # type: ignore[no-untyped-call]
                event.record(self.stream)
            self._ring[slot] = (self._ring[slot][0], event)
        else:
            buffer = host.to(self.device)
        views = [_view(buffer, off, t) for t, off in zip(leaves, offsets, strict=True)]
        return _build(plan, views), event, buffer

    def ready(self, staged: tuple[dict[str, Any], Any, torch.Tensor]) -> dict[str, Any]:
        batch, event, buffer = staged
        if event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(event)
            buffer.record_stream(current)
        return batch


def staged(batches: Iterator[dict[str, Any]], stager: Stager) -> Iterator[dict[str, Any]]:
    """``batches`` on the stager's device, the next one's copy issued before the current one
    is handed out."""
    nxt = next(batches, None)
    pending = None if nxt is None else stager.stage(nxt)
    while pending is not None:
        current = pending
        nxt = next(batches, None)
        pending = None if nxt is None else stager.stage(nxt)
        yield stager.ready(current)


def packing(leaves: list[torch.Tensor]) -> tuple[list[int], int]:
    """Where each of ``leaves`` starts in a micro-batch's buffer (each at a multiple of
    ``ALIGN``), and the buffer's length."""
    offsets, total = [], 0
    for t in leaves:
        offsets.append(total)
        total += -(-t.nbytes // ALIGN) * ALIGN
    return offsets, total


def _view(buffer: torch.Tensor, offset: int, like: torch.Tensor) -> torch.Tensor:
    return buffer[offset : offset + like.nbytes].view(like.dtype).view(like.shape)


def _plan(value: Any, leaves: list[torch.Tensor], seen: dict[int, int]) -> Any:
    """``value`` with each tensor replaced by its index in ``leaves`` (appended).
    A tensor met twice (the offsets jagged fields share, a segment rows share) is one leaf,
    and stays one tensor on the device."""
    if isinstance(value, torch.Tensor):
        if value.is_nested:
            return (
                "nested",
                _plan(value.values(), leaves, seen),
                _plan(as_jagged(value).offsets(), leaves, seen),
            )
        index = seen.get(id(value))
        if index is None:
            index = seen[id(value)] = len(leaves)
            leaves.append(value)  # pack_into gathers any strides
        return ("tensor", index)
    if isinstance(value, PackedTensor):
        segments, offsets, refs = value.csr()
        return ("packed", [_plan(t, leaves, seen) for t in segments], (offsets, refs, value))
    if isinstance(value, dict):
        return ("dict", {k: _plan(v, leaves, seen) for k, v in value.items()})
    if isinstance(value, list):
        return ("list", [_plan(v, leaves, seen) for v in value])
    return ("value", value)


def _build(plan: Any, views: list[torch.Tensor]) -> Any:
    kind = plan[0]
    if kind == "tensor":
        return views[plan[1]]
    if kind == "nested":
        return jagged(_build(plan[1], views), _build(plan[2], views))
    if kind == "packed":
        offsets, refs, source = plan[2]
        segments = [_build(t, views) for t in plan[1]]
        return PackedTensor.from_csr(
            segments, offsets, refs, source.dim_to_pack, source.segment_ids
        )
    if kind == "dict":
        return {k: _build(v, views) for k, v in plan[1].items()}
    if kind == "list":
        return [_build(v, views) for v in plan[1]]
    return plan[1]
