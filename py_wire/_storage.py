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


#: torch dtypes numpy holds as they are: ``torch.from_numpy`` of such an array is the tensor
#: itself, without the ``view(dtype)`` other dtypes (bfloat16, float8) take.
_NUMPY_NATIVE = {
    torch.bool,
    torch.uint8,
    torch.int8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.float32,
    torch.float64,
    torch.complex64,
    torch.complex128,
}


class RowCutter:
    """Rows ``[lo, hi)`` (along dim 0) of one contiguous host tensor, each cut as a tensor over
    exactly those rows' bytes: a micro-batch's slice of a field pickles, saves and moves as its
    own bytes, never the whole field. The same memory (no copy); O(1) per cut: a numpy slice of
    the field's elements and one ``torch.from_numpy`` (a ``view(dtype)`` more where numpy has
    no such dtype), the cheapest own-storage tensor torch builds."""

    __slots__ = ("_dtype", "_elements", "_native", "_shape", "_tensor")

    def __init__(self, t: torch.Tensor) -> None:
        self._tensor = t
        self._dtype = t.dtype
        self._shape = tuple(t.shape[1:])
        self._native = t.dtype in _NUMPY_NATIVE
        #: The field's elements (numpy's dtype of the same size where numpy lacks torch's),
        #: shaped ``[rows, ...]``; None for what is not a plain contiguous host tensor.
        self._elements: np.ndarray | None = None
        host = t.device.type == "cpu" and not t.is_nested and t.layout == torch.strided
        if host and t.dim() > 0 and t.is_contiguous() and t.nbytes > 0:
            start = int(t.storage_offset()) * t.element_size()
            whole = _storage_array(t)[start : start + t.nbytes]
            element = _numpy_dtype(t.dtype) if self._native else f"u{t.element_size()}"
            self._elements = whole.view(element).reshape(t.shape)

    def __call__(self, lo: int, hi: int) -> torch.Tensor:
        elements = self._elements
        if elements is None:  # not a plain contiguous host tensor (a device tensor): a view
            return self._tensor[lo:hi]
        if hi <= lo:
            return torch.empty((max(hi - lo, 0), *self._shape), dtype=self._dtype)
        return self._own(elements[lo:hi])

    def ranges(self, bounds: list[tuple[int, int]], size: int | None = None) -> list[torch.Tensor]:
        """``[self(lo, hi) for lo, hi in bounds]``, the same tensors, each over exactly its rows'
        bytes. ``size``: the bounds are ``size`` rows each from row 0, in order (the last one
        may be shorter, none empty), so all of them but the last come from one reshape and one
        C-level loop (no Python frame per cut)."""
        elements = self._elements
        if elements is None or size is None or not bounds:
            return [self(a, b) for a, b in bounds]
        full = len(elements) // size
        if full == 0:  # one micro-batch, shorter than size (which may be any int)
            return [self(a, b) for a, b in bounds]
        whole = elements[: full * size].reshape(full, size, *self._shape)
        cuts = list(map(torch.from_numpy, whole))
        if not self._native:
            cuts = [t.view(self._dtype) for t in cuts]
        if len(bounds) > full:  # the shorter last micro-batch
            cuts.append(self(full * size, len(elements)))
        return cuts

    def shaped(self, lo: int, hi: int, shape: list[int]) -> torch.Tensor:
        """Elements ``[lo, hi)`` of a 1-D field as a tensor of ``shape`` (their count), over
        exactly their bytes: a packed segment. Raises ``ValueError`` (numpy's) or
        ``RuntimeError`` (torch's) when ``shape`` does not hold them."""
        elements = self._elements
        if elements is None or hi <= lo:
            return self._tensor[lo:hi].view(shape)
        return self._own(elements[lo:hi].reshape(shape))

    def _own(self, part: np.ndarray) -> torch.Tensor:
        tensor = torch.from_numpy(part)
        return tensor if self._native else tensor.view(self._dtype)


_NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {}


def _numpy_dtype(dtype: torch.dtype) -> np.dtype:
    found = _NUMPY_DTYPES.get(dtype)
    if found is None:
        found = _NUMPY_DTYPES[dtype] = torch.empty(0, dtype=dtype).numpy().dtype
    return found
