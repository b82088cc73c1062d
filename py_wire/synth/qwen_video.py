"""Qwen2.5-VL GRPO batches with images and videos (schema ``qwen2_5_vl_video``).

A video is a ``(t, h, w)`` grid (``t`` temporal patches of 2 frames): ``t*h*w`` rows of 1176
pixel values in ``pixel_values_videos`` and one ``<|vision_start|>`` + ``<|video_pad|>`` x
``t*h*w / 4`` + ``<|vision_end|>`` run; ``second_per_grid_ts`` holds ``2 / fps`` per video.
Images are as in :func:`py_wire.synth.qwen2_5_vl_batch`; a prompt interleaves both.
"""

from __future__ import annotations

from py_wire.synth._qwen_family import qwen_family_batch

PATCH_WIDTH = 1176  # 3 channels * temporal patch 2 * 14 * 14


def qwen2_5_vl_video_batch(
    num_samples: int = 16,
    *,
    seed: int = 0,
    max_images: int = 2,
    max_videos: int = 2,
    text_only_fraction: float = 0.25,
    group_size: int = 4,
    min_patches: int = 64,
    max_patches: int = 1024,
    max_video_t: int = 4,
    max_video_side: int = 16,
    max_response: int = 512,
    misalign_row: int | None = None,
) -> dict[str, object]:
    """A batch for the ``qwen2_5_vl_video`` schema. ``misalign_row`` drops one pad token from
    that row's first image or video run; that row must have media."""
    if max_videos < 1:
        raise ValueError("max_videos must be >= 1 (use qwen2_5_vl_batch for image-only batches)")
    return qwen_family_batch(
        num_samples,
        seed=seed,
        patch_width=PATCH_WIDTH,
        max_images=max_images,
        max_videos=max_videos,
        text_only_fraction=text_only_fraction,
        group_size=group_size,
        min_patches=min_patches,
        max_patches=max_patches,
        max_video_t=max_video_t,
        max_video_side=max_video_side,
        max_response=max_response,
        misalign_row=misalign_row,
    )
