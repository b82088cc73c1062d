"""Qwen3-VL GRPO batches (schema ``qwen3_vl``).

As Qwen2.5-VL, with the vision tower's 16-pixel patches: each image is a ``(1, h, w)`` grid of
``h*w`` pixel rows 3*2*16*16 = 1536 wide and ``h*w / 4`` ``<|image_pad|>`` tokens between
``<|vision_start|>`` and ``<|vision_end|>``.
"""

from __future__ import annotations

from py_wire.synth._qwen_family import qwen_family_batch

PATCH_WIDTH = 1536  # 3 channels * temporal patch 2 * 16 * 16


def qwen3_vl_batch(
    num_samples: int = 16,
    *,
    seed: int = 0,
    max_images: int = 3,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    min_patches: int = 64,
    max_patches: int = 1024,
    max_response: int = 512,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``qwen3_vl`` schema. ``misalign_row`` drops one ``<|image_pad|>`` from
    that row's first image run (the generation engine shrank the image; the trainer did not);
    that row must have an image."""
    return qwen_family_batch(
        num_samples,
        seed=seed,
        patch_width=PATCH_WIDTH,
        max_images=max_images,
        max_videos=0,
        text_only_fraction=text_only_fraction,
        group_size=group_size,
        min_patches=min_patches,
        max_patches=max_patches,
        max_video_t=0,
        max_video_side=0,
        max_response=max_response,
        misalign_row=misalign_row,
    )
