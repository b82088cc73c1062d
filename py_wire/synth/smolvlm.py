"""SmolVLM GRPO batches (schema ``smolvlm``).

The processor splits each image into square tiles plus a downscaled global view and emits one
``[1, tiles, 3, S, S]`` tensor per call (tiles are the pack dim, dim 1), with a 0/1 int64
``pixel_attention_mask`` ``[1, tiles, S, S]`` marking each tile's valid pixels (the global view
and edge tiles are smaller than ``S`` and zero-padded). ``S`` varies between calls.

Each tile is ``<fake_token_around_image>`` + ``<image>`` x ``image_seq_len`` in the prompt, and
the last one is closed by another ``<fake_token_around_image>``. The two ids are representative
(the schema has no placeholder contract, so nothing checks them); text tokens are drawn below
the 49152-entry base vocabulary.
"""

from __future__ import annotations

import torch

from py_wire.synth._common import training_fields
from py_wire.synth._media import (
    check_misalign_row,
    drop_first,
    randint,
    text_only_groups,
    vocab_tokens,
)

FAKE_TOKEN_AROUND_IMAGE, IMAGE = 49189, 49190
BASE_VOCAB = 49152


def smolvlm_batch(
    num_samples: int = 8,
    *,
    seed: int = 0,
    max_images: int = 2,
    max_grid: int = 2,
    tile_sizes: tuple[int, ...] = (256, 384),
    image_seq_len: int = 64,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    max_response: int = 512,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``smolvlm`` schema; every image is a ``rows x cols`` grid of tiles
    (``1..max_grid`` each) plus its global view. ``misalign_row`` drops one ``<image>`` from
    that row's first tile run (the schema has no contract, so the batch still encodes)."""
    check_misalign_row(misalign_row, num_samples)
    gen = torch.Generator().manual_seed(seed)
    text_only = text_only_groups(gen, num_samples, group_size, text_only_fraction)
    ids: list[torch.Tensor] = []
    prompt_lengths: list[int] = []
    pixel_rows: list[torch.Tensor | None] = []
    mask_rows: list[torch.Tensor | None] = []
    prompt = pixels = mask = None
    for i in range(num_samples):
        if i % group_size == 0:
            is_text_only = text_only[i // group_size]
            n_images = 0 if is_text_only else randint(gen, 1, max_images)
            size = tile_sizes[randint(gen, 0, len(tile_sizes) - 1)]
            valid: list[tuple[int, int]] = []  # true (h, w) of every tile, in order
            parts = [vocab_tokens(gen, randint(gen, 16, 256), BASE_VOCAB)]
            for _ in range(n_images):
                rows, cols = randint(gen, 1, max_grid), randint(gen, 1, max_grid)
                edge_h, edge_w = randint(gen, size // 2, size), randint(gen, size // 2, size)
                for r in range(rows):
                    for c in range(cols):
                        valid.append(
                            (edge_h if r == rows - 1 else size, edge_w if c == cols - 1 else size)
                        )
                # The global view keeps the aspect ratio within one tile.
                scale = max(rows * size, cols * size)
                valid.append(
                    (max(1, rows * size * size // scale), max(1, cols * size * size // scale))
                )
                for _ in range(rows * cols + 1):
                    parts += [
                        torch.tensor([FAKE_TOKEN_AROUND_IMAGE]),
                        torch.full((image_seq_len,), IMAGE),
                    ]
                parts += [
                    torch.tensor([FAKE_TOKEN_AROUND_IMAGE]),
                    vocab_tokens(gen, randint(gen, 0, 16), BASE_VOCAB),
                ]
            prompt = torch.cat(parts)
            pixels, mask = _tiles(gen, valid, size) if valid else (None, None)
        assert prompt is not None
        response = vocab_tokens(gen, randint(gen, 64, max_response), BASE_VOCAB)
        row_ids = torch.cat([prompt, response])
        if i == misalign_row:
            row_ids = row_ids[drop_first(row_ids, (IMAGE,), i)]
        ids.append(row_ids)
        prompt_lengths.append(len(prompt))
        pixel_rows.append(pixels)
        mask_rows.append(mask)
    lengths = [len(t) for t in ids]
    return {
        "input_ids": ids,
        "pixel_values": pixel_rows,
        "pixel_attention_mask": mask_rows,
        **training_fields(gen, prompt_lengths, lengths, group_size),
    }


def _tiles(
    gen: torch.Generator, valid: list[tuple[int, int]], size: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[1, n, 3, S, S]`` pixels and the ``[1, n, S, S]`` int64 mask of their valid region."""
    pixels = torch.zeros(1, len(valid), 3, size, size)
    mask = torch.zeros(1, len(valid), size, size, dtype=torch.int64)
    for k, (h, w) in enumerate(valid):
        pixels[0, k, :, :h, :w] = torch.rand(3, h, w, generator=gen) * 2 - 1
        mask[0, k, :h, :w] = 1
    return pixels, mask
