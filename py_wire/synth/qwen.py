"""Qwen2.5-VL GRPO batches (schema ``qwen2_5_vl``).

Each image is a ``(1, h, w)`` patch grid: ``h*w`` rows of 1176 pixels values and
``h*w / 4`` ``<|image_pad|>`` tokens between ``<|vision_start|>`` and ``<|vision_end|>``.
A GRPO group's samples share the prompt's pixel tensor (the same object), so the frame stores
it once.
"""

from __future__ import annotations

import torch

from py_wire.synth._common import text_tokens, training_fields

VISION_START, VISION_END, IMAGE_PAD = 151652, 151653, 151655
PATCH_WIDTH = 1176  # 3 channels * temporal patch 2 * 14 * 14
MERGE = 2


def _grid(gen: torch.Generator, min_patches: int, max_patches: int) -> tuple[int, int, int]:
    while True:
        h = 2 * int(torch.randint(4, 33, (1,), generator=gen))
        w = 2 * int(torch.randint(4, 33, (1,), generator=gen))
        if min_patches <= h * w <= max_patches:
            return 1, h, w


def qwen2_5_vl_batch(
    num_samples: int = 32,
    *,
    seed: int = 0,
    max_images: int = 4,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    min_patches: int = 256,
    max_patches: int = 2048,
    max_response: int = 1024,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``qwen2_5_vl`` schema. ``misalign_row`` drops one placeholder token from
    that row's first image run (the generation engine shrank the image; the trainer did not)."""
    gen = torch.Generator().manual_seed(seed)
    pixel_rows: list[torch.Tensor | None] = []
    grid_rows: list[torch.Tensor | None] = []
    ids, type_ids, prompt_lengths = [], [], []
    prompt = prompt_types = pixels = grid = None
    for i in range(num_samples):
        if i % group_size == 0:
            text_only = float(torch.rand(1, generator=gen)) < text_only_fraction
            n_images = (
                0 if text_only else int(torch.randint(1, max_images + 1, (1,), generator=gen))
            )
            grids = [_grid(gen, min_patches, max_patches) for _ in range(n_images)]
            parts, kinds = [text_tokens(gen, int(torch.randint(16, 257, (1,), generator=gen)))], []
            kinds.append(torch.zeros_like(parts[0]))
            for t, h, w in grids:
                run = t * h * w // MERGE**2
                parts += [
                    torch.tensor([VISION_START]),
                    torch.full((run,), IMAGE_PAD),
                    torch.tensor([VISION_END]),
                ]
                kinds += [torch.zeros(1, dtype=torch.int64), torch.ones(run, dtype=torch.int64)]
                kinds.append(torch.zeros(1, dtype=torch.int64))
            prompt, prompt_types = torch.cat(parts), torch.cat(kinds)
            total_patches = sum(t * h * w for t, h, w in grids)
            pixels = torch.randn(total_patches, PATCH_WIDTH, generator=gen) if grids else None
            grid = torch.tensor(grids, dtype=torch.int64) if grids else None
        assert prompt is not None and prompt_types is not None
        response = text_tokens(gen, int(torch.randint(64, max_response + 1, (1,), generator=gen)))
        row_ids = torch.cat([prompt, response])
        row_types = torch.cat([prompt_types, torch.zeros_like(response)])
        if i == misalign_row and pixels is not None:
            first_pad = int((row_ids == IMAGE_PAD).nonzero()[0, 0])
            keep = torch.ones(len(row_ids), dtype=torch.bool)
            keep[first_pad] = False
            row_ids, row_types = row_ids[keep], row_types[keep]
        ids.append(row_ids)
        type_ids.append(row_types)
        prompt_lengths.append(len(prompt))
        pixel_rows.append(pixels)
        grid_rows.append(grid)
    lengths = [len(t) for t in ids]
    return {
        "input_ids": ids,
        "mm_token_type_ids": type_ids,
        "pixel_values": pixel_rows,
        "image_grid_thw": grid_rows,
        **training_fields(gen, prompt_lengths, lengths, group_size),
    }
