"""Nemotron Omni GRPO batches (schema ``nemotron_omni``).

Images keep their own resolution (multiples of 16 pixels, 192..512 a side by default). A prompt
spreads its images over one or two turns; each turn is one segment of ``pixel_values``,
``[n, 3, Hmax, Wmax]`` zero-padded to that turn's largest image, with ``imgs_sizes`` ``[n, 2]``
holding the true ``(H, W)`` and ``num_frames`` ``[n]`` all 1 (stills). Each image is ``<img>`` +
``<image>`` x ``int((H // 16) * 0.5) * int((W // 16) * 0.5)`` + ``</img>`` in the prompt.

The token ids are the schema's representative ones (131072..131074, just past a 131072-entry
base vocabulary), so text tokens are drawn below 131072 and never collide with them.
"""

from __future__ import annotations

import torch

from py_wire.synth._common import training_fields
from py_wire.synth._media import (
    chance,
    check_misalign_row,
    drop_first,
    randint,
    text_only_groups,
    vocab_tokens,
)

IMAGE, IMG_START, IMG_END = 131072, 131073, 131074
BASE_VOCAB = 131072
PATCH_SIZE = 16
DOWNSAMPLE_RATIO = 0.5


def image_tokens(height: int, width: int) -> int:
    """Feature count (= ``<image>`` tokens) of an image of true size ``height x width``."""
    return int((height // PATCH_SIZE) * DOWNSAMPLE_RATIO) * int(
        (width // PATCH_SIZE) * DOWNSAMPLE_RATIO
    )


def nemotron_omni_batch(
    num_samples: int = 16,
    *,
    seed: int = 0,
    max_images: int = 3,
    min_side: int = 192,
    max_side: int = 512,
    two_turn_fraction: float = 0.5,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    max_response: int = 512,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``nemotron_omni`` schema (pixels fp32; the schema casts them to bf16 on
    the wire). ``misalign_row`` drops one ``<image>`` from that row's first image run; that row
    must have an image."""
    check_misalign_row(misalign_row, num_samples)
    gen = torch.Generator().manual_seed(seed)
    text_only = text_only_groups(gen, num_samples, group_size, text_only_fraction)
    ids: list[torch.Tensor] = []
    prompt_lengths: list[int] = []
    media: dict[str, list[list[torch.Tensor] | None]] = {
        "pixel_values": [],
        "imgs_sizes": [],
        "num_frames": [],
    }
    prompt: torch.Tensor | None = None
    shared: dict[str, list[torch.Tensor] | None] = {}
    for i in range(num_samples):
        if i % group_size == 0:
            is_text_only = text_only[i // group_size]
            n_images = 0 if is_text_only else randint(gen, 1, max_images)
            sizes = [
                (
                    PATCH_SIZE * randint(gen, min_side // PATCH_SIZE, max_side // PATCH_SIZE),
                    PATCH_SIZE * randint(gen, min_side // PATCH_SIZE, max_side // PATCH_SIZE),
                )
                for _ in range(n_images)
            ]
            split = (
                randint(gen, 1, n_images - 1)
                if n_images > 1 and chance(gen, two_turn_fraction)
                else n_images
            )
            turns = [t for t in (sizes[:split], sizes[split:]) if t]
            parts = []
            for turn in turns:
                parts.append(vocab_tokens(gen, randint(gen, 16, 128), BASE_VOCAB))
                for h, w in turn:
                    parts += [
                        torch.tensor([IMG_START]),
                        torch.full((image_tokens(h, w),), IMAGE),
                        torch.tensor([IMG_END]),
                        vocab_tokens(gen, randint(gen, 0, 16), BASE_VOCAB),
                    ]
            if not turns:
                parts.append(vocab_tokens(gen, randint(gen, 16, 256), BASE_VOCAB))
            prompt = torch.cat(parts)
            shared = {
                "pixel_values": [_turn_pixels(gen, turn) for turn in turns] or None,
                "imgs_sizes": [torch.tensor(turn, dtype=torch.int64) for turn in turns] or None,
                "num_frames": [torch.ones(len(turn), dtype=torch.int64) for turn in turns] or None,
            }
        assert prompt is not None
        response = vocab_tokens(gen, randint(gen, 64, max_response), BASE_VOCAB)
        row_ids = torch.cat([prompt, response])
        if i == misalign_row:
            row_ids = row_ids[drop_first(row_ids, (IMAGE,), i)]
        ids.append(row_ids)
        prompt_lengths.append(len(prompt))
        for name, rows in media.items():
            rows.append(shared[name])
    lengths = [len(t) for t in ids]
    return {
        "input_ids": ids,
        **media,
        **training_fields(gen, prompt_lengths, lengths, group_size),
    }


def _turn_pixels(gen: torch.Generator, sizes: list[tuple[int, int]]) -> torch.Tensor:
    """One turn's images, ``[n, 3, Hmax, Wmax]``, each zero-padded beyond its true size."""
    h_max, w_max = max(h for h, _ in sizes), max(w for _, w in sizes)
    out = torch.zeros(len(sizes), 3, h_max, w_max)
    for k, (h, w) in enumerate(sizes):
        out[k, :, :h, :w] = torch.rand(3, h, w, generator=gen) * 2 - 1
    return out
