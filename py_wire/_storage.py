"""Decoded tensors over exactly their own bytes.

torch pickles, ``torch.save``s and Ray serialises a tensor's whole storage, not the slice a view
covers: a 4-row shard of a batch decoded as views of one frame would carry the whole frame. So
every tensor ``decode`` returns gets a storage of its own bytes, built with ``torch.frombuffer``
over the same memory (no copy; the new storage keeps the old one, and so the frame, alive).
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["RowCutter", "StorageSlicer", "exact_storage"]


def _storage_array(t: torch.Tensor) -> np.ndarray:
    """The whole storage behind ``t`` as a writable numpy uint8 array (no copy; it keeps the
    storage alive). numpy, not the source buffer, so a read-only source raises no warning: its
    read-only semantics are decode's ``writable`` policy."""
    storage = t.untyped_storage()
    whole = torch.empty(0, dtype=torch.uint8).set_(storage, 0, (storage.nbytes(),), (1,))
    return whole.numpy()


class StorageSlicer:
    """Cuts tensors that view one storage into tensors over exactly their own bytes."""

    __slots__ = ("_array", "_ptr")

    def __init__(self, base: torch.Tensor) -> None:
        self._ptr = base.untyped_storage().data_ptr()
        self._array: np.ndarray | None = None

    def __call__(self, t: torch.Tensor) -> torch.Tensor:
        if not _needs_cut(t):
            return t
        if t.untyped_storage().data_ptr() != self._ptr:
            return exact_storage(t)
        if self._array is None:
            self._array = _storage_array(t)
        return _cut(self._array, t)


def exact_storage(t: torch.Tensor) -> torch.Tensor:
    """``t`` itself when its storage holds only its bytes (or it is not a plain contiguous host
    tensor); otherwise the same memory under a storage of exactly ``t.nbytes`` bytes."""
    if not _needs_cut(t):
        return t
    return _cut(_storage_array(t), t)


def _needs_cut(t: torch.Tensor) -> bool:
    if t.is_nested or t.layout is not torch.strided:
        return False
    return t.untyped_storage().nbytes() != t.nbytes and t.is_contiguous() and t.is_cpu


def _cut(array: np.ndarray, t: torch.Tensor) -> torch.Tensor:
    nbytes = t.nbytes
    if nbytes == 0:
        return torch.empty(t.shape, dtype=t.dtype)
    flat = torch.frombuffer(
        array, dtype=torch.uint8, count=nbytes, offset=int(t.storage_offset()) * t.element_size()
    )
    return flat.view(t.dtype).view(t.shape)


class RowCutter:
    """Rows ``[lo, hi)`` (along dim 0) of one contiguous host tensor, each cut as a tensor over
    exactly those rows' bytes: a micro-batch's slice of a field pickles, saves and moves as its
    own bytes, never the whole field. The same memory (no copy); O(1) per cut."""

    __slots__ = ("_array", "_dtype", "_row_bytes", "_shape", "_tensor")

    def __init__(self, t: torch.Tensor) -> None:
        self._tensor = t
        self._dtype = t.dtype
        self._shape = tuple(t.shape[1:])
        self._row_bytes = t.element_size()
        for d in self._shape:
            self._row_bytes *= d
        self._array: np.ndarray | None = None
        host = t.device.type == "cpu" and not t.is_nested and t.layout == torch.strided
        if host and t.dim() > 0 and t.is_contiguous() and t.nbytes > 0:
            start = int(t.storage_offset()) * t.element_size()
            self._array = _storage_array(t)[start : start + t.nbytes]

    def __call__(self, lo: int, hi: int) -> torch.Tensor:
        array = self._array
        if array is None:  # not a plain contiguous host tensor (a device tensor): a view
            return self._tensor[lo:hi]
        if hi <= lo or self._row_bytes == 0:
            return torch.empty((max(hi - lo, 0), *self._shape), dtype=self._dtype)
        part = array[lo * self._row_bytes : hi * self._row_bytes]
        return torch.from_numpy(part).view(self._dtype).view(hi - lo, *self._shape)
