"""A small model of NeMo-RL's ``PackedTensor`` (NeMo-RL is not installable from PyPI), written
here from its documented attributes: ``tensors`` holds physical segments (``None`` for a row
without media in the legacy form), ``dim_to_pack``, ``pad_to_max_shape``, and, with
deduplication, a CSR map from logical rows to segments (``_row_offsets`` over
``_segment_indices``) with per-segment ``_segment_provenance``. ``len()`` is the logical row
count. Only what py_wire's interop reads and the tests compare is modelled."""

from __future__ import annotations

import itertools
import os
from collections.abc import Iterator, Sequence

import torch


class PackedTensor:
    def __init__(
        self,
        tensors: Sequence[torch.Tensor | None],
        dim_to_pack: int,
        pad_to_max_shape: bool = False,
        _row_offsets: Sequence[int] | None = None,
        _segment_indices: Sequence[int] | None = None,
        _segment_provenance: Sequence[bytes] | None = None,
    ) -> None:
        self.tensors = list(tensors)
        self.dim_to_pack = dim_to_pack
        self.pad_to_max_shape = pad_to_max_shape
        self._row_offsets = None if _row_offsets is None else list(_row_offsets)
        self._segment_indices = None if _segment_indices is None else list(_segment_indices)
        self._segment_provenance = (
            None if _segment_provenance is None else list(_segment_provenance)
        )

    @property
    def deduplication_enabled(self) -> bool:
        return self._segment_provenance is not None

    def enable_deduplication(self) -> PackedTensor:
        if self._row_offsets is None:
            self._row_offsets = list(range(len(self.tensors) + 1))
            self._segment_indices = list(range(len(self.tensors)))
        self._segment_provenance = [os.urandom(16) for _ in self.tensors]
        return self

    def __len__(self) -> int:
        if self._row_offsets is not None:
            return len(self._row_offsets) - 1
        return len(self.tensors)

    def logical_rows(self) -> list[list[torch.Tensor]]:
        if self._row_offsets is None or self._segment_indices is None:
            return [[] if t is None else [t] for t in self.tensors]
        rows = []
        for a, b in itertools.pairwise(self._row_offsets):
            segments = [self.tensors[i] for i in self._segment_indices[a:b]]
            rows.append([t for t in segments if t is not None])
        return rows

    def slice(self, indices: Sequence[int]) -> PackedTensor:
        """The rows at ``indices`` (what ``BatchedDataDict.slice`` / ``shard_by_batch_size``
        call): a legacy value stays one entry per row; a CSR value keeps each physical
        segment once and its provenance."""
        idx = list(indices)
        if self._segment_provenance is None and self._row_offsets is None:
            return PackedTensor([self.tensors[i] for i in idx], self.dim_to_pack)
        assert self._row_offsets is not None and self._segment_indices is not None
        kept: dict[int, int] = {}
        offsets, refs = [0], []
        for row in idx:
            for p in self._segment_indices[self._row_offsets[row] : self._row_offsets[row + 1]]:
                kept.setdefault(p, len(kept))
                refs.append(kept[p])
            offsets.append(len(refs))
        physical = list(kept)
        prov = self._segment_provenance
        return PackedTensor(
            [self.tensors[p] for p in physical],
            self.dim_to_pack,
            self.pad_to_max_shape,
            offsets,
            refs,
            None if prov is None else [prov[p] for p in physical],
        )

    @classmethod
    def concat(cls, values: Sequence[PackedTensor]) -> PackedTensor:
        """What ``BatchedDataDict.from_batches`` does to a packed key (NeMo-RL's gather of
        shards or fetches): with deduplication, rows of every value in order over physical
        segments interned by provenance alone (a segment without provenance gets a new one,
        so it is never merged); without, the legacy entries back to back."""
        if not any(v._segment_provenance is not None or v._row_offsets is not None for v in values):
            return cls([t for v in values for t in v.tensors], values[0].dim_to_pack)
        tensors: list[torch.Tensor | None] = []
        prov: list[bytes] = []
        where: dict[bytes, int] = {}
        offsets, refs = [0], []
        for v in values:
            ids = v._segment_provenance or [None] * len(v.tensors)
            local = []
            for t, p in zip(v.tensors, ids, strict=True):
                if p is None or p not in where:
                    p = os.urandom(16) if p is None else p
                    where[p] = len(tensors)
                    tensors.append(t)
                    prov.append(p)
                local.append(where[p])
            if v._row_offsets is None:
                rows = [[i] for i in range(len(v.tensors))]
            else:
                assert v._segment_indices is not None
                rows = [v._segment_indices[a:b] for a, b in itertools.pairwise(v._row_offsets)]
            for row in rows:
                refs.extend(local[i] for i in row)
                offsets.append(len(refs))
        return cls(tensors, values[0].dim_to_pack, values[0].pad_to_max_shape, offsets, refs, prov)

    def iter_logical_segments(self) -> Iterator[torch.Tensor]:
        for row in self.logical_rows():
            yield from row

    def as_tensor(self, device: str | torch.device | None = None) -> torch.Tensor | None:
        segments = list(self.iter_logical_segments())
        if not segments:
            return None
        out = torch.cat(segments, dim=self.dim_to_pack)
        return out if device is None else out.to(device)


class BatchedDataDict(dict):  # type: ignore[type-arg]
    """NeMo-RL's ``BatchedDataDict``: a dict whose ``__init__`` sets the micro-batch plan
    attributes ``shard_by_batch_size`` later fills on each shard (dynamic batching, sequence
    packing) to None."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        self.micro_batch_indices: list | None = None  # type: ignore[type-arg]
        self.micro_batch_lengths: list | None = None  # type: ignore[type-arg]
        self.elem_counts_per_gb: list | None = None  # type: ignore[type-arg]
