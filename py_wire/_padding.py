"""The padded layout's arithmetic, shared by ``decode(layout="padded")``, micro-batches and the
trainer helpers: widths rounded up to a multiple, and the attention mask over them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch

from py_wire._args import count
from py_wire._native import Frame, fill_padding_with_first_token

#: The key ``decode(..., attention_mask=True)`` adds.
ATTENTION_MASK = "attention_mask"


def padded_width(lengths: torch.Tensor, multiple: int | None) -> int:
    return round_up(int(lengths.max()) if lengths.numel() else 0, multiple)


def round_up(width: int, multiple: int | None) -> int:
    """``width`` rounded up to ``pad_to_multiple_of`` (unchanged when it is None)."""
    if multiple is None:
        return width
    multiple = count("pad_to_multiple_of", multiple, minimum=1)
    return -(-width // multiple) * multiple


def attention_mask(lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]`` bool: True on each row's real tokens."""
    return torch.arange(width) < lengths[:, None]


def broadcast_first_token(
    out: dict[str, Any], names: Iterable[str], row_lengths: torch.Tensor | None
) -> None:
    """Each of ``names``' ``[B, L]`` padded tensors in ``out`` with its padding cells set to its
    row's first value, in place (the tensors are the padded layout's own copies): NeMo-RL's
    ``advantages`` broadcast. A row without tokens keeps its pad value."""
    if row_lengths is None:
        return
    for name in names:
        value = out.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[1] == 0:
            continue
        if value.device.type == "cpu" and value.is_contiguous():
            # The codec writes the padding cells only, in place: no pass over the valid ones.
            fill_padding_with_first_token(value, row_lengths)
            continue
        lengths = row_lengths.to(value.device)
        # One elementwise pass over the cells, in place (where reads each cell before it writes).
        padding = torch.arange(value.shape[1], device=value.device) >= lengths[:, None]
        padding &= (lengths > 0)[:, None]
        torch.where(padding, value[:, :1], value, out=value)


def row_lengths(frame: Frame) -> torch.Tensor | None:
    """Each row's tokens, from the frame's sequence offsets (None: no sequence field)."""
    seq = frame.layout.seq_offsets
    if seq is None:
        return None
    offsets = np.frombuffer(memoryview(frame), np.int64, seq.nbytes // 8, seq.offset)
    return torch.from_numpy(np.diff(offsets))
