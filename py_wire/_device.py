"""Frames in device memory: validated on the host from their header and index tables alone,
decoded as views of the device buffer. The payload never leaves the device."""

from __future__ import annotations

import numpy as np
import torch

from py_wire import _native
from py_wire._native import Frame, FrameError

#: The u64 that opens every frame: its header's length.
HEADER_LENGTH_BYTES = 8
_ALIGN = 64


def host_shadow(buf: torch.Tensor) -> Frame:
    """A host :class:`Frame` that validates the frame in ``buf`` (a 1-D uint8 tensor on any
    device) as a host frame would be validated, from a copy of its header and index tables
    (sequence offsets, CSR tables: a few bytes per row). Every other byte of the shadow is zero:
    the payload stays where it is, and decoding takes its views from ``buf``."""
    if buf.dtype != torch.uint8 or buf.dim() != 1 or not buf.is_contiguous():
        raise FrameError(
            f"a tensor frame must be 1-D contiguous uint8, got {buf.dtype} {tuple(buf.shape)}"
        )
    size = buf.numel()
    if size < HEADER_LENGTH_BYTES:
        raise FrameError(f"frame is {size} bytes, shorter than the 8-byte header length")
    header_len = int.from_bytes(buf[:HEADER_LENGTH_BYTES].cpu().numpy().tobytes(), "little")
    prefix_len = HEADER_LENGTH_BYTES + header_len
    if prefix_len > size:
        raise FrameError(
            f"header length {header_len} exceeds the {size - 8} bytes after it (truncated frame?)"
        )
    prefix = buf[:prefix_len].cpu().numpy()
    frame_len, ranges = _native.frame_validation_ranges(prefix)
    if frame_len > size:
        raise FrameError(
            f"the frame's tensors end at byte {frame_len} but the buffer holds {size} "
            "(truncated frame?)"
        )
    # np.zeros maps untouched zero pages: only the copied ranges cost memory. Aligned like a
    # frame, so wrapping it copies nothing.
    raw = np.zeros(frame_len + _ALIGN, dtype=np.uint8)
    skip = (-raw.ctypes.data) % _ALIGN
    shadow = raw[skip : skip + frame_len]
    spans = [(start, length) for start, length in ranges if length]
    if spans:
        # One transfer for all the pieces.
        host = torch.cat([buf[s : s + n] for s, n in spans]).cpu().numpy()
        at = 0
        for s, n in spans:
            shadow[s : s + n] = host[at : at + n]
            at += n
    return Frame.from_buffer(shadow)
