"""The padded layout's arithmetic, shared by ``decode(layout="padded")``, micro-batches and the
trainer helpers: widths rounded up to a multiple, and the attention mask over them."""

from __future__ import annotations

import torch

from py_wire._args import count

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
