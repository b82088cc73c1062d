# ruff: noqa
# Copyright (c) 2026, NVIDIA CORPORATION.  All rights reserved.
# Licensed under the Apache License, Version 2.0 (http://www.apache.org/licenses/LICENSE-2.0).
#
# A faithful stand-in for NeMo-RL's PackedTensor (NeMo-RL is not installable from PyPI): the class
# verbatim (ruff-formatted) from NVIDIA-NeMo/RL nemo_rl/data/multimodal_utils.py at commit 7ea279abfbeb698b092856d0dab61e7cf39bc909,
# used by the tests as the reference semantics py_wire's PackedTensor must match.
"""NeMo-RL's ``PackedTensor``, verbatim (see the header)."""

import uuid
from copy import deepcopy
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F


class PackedTensor:
    """A logical batch of rows backed by packable tensor segments.

    The default representation is intentionally the legacy one: every entry in
    ``tensors`` is one logical row and no deduplication metadata is allocated.
    ``enable_deduplication`` adds stable provenance to the physical segments.
    Operations that combine or slice dedup-enabled values then use a CSR-like
    logical-row mapping:

    - ``_row_offsets`` partitions the flattened logical segment references.
    - ``_segment_indices`` maps each logical segment reference to ``tensors``.
    - ``_segment_provenance`` is stable across deepcopy/pickle and is the only
      evidence used to re-intern physical segments.

    Prompt identity is deliberately absent: belonging to the same prompt group
    makes media a candidate for sharing, but never proves media equality.

    Worked example. Prompt A has one image and prompt B has two, each already
    merged by :meth:`merge_segments` into a single logical row::

        A: tensors = [tA]        _row_offsets = [0, 1]  _segment_indices = [0]
        B: tensors = [tB0, tB1]  _row_offsets = [0, 2]  _segment_indices = [0, 1]

    GRPO then expands each prompt into G generations. The rows are deep-copied
    while ``_prepare_multimodal_sharing`` aliases the media leaves, so
    :meth:`concat` re-interns them by provenance. For G=3::

        tensors          = [tA, tB0, tB1]            # 3 physical segments
        _row_offsets     = [0, 1, 2, 3, 5, 7, 9]     # 6 logical rows
        _segment_indices = [0, 0, 0, 1, 2, 1, 2, 1, 2]
        len()            = 6

    Six logical rows over nine segment references and three physical tensors,
    so physical memory is flat in G. Row 4 reads as
    ``_segment_indices[_row_offsets[4]:_row_offsets[5]] == [1, 2]``, i.e. both
    of prompt B's images, without copying either.
    """

    def __init__(
        self,
        tensors: Union[torch.Tensor, list[Optional[torch.Tensor]], list[None]],
        dim_to_pack: int,
        *,
        pad_to_max_shape: bool = False,
        _row_offsets: Optional[list[int]] = None,
        _segment_indices: Optional[list[int]] = None,
        _segment_provenance: Optional[list[bytes]] = None,
    ) -> None:
        """Wrap per-item tensors for concatenation along ``dim_to_pack``.

        Args:
            tensors: A tensor or list of per-item tensors. List entries may be
                ``None`` for items without this modality.
            dim_to_pack: Dimension along which ``as_tensor`` concatenates.
            pad_to_max_shape: Pad every non-packing dimension to its batch-wide
                maximum before concatenating. All tensors must have the same rank.
        """
        assert tensors is not None, "Input tensors to PackedTensor cannot be None"

        if isinstance(tensors, torch.Tensor):
            self.tensors: list[Optional[torch.Tensor]] = [tensors]
        elif isinstance(tensors, list):
            if not tensors and _row_offsets is None:
                raise AssertionError("Input tensors to PackedTensor must be a non-empty list")
            self.tensors: list[Optional[torch.Tensor]] = tensors
        else:
            raise ValueError(f"Unsupported type for input tensors to PackedTensor: {type(tensors)}")
        self.dim_to_pack = dim_to_pack
        self.pad_to_max_shape = pad_to_max_shape
        if (_row_offsets is None) != (_segment_indices is None):
            raise ValueError(
                "_row_offsets and _segment_indices must either both be set or both be None"
            )
        if _row_offsets is not None:
            if not _row_offsets or _row_offsets[0] != 0:
                raise ValueError("_row_offsets must start with 0")
            if any(
                current > following for current, following in zip(_row_offsets, _row_offsets[1:])
            ):
                raise ValueError("_row_offsets must be non-decreasing")
            assert _segment_indices is not None
            if _row_offsets[-1] != len(_segment_indices):
                raise ValueError(
                    "_row_offsets must end at the number of logical segment references"
                )
            if _segment_indices and (
                min(_segment_indices) < 0 or max(_segment_indices) >= len(self.tensors)
            ):
                raise ValueError(
                    "_segment_indices cannot reference an out-of-range physical segment"
                )
        if _segment_provenance is not None and len(_segment_provenance) != len(self.tensors):
            raise ValueError("_segment_provenance must have one entry per physical segment")
        self._row_offsets = _row_offsets
        self._segment_indices = _segment_indices
        self._segment_provenance = _segment_provenance

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Restore both current and pre-deduplication pickled instances."""
        self.__dict__.update(state)
        self.__dict__.setdefault("_row_offsets", None)
        self.__dict__.setdefault("_segment_indices", None)
        self.__dict__.setdefault("_segment_provenance", None)

    @property
    def deduplication_enabled(self) -> bool:
        """Whether this value carries stable physical-segment provenance."""
        return self._segment_provenance is not None

    def logical_segment_counts_by_row(self) -> list[int]:
        """Return the number of non-empty media segments in each logical row."""
        if self._row_offsets is None:
            return [int(tensor is not None) for tensor in self.tensors]
        assert self._segment_indices is not None
        return [
            sum(
                self.tensors[physical_index] is not None
                for physical_index in self._segment_indices[
                    self._row_offsets[row] : self._row_offsets[row + 1]
                ]
            )
            for row in range(len(self))
        ]

    def iter_logical_segments(self):
        """Yield physical tensor segments in logical row/segment order."""
        if self._segment_indices is None:
            yield from self.tensors
            return
        for physical_index in self._segment_indices:
            yield self.tensors[physical_index]

    def enable_deduplication(self) -> "PackedTensor":
        """Assign stable provenance lazily without changing logical contents."""
        if self._segment_provenance is None:
            self._segment_provenance = [uuid.uuid4().bytes for _ in range(len(self.tensors))]
        return self

    def _row_segment_indices(self, row: int) -> list[int]:
        if self._row_offsets is None:
            return [row]
        assert self._segment_indices is not None
        return self._segment_indices[self._row_offsets[row] : self._row_offsets[row + 1]]

    def __deepcopy__(self, memo: dict[int, Any]) -> "PackedTensor":
        """Share immutable media segments only for an explicitly enabled value."""
        if self._row_offsets is None and not self.deduplication_enabled:
            copied = PackedTensor(
                [deepcopy(item, memo) for item in self.tensors],
                self.dim_to_pack,
                pad_to_max_shape=self.pad_to_max_shape,
            )
        else:
            copied = PackedTensor(
                (
                    list(self.tensors)
                    if self.deduplication_enabled
                    else [deepcopy(item, memo) for item in self.tensors]
                ),
                self.dim_to_pack,
                pad_to_max_shape=self.pad_to_max_shape,
                _row_offsets=(list(self._row_offsets) if self._row_offsets is not None else None),
                _segment_indices=(
                    list(self._segment_indices) if self._segment_indices is not None else None
                ),
                _segment_provenance=(
                    list(self._segment_provenance) if self._segment_provenance is not None else None
                ),
            )
        memo[id(self)] = copied
        return copied

    def as_tensor(self, device: Optional[torch.device] = None) -> Optional[torch.Tensor]:
        if device is not None:
            # Move only non-None tensors to device, preserve Nones
            for i, item in enumerate(self.tensors):
                if item is not None:
                    self.tensors[i] = item.to(device)
        tensors = self.tensors
        if self._segment_indices is not None:
            tensors = [self.tensors[index] for index in self._segment_indices]
        non_none_tensors = [t for t in tensors if t is not None]
        if len(non_none_tensors) == 0:
            return None

        # Some multimodal processors produce a different shape per prompt,
        # such as dynamic-resolution images, variable-frame videos, or audio
        # feature sequences. Concatenation already permits the packing
        # dimension to vary; when explicitly requested, pad every other
        # dimension to the largest size in the batch.
        if self.pad_to_max_shape:
            ranks = {tensor.ndim for tensor in non_none_tensors}
            if len(ranks) != 1:
                raise ValueError(
                    "pad_to_max_shape requires tensors with the same rank, "
                    f"but received ranks {sorted(ranks)}"
                )

            rank = ranks.pop()
            pack_dim = self.dim_to_pack if self.dim_to_pack >= 0 else rank + self.dim_to_pack
            if not 0 <= pack_dim < rank:
                raise IndexError(
                    f"dim_to_pack={self.dim_to_pack} is invalid for tensors with rank {rank}"
                )
            max_shape = [
                max(tensor.shape[dim] for tensor in non_none_tensors) for dim in range(rank)
            ]

            def pad_to_batch_shape(tensor: torch.Tensor) -> torch.Tensor:
                padding = []
                for dim in reversed(range(rank)):
                    padding.extend(
                        (
                            0,
                            0 if dim == pack_dim else max_shape[dim] - tensor.shape[dim],
                        )
                    )
                return F.pad(tensor, padding)

            non_none_tensors = [pad_to_batch_shape(tensor) for tensor in non_none_tensors]

        return torch.cat(non_none_tensors, dim=self.dim_to_pack).to(device)

    def __len__(self) -> int:
        if self._row_offsets is not None:
            return len(self._row_offsets) - 1
        return len(self.tensors)

    def to(self, device: str | torch.device) -> "PackedTensor":
        """Move physical segments in place, retaining provenance.

        A device move is value-preserving, so provenance stays valid and two
        copies of the same segment still re-intern. This is the opposite of
        :meth:`to_dtype`, which changes values and therefore mints fresh
        provenance. The asymmetry is deliberate: :meth:`concat` re-interns on
        provenance alone, so a value-changing operation must not keep it.

        The corollary is that two values sharing provenance on different
        devices would merge to whichever appears first in ``concat``. That is
        currently unreachable -- ``BatchedDataDict.to`` and
        ``get_multimodal_dict`` only touch top-level values, while message-level
        segments are nested inside ``message_log`` and worker-side device moves
        happen post-serialization on independent copies -- and it would surface
        as a loud mixed-device ``torch.cat`` error rather than silent
        corruption. Keep it that way: do not move a subset of segments.
        """
        self.tensors = [item.to(device) if item is not None else None for item in self.tensors]
        return self

    def to_dtype(self, dtype: torch.dtype) -> "PackedTensor":
        """Return an independent wrapper without expanding logical segments.

        Dtype conversion creates new physical tensor values, so deduplicated
        inputs receive new provenance. When the dtype already matches, immutable
        tensor segments and their provenance remain shared, but mutable wrapper
        state is copied. The logical row-to-segment mapping is preserved exactly.

        Non-floating-point segments are returned unchanged. Integer media
        metadata (grid sizes, frame counts) is index data, so casting it to a
        float dtype would silently corrupt it.
        """

        def converted(item: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
            if item is None or not item.is_floating_point():
                return item
            return item.to(dtype=dtype)

        requires_conversion = any(
            item is not None and item.is_floating_point() and item.dtype != dtype
            for item in self.tensors
        )

        return PackedTensor(
            (
                [converted(item) for item in self.tensors]
                if requires_conversion
                else list(self.tensors)
            ),
            self.dim_to_pack,
            pad_to_max_shape=self.pad_to_max_shape,
            _row_offsets=(list(self._row_offsets) if self._row_offsets is not None else None),
            _segment_indices=(
                list(self._segment_indices) if self._segment_indices is not None else None
            ),
            _segment_provenance=(
                [uuid.uuid4().bytes for _ in self.tensors]
                if requires_conversion and self._segment_provenance is not None
                else (
                    list(self._segment_provenance) if self._segment_provenance is not None else None
                )
            ),
        )

    def slice(self, indices: Union[list[int], torch.Tensor]) -> "PackedTensor":
        idx = indices.tolist() if isinstance(indices, torch.Tensor) else indices
        if not self.deduplication_enabled and self._row_offsets is None:
            tensors = [self.tensors[i] for i in idx]
            return PackedTensor(
                tensors,
                self.dim_to_pack,
                pad_to_max_shape=self.pad_to_max_shape,
            )

        physical_remap: dict[int, int] = {}
        tensors: list[Optional[torch.Tensor]] = []
        provenances: list[bytes] = []
        segment_indices: list[int] = []
        row_offsets = [0]
        for row in idx:
            if row < 0:
                row += len(self)
            if not 0 <= row < len(self):
                raise IndexError(f"PackedTensor row index {row} is out of range")
            for physical_index in self._row_segment_indices(row):
                if physical_index not in physical_remap:
                    physical_remap[physical_index] = len(tensors)
                    tensors.append(self.tensors[physical_index])
                    if self._segment_provenance is not None:
                        provenances.append(self._segment_provenance[physical_index])
                segment_indices.append(physical_remap[physical_index])
            row_offsets.append(len(segment_indices))
        return PackedTensor(
            tensors,
            self.dim_to_pack,
            pad_to_max_shape=self.pad_to_max_shape,
            _row_offsets=row_offsets,
            _segment_indices=segment_indices,
            _segment_provenance=(provenances if self._segment_provenance is not None else None),
        )

    @classmethod
    def empty_like(cls, other: "PackedTensor") -> "PackedTensor":
        """Return empty logical rows matching ``other``."""
        return cls.empty_rows_like(other, len(other))

    @classmethod
    def empty_rows_like(cls, other: "PackedTensor", num_rows: int) -> "PackedTensor":
        """Return ``num_rows`` logical rows containing no media segments."""
        if num_rows < 0:
            raise ValueError("num_rows must be non-negative")
        if other.deduplication_enabled or other._row_offsets is not None:
            return cls(
                [],
                other.dim_to_pack,
                pad_to_max_shape=other.pad_to_max_shape,
                _row_offsets=[0] * (num_rows + 1),
                _segment_indices=[],
                _segment_provenance=[],
            )
        if num_rows == 0:
            return cls(
                [],
                other.dim_to_pack,
                pad_to_max_shape=other.pad_to_max_shape,
                _row_offsets=[0],
                _segment_indices=[],
                _segment_provenance=None,
            )
        return cls(
            [None] * num_rows,
            other.dim_to_pack,
            pad_to_max_shape=other.pad_to_max_shape,
        )

    @classmethod
    def concat(cls, from_packed_tensors: list["PackedTensor"]) -> "PackedTensor":
        """Concatenate a list of PackedTensor objects into a single PackedTensor.

        The underlying tensors from the PackedTensors are combined into a single list of tensors and used to create a new PackedTensor.

        Each batch must have the same dim_to_pack.

        Example:
        ```{doctest}
        >>> import torch
        >>> from nemo_rl.data.multimodal_utils import PackedTensor
        >>> p1 = PackedTensor([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])], dim_to_pack=0)
        >>> p2 = PackedTensor([torch.tensor([7, 8, 9])], dim_to_pack=0)
        >>> p3 = PackedTensor.concat([p1, p2])
        >>> p3.tensors
        [tensor([1, 2, 3]), tensor([4, 5, 6]), tensor([7, 8, 9])]
        >>> p3.as_tensor()
        tensor([1, 2, 3, 4, 5, 6, 7, 8, 9])
        >>>
        ```
        """
        dim_to_packs = [batch.dim_to_pack for batch in from_packed_tensors]
        assert len(set(dim_to_packs)) == 1, "All packed tensors must have the same dim_to_pack"
        pad_to_max_shapes = [batch.pad_to_max_shape for batch in from_packed_tensors]
        assert len(set(pad_to_max_shapes)) == 1, (
            "All packed tensors must have the same pad_to_max_shape setting"
        )
        if any(
            packed_tensor.deduplication_enabled or packed_tensor._row_offsets is not None
            for packed_tensor in from_packed_tensors
        ):
            tensors: list[Optional[torch.Tensor]] = []
            provenances: list[bytes] = []
            provenance_to_physical: dict[bytes, int] = {}
            segment_indices: list[int] = []
            row_offsets = [0]

            for packed_tensor in from_packed_tensors:
                physical_remap: dict[int, int] = {}
                for physical_index, tensor in enumerate(packed_tensor.tensors):
                    provenance = (
                        packed_tensor._segment_provenance[physical_index]
                        if packed_tensor._segment_provenance is not None
                        else None
                    )
                    if provenance is not None and provenance in provenance_to_physical:
                        new_index = provenance_to_physical[provenance]
                    else:
                        new_index = len(tensors)
                        tensors.append(tensor)
                        if provenance is None:
                            provenance = uuid.uuid4().bytes
                        provenances.append(provenance)
                        provenance_to_physical[provenance] = new_index
                    physical_remap[physical_index] = new_index

                for row in range(len(packed_tensor)):
                    segment_indices.extend(
                        physical_remap[index] for index in packed_tensor._row_segment_indices(row)
                    )
                    row_offsets.append(len(segment_indices))

            return cls(
                tensors,
                dim_to_packs[0],
                pad_to_max_shape=pad_to_max_shapes[0],
                _row_offsets=row_offsets,
                _segment_indices=segment_indices,
                _segment_provenance=provenances,
            )

        # Legacy flag-off behavior: concatenate the tensors without metadata.
        tensors = []
        for packed_tensor in from_packed_tensors:
            tensors.extend(packed_tensor.tensors)
        dim_to_pack = dim_to_packs[0]
        return cls(
            tensors,
            dim_to_pack,
            pad_to_max_shape=pad_to_max_shapes[0],
        )

    @classmethod
    def merge_segments(cls, from_packed_tensors: list["PackedTensor"]) -> "PackedTensor":
        """Merge message-turn values, collapsing compact inputs to one row.

        The legacy path retains one logical row per physical segment; its caller
        materializes those segments into one conversation row later.
        """
        if not any(
            packed_tensor.deduplication_enabled or packed_tensor._row_offsets is not None
            for packed_tensor in from_packed_tensors
        ):
            return cls.concat(from_packed_tensors)

        concatenated = cls.concat(from_packed_tensors)
        assert concatenated._segment_indices is not None
        return cls(
            concatenated.tensors,
            concatenated.dim_to_pack,
            pad_to_max_shape=concatenated.pad_to_max_shape,
            _row_offsets=[0, len(concatenated._segment_indices)],
            _segment_indices=concatenated._segment_indices,
            _segment_provenance=concatenated._segment_provenance,
        )

    @classmethod
    def flattened_concat(cls, from_packed_tensors: list["PackedTensor"]) -> "PackedTensor":
        """Given a list of PackedTensor objects, flattens each PackedTensor and then concatenates them into a single PackedTensor.

        Each PackedTensor is first flattened by packing along the PackedTensor's `dim_to_pack` dimension. Then, the resulting flattened tensors are used to create a new PackedTensor.

        This is different from `PackedTensor.concat` which simply extends the underlying list of tensors. This is important because the `slice` and `__len__` methods operate on the underlying list of tensors. Note, however, that calling `as_tensor` on the resulting PackedTensor will result in the same tensor as `concat`.

        Each batch must have the same dim_to_pack.

        Example:
        ```{doctest}
        >>> import torch
        >>> from nemo_rl.data.multimodal_utils import PackedTensor
        >>> p1 = PackedTensor([torch.tensor([1, 2, 3]), torch.tensor([4, 5, 6])], dim_to_pack=0)
        >>> p2 = PackedTensor([torch.tensor([7, 8, 9])], dim_to_pack=0)
        >>> p3 = PackedTensor.flattened_concat([p1, p2])
        >>> p3.tensors
        [tensor([1, 2, 3, 4, 5, 6]), tensor([7, 8, 9])]
        >>> p3.as_tensor()
        tensor([1, 2, 3, 4, 5, 6, 7, 8, 9])
        >>>
        ```
        """
        dim_to_packs = [batch.dim_to_pack for batch in from_packed_tensors]
        assert len(set(dim_to_packs)) == 1, "All packed tensors must have the same dim_to_pack"
        pad_to_max_shapes = [batch.pad_to_max_shape for batch in from_packed_tensors]
        assert len(set(pad_to_max_shapes)) == 1, (
            "All packed tensors must have the same pad_to_max_shape setting"
        )
        if any(
            packed_tensor.deduplication_enabled or packed_tensor._row_offsets is not None
            for packed_tensor in from_packed_tensors
        ):
            assert all(len(p) == 1 for p in from_packed_tensors), (
                "flattened_concat requires one logical row per input; "
                "merge_segments only collapses dedup-enabled values"
            )
            return cls.concat(from_packed_tensors)
        tensors = [p.as_tensor() for p in from_packed_tensors]
        return cls(
            tensors,
            from_packed_tensors[0].dim_to_pack,
            pad_to_max_shape=pad_to_max_shapes[0],
        )
