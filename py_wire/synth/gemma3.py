"""Gemma3 GRPO batches (schema ``gemma3``).

Every image is resized to 896 x 896; with pan-and-scan, an image is followed by 2..4 crops of
the same size. Each image and each crop is ``<boi>`` + 256 image soft tokens + ``<eoi>`` in the
prompt, ``token_type_ids`` is 1 on the soft tokens, and ``num_crops`` holds the crops per image.
A GRPO group's samples share the prompt's pixel tensor (the same object).
"""

from __future__ import annotations

import torch

from py_wire.synth._common import text_tokens, training_fields
from py_wire.synth._media import chance, check_misalign_row, drop_first, randint, text_only_groups

BOI, EOI, IMAGE_SOFT_TOKEN = 255999, 256000, 262144
TOKENS_PER_IMAGE = 256
IMAGE_SIZE = 896  # the released checkpoints' processor config


def gemma3_batch(
    num_samples: int = 8,
    *,
    seed: int = 0,
    max_images: int = 2,
    pan_and_scan_fraction: float = 0.25,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    max_response: int = 512,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``gemma3`` schema. ``misalign_row`` drops one soft token from that row's
    first image run; that row must have an image."""
    check_misalign_row(misalign_row, num_samples)
    gen = torch.Generator().manual_seed(seed)
    text_only = text_only_groups(gen, num_samples, group_size, text_only_fraction)
    ids: list[torch.Tensor] = []
    type_ids: list[torch.Tensor] = []
    pixel_rows: list[torch.Tensor | None] = []
    crop_rows: list[torch.Tensor | None] = []
    prompt_lengths: list[int] = []
    prompt = prompt_types = pixels = crops = None
    for i in range(num_samples):
        if i % group_size == 0:
            is_text_only = text_only[i // group_size]
            n_images = 0 if is_text_only else randint(gen, 1, max_images)
            num_crops = [
                randint(gen, 2, 4) if chance(gen, pan_and_scan_fraction) else 0
                for _ in range(n_images)
            ]
            first = text_tokens(gen, randint(gen, 16, 256))
            parts = [first]
            for n in num_crops:
                parts.append(_image_run())
                if n:
                    # "Here is the original image ... and here are some crops ..."
                    parts.append(text_tokens(gen, randint(gen, 8, 16)))
                    parts += [_image_run() for _ in range(n)]
                parts.append(text_tokens(gen, randint(gen, 0, 32)))
            prompt = torch.cat(parts)
            prompt_types = (prompt == IMAGE_SOFT_TOKEN).to(torch.int64)
            items = n_images + sum(num_crops)
            # Normalized to [-1, 1] as Gemma3's processor does (mean 0.5, std 0.5).
            pixels = (
                torch.rand(items, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen) * 2 - 1
                if items
                else None
            )
            crops = torch.tensor(num_crops, dtype=torch.int64) if n_images else None
        assert prompt is not None and prompt_types is not None
        response = text_tokens(gen, randint(gen, 64, max_response))
        row_ids = torch.cat([prompt, response])
        row_types = torch.cat([prompt_types, torch.zeros_like(response)])
        if i == misalign_row:
            keep = drop_first(row_ids, (IMAGE_SOFT_TOKEN,), i)
            row_ids, row_types = row_ids[keep], row_types[keep]
        ids.append(row_ids)
        type_ids.append(row_types)
        prompt_lengths.append(len(prompt))
        pixel_rows.append(pixels)
        crop_rows.append(crops)
    lengths = [len(t) for t in ids]
    return {
        "input_ids": ids,
        "token_type_ids": type_ids,
        "pixel_values": pixel_rows,
        "num_crops": crop_rows,
        **training_fields(gen, prompt_lengths, lengths, group_size),
    }


def _image_run() -> torch.Tensor:
    return torch.cat(
        [
            torch.tensor([BOI]),
            torch.full((TOKENS_PER_IMAGE,), IMAGE_SOFT_TOKEN),
            torch.tensor([EOI]),
        ]
    )
