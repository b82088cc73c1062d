"""Feeding a trainer: row ranges of a frame as views, token-budget micro-batches, sequence
packing, padded-batch options, and moving a decoded batch to a device in one call.

Row windows cost O(fields) torch calls plus O(rows in the window) for rebased offsets; the
batching arithmetic over the sequence offsets runs in Rust (``rust_codec/src/ops/batching.rs``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from py_wire import _native
from py_wire._args import count, flag
from py_wire._packed import PackedTensor
from py_wire._source import as_frame
from py_wire._staging import checked_device, checked_pin_memory

# -- batching over the sequence offsets --------------------------------------------------------


def micro_batches(
    frame: Any,
    max_tokens: int,
    sort: bool = False,
    *,
    padded: bool = True,
    pad_to_multiple_of: int = 1,
) -> list[list[int]]:
    """Row-index groups whose tokens fit ``max_tokens``, computed in Rust over the frame's
    sequence offsets (O(rows log rows), no payload touched).

    ``padded=True`` (NeMo-RL's dynamic batching) counts a micro-batch as rows x its longest
    row, the ``[B, L]`` a padded trainer allocates; ``padded=False`` counts real tokens (a
    packed / varlen trainer). Lengths are rounded up to ``pad_to_multiple_of`` first. ``sort=True``
    takes rows shortest first (stable), so each micro-batch holds similar lengths; otherwise
    rows stay in order and every group is a contiguous range (decode it with
    ``decode(frame, rows=range(g[0], g[-1] + 1))``, a view). A row longer than the budget
    raises ``WireError``.
    """
    return _native.micro_batch_rows(
        as_frame(frame),
        count("max_tokens", max_tokens, minimum=1),
        flag("sort", sort),
        flag("padded", padded),
        count("pad_to_multiple_of", pad_to_multiple_of, minimum=1),
    )


@dataclass(frozen=True)
class Bin:
    """One packed micro-batch: ``rows`` of the frame laid end to end."""

    rows: list[int]
    #: Each row's token count, in ``rows`` order.
    lengths: torch.Tensor
    #: ``[len(rows) + 1]`` int32 cumulative lengths (flash-attention's ``cu_seqlens``).
    cu_seqlens: torch.Tensor
    #: ``[num_tokens]`` int64 position of each token in its row.
    position_ids: torch.Tensor

    @property
    def num_tokens(self) -> int:
        return int(self.cu_seqlens[-1])


def pack_sequences(frame: Any, max_tokens: int, *, pad_to_multiple_of: int = 1) -> list[Bin]:
    """Sequence packing, first-fit decreasing: rows sorted longest first, each into the first
    bin with room, bins of at most ``max_tokens`` tokens (each row's length rounded up to
    ``pad_to_multiple_of``, e.g. 2 x context-parallel size). The assignment runs in Rust over the
    sequence offsets; ``cu_seqlens`` and ``position_ids`` are built per bin with vectorised
    torch ops. Gather a bin's tokens with ``take_rows(frame, bin.rows)`` (one copy of that bin).
    """
    bins, lengths = _native.pack_rows(
        as_frame(frame),
        count("max_tokens", max_tokens, minimum=1),
        count("pad_to_multiple_of", pad_to_multiple_of, minimum=1),
    )
    all_lengths = torch.tensor(lengths, dtype=torch.int64)
    out = []
    for rows in bins:
        lens = all_lengths[rows]
        cu = torch.zeros(len(rows) + 1, dtype=torch.int32)
        torch.cumsum(lens, 0, out=cu[1:])
        starts = torch.repeat_interleave(cu[:-1].to(torch.int64), lens)
        positions = torch.arange(int(cu[-1]), dtype=torch.int64) - starts
        out.append(Bin(rows=rows, lengths=lens, cu_seqlens=cu, position_ids=positions))
    return out


# -- devices -----------------------------------------------------------------------------------


def to(
    decoded: Any,
    device: str | torch.device,
    non_blocking: bool = False,
    *,
    pin_memory: bool = False,
) -> Any:
    """Move a decoded batch (a dict, list or tuple of tensors, jagged nested tensors and
    :class:`PackedTensor`) to ``device`` in one call, structure kept.

    A decoded PackedTensor moves its values tensor once (one transfer per field, not per
    segment); its row tables stay on the host, where row lookups read them. ``pin_memory``
    first copies host tensors into page-locked memory (only meaningful, and only allowed,
    when CUDA is available), so ``non_blocking=True`` transfers are truly asynchronous.
    """
    device = checked_device(device)
    flag("non_blocking", non_blocking)
    pin_memory = checked_pin_memory(pin_memory)

    def move(t: torch.Tensor) -> torch.Tensor:
        if pin_memory and t.device.type == "cpu" and not t.is_nested:
            t = t.pin_memory()
        return t.to(device, non_blocking=non_blocking)

    def walk(x: Any) -> Any:
        if isinstance(x, torch.Tensor):
            return move(x)
        if isinstance(x, PackedTensor):
            return x._map(move)  # a decoded value moves its frame's values once
        if isinstance(x, Mapping):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if isinstance(x, tuple):
            return tuple(walk(v) for v in x)
        return x

    return walk(decoded)
