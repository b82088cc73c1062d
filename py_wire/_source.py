"""What every entry point accepts as a frame: a :class:`Frame` or bytes-like data, wrapped
(and validated, in Rust) without a copy."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np
import torch

from py_wire._native import Frame, FrameError


def as_frame(data: Any) -> Frame:
    """Wrap ``data`` (a Frame, bytes, bytearray, memoryview, mmap, numpy uint8 array or torch
    uint8 tensor) as a validated Frame, without copying unless its base is misaligned."""
    if isinstance(data, Frame):
        return data
    if isinstance(data, torch.Tensor):
        if data.dtype != torch.uint8 or data.dim() != 1 or not data.is_contiguous():
            raise FrameError(
                f"a tensor frame must be 1-D contiguous uint8, got {data.dtype} {tuple(data.shape)}"
            )
        if data.device.type != "cpu":
            raise FrameError(f"a frame on {data.device} must be copied to host memory first")
        data = data.numpy()
    if isinstance(data, np.ndarray) and data.dtype != np.uint8:
        raise FrameError(f"an array frame must be uint8, got {data.dtype}")
    if not isinstance(data, bytes | bytearray | memoryview | mmap.mmap | np.ndarray):
        raise FrameError(f"cannot decode a {type(data).__name__}; pass bytes-like data or a Frame")
    return Frame.from_buffer(data)
