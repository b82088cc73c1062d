"""The Qwen-VL family's batch builder, shared by the Qwen3-VL and Qwen2.5-VL video generators.

Each image (video) is a ``(t, h, w)`` patch grid: ``t*h*w`` rows of pixel patches and
``t*h*w / 4`` ``<|image_pad|>`` (``<|video_pad|>``) tokens between ``<|vision_start|>`` and
``<|vision_end|>``. A GRPO group's samples share the prompt's media tensors (the same objects),
so a frame stores them once.
"""

from __future__ import annotations

import torch

from py_wire.synth._common import text_tokens, training_fields
from py_wire.synth._media import check_misalign_row, drop_first, randint, text_only_groups

VISION_START, VISION_END, IMAGE_PAD, VIDEO_PAD = 151652, 151653, 151655, 151656
MERGE = 2
TEMPORAL_PATCH = 2
TEXT, IMAGE, VIDEO = 0, 1, 2


def image_grid(gen: torch.Generator, min_patches: int, max_patches: int) -> tuple[int, int, int]:
    """A ``(1, h, w)`` grid with even ``h``, ``w`` (so ``h*w/4`` is whole) in the patch budget."""
    for _ in range(1000):
        h, w = 2 * randint(gen, 4, 32), 2 * randint(gen, 4, 32)
        if min_patches <= h * w <= max_patches:
            return 1, h, w
    raise ValueError(f"no image grid with {min_patches}..{max_patches} patches")


def video_grid(gen: torch.Generator, max_t: int, max_side: int) -> tuple[int, int, int]:
    """A ``(t, h, w)`` grid: ``t`` temporal patches of 2 frames, even ``h``, ``w``."""
    return (
        randint(gen, 1, max_t),
        2 * randint(gen, 2, max_side // 2),
        2 * randint(gen, 2, max_side // 2),
    )


def qwen_family_batch(
    num_samples: int,
    *,
    seed: int,
    patch_width: int,
    max_images: int,
    max_videos: int,
    text_only_fraction: float,
    group_size: int,
    min_patches: int,
    max_patches: int,
    max_video_t: int,
    max_video_side: int,
    max_response: int,
    misalign_row: int | None,
) -> dict[str, object]:
    """A Qwen-VL batch; with ``max_videos > 0`` it also has the video fields."""
    check_misalign_row(misalign_row, num_samples)
    gen = torch.Generator().manual_seed(seed)
    text_only = text_only_groups(gen, num_samples, group_size, text_only_fraction)
    media: dict[str, list[torch.Tensor | None]] = {
        "pixel_values": [],
        "image_grid_thw": [],
        "pixel_values_videos": [],
        "video_grid_thw": [],
        "second_per_grid_ts": [],
    }
    ids: list[torch.Tensor] = []
    type_ids: list[torch.Tensor] = []
    prompt_lengths: list[int] = []
    prompt = prompt_types = None
    shared: dict[str, torch.Tensor | None] = {}
    for i in range(num_samples):
        if i % group_size == 0:
            is_text_only = text_only[i // group_size]
            n_images = n_videos = 0
            while not is_text_only and n_images + n_videos == 0:
                n_images = randint(gen, 0 if max_videos else 1, max_images)
                n_videos = randint(gen, 0, max_videos) if max_videos else 0
            images = [image_grid(gen, min_patches, max_patches) for _ in range(n_images)]
            videos = [video_grid(gen, max_video_t, max_video_side) for _ in range(n_videos)]
            # Media in prompt order: images and videos interleaved as a chat would place them.
            order = [IMAGE] * n_images + [VIDEO] * n_videos
            order = [order[j] for j in torch.randperm(len(order), generator=gen).tolist()]
            first = text_tokens(gen, randint(gen, 16, 256))
            parts, kinds = [first], [torch.zeros_like(first)]
            grids = {IMAGE: iter(images), VIDEO: iter(videos)}
            for kind in order:
                t, h, w = next(grids[kind])
                run = t * h * w // MERGE**2
                pad = IMAGE_PAD if kind == IMAGE else VIDEO_PAD
                parts += [
                    torch.tensor([VISION_START]),
                    torch.full((run,), pad),
                    torch.tensor([VISION_END]),
                    text_tokens(gen, randint(gen, 0, 32)),
                ]
                kinds += [
                    torch.zeros(1, dtype=torch.int64),
                    torch.full((run,), kind, dtype=torch.int64),
                    torch.zeros(1, dtype=torch.int64),
                    torch.zeros(len(parts[-1]), dtype=torch.int64),
                ]
            prompt, prompt_types = torch.cat(parts), torch.cat(kinds)
            shared = {
                "pixel_values": _pixels(gen, images, patch_width),
                "image_grid_thw": _grid_tensor(images),
                "pixel_values_videos": _pixels(gen, videos, patch_width),
                "video_grid_thw": _grid_tensor(videos),
                "second_per_grid_ts": _seconds(gen, len(videos)),
            }
        assert prompt is not None and prompt_types is not None
        response = text_tokens(gen, randint(gen, 64, max_response))
        row_ids = torch.cat([prompt, response])
        row_types = torch.cat([prompt_types, torch.zeros_like(response)])
        if i == misalign_row:
            keep = drop_first(row_ids, (IMAGE_PAD, VIDEO_PAD), i)
            row_ids, row_types = row_ids[keep], row_types[keep]
        ids.append(row_ids)
        type_ids.append(row_types)
        prompt_lengths.append(len(prompt))
        for name, rows in media.items():
            rows.append(shared[name])
    lengths = [len(t) for t in ids]
    out: dict[str, object] = {
        "input_ids": ids,
        "mm_token_type_ids": type_ids,
        "pixel_values": media["pixel_values"],
        "image_grid_thw": media["image_grid_thw"],
    }
    if max_videos:
        for name in ("pixel_values_videos", "video_grid_thw", "second_per_grid_ts"):
            out[name] = media[name]
    out.update(training_fields(gen, prompt_lengths, lengths, group_size))
    return out


def _pixels(
    gen: torch.Generator, grids: list[tuple[int, int, int]], width: int
) -> torch.Tensor | None:
    if not grids:
        return None
    return torch.randn(sum(t * h * w for t, h, w in grids), width, generator=gen)


def _grid_tensor(grids: list[tuple[int, int, int]]) -> torch.Tensor | None:
    return torch.tensor(grids, dtype=torch.int64) if grids else None


def _seconds(gen: torch.Generator, n: int) -> torch.Tensor | None:
    """Seconds per temporal grid step, ``temporal_patch_size / fps``, fps from 0.5, 1, 2, 4."""
    if not n:
        return None
    fps = torch.tensor([0.5, 1.0, 2.0, 4.0])[torch.randint(0, 4, (n,), generator=gen)]
    return (TEMPORAL_PATCH / fps).to(torch.float32)
