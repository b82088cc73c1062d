"""Helpers shared by the multimodal generators: bounded random ints and misaligned rows."""

from __future__ import annotations

import torch


def randint(gen: torch.Generator, low: int, high: int) -> int:
    """An int in ``[low, high]``."""
    return int(torch.randint(low, high + 1, (1,), generator=gen))


def chance(gen: torch.Generator, p: float) -> bool:
    return float(torch.rand(1, generator=gen)) < p


def vocab_tokens(gen: torch.Generator, n: int, vocab: int) -> torch.Tensor:
    """``n`` ordinary text tokens below ``vocab`` (for families whose special ids sit inside
    :data:`py_wire.synth._common.TEXT_VOCAB`)."""
    return torch.randint(0, vocab, (n,), generator=gen, dtype=torch.int64)


def check_misalign_row(misalign_row: int | None, num_samples: int) -> None:
    if misalign_row is not None and not 0 <= misalign_row < num_samples:
        raise ValueError(f"misalign_row {misalign_row} is out of range for {num_samples} rows")


def drop_first(row: torch.Tensor, token_ids: tuple[int, ...], row_index: int) -> torch.Tensor:
    """A mask keeping every token of ``row`` except the first one in ``token_ids`` (one token
    dropped from the row's first placeholder run: the generation engine shrank the image, the
    trainer did not)."""
    hits = torch.isin(row, torch.tensor(token_ids, dtype=row.dtype)).nonzero()
    if not hits.numel():
        raise ValueError(
            f"misalign_row {row_index} has no placeholder run to misalign (a text-only row); "
            "pick a row with media"
        )
    keep = torch.ones(len(row), dtype=torch.bool)
    keep[int(hits[0, 0])] = False
    return keep


def text_only_groups(
    gen: torch.Generator, num_samples: int, group_size: int, fraction: float
) -> list[bool]:
    """Per GRPO group, whether its prompt is text-only (each with probability ``fraction``).
    With two groups or more and ``0 < fraction < 1`` a batch always has both kinds, so even a
    small batch exercises rows without media next to rows with them."""
    n_groups = -(-num_samples // group_size)
    flags = [chance(gen, fraction) for _ in range(n_groups)]
    if n_groups >= 2 and 0 < fraction < 1 and len(set(flags)) == 1:
        flags[-1] = not flags[-1]
    return flags
