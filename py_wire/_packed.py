"""``PackedTensor``: rows of 0..k tensor segments, concatenated along a pack dim on demand.

Semantics follow NeMo-RL's PackedTensor (``as_tensor`` concatenates along ``dim_to_pack``,
``pad_to_max_shape`` pads every other dim, ``None`` marks a row without media) with CSR rows:
a row holds any number of segments, and decoded rows are lazy views into the frame.
"""

from __future__ import annotations

import itertools
import math
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from py_wire._args import count, flag, integer, padded_cells_backed
from py_wire._args import device as device_arg
from py_wire._args import items as items_arg
from py_wire._native import BatchError, FrameError, RowIndexError, WireError
from py_wire._rows import resolve_slice
from py_wire._storage import RowCutter, StorageSlicer

Row = list[torch.Tensor] | None


#: The most rows ``empty_rows_like`` makes: each costs a list entry, and nothing backs them.
MAX_EMPTY_ROWS = 1 << 24


class PackedRowIndexError(RowIndexError, IndexError):
    """A row of a :class:`PackedTensor` out of range: the ``IndexError`` NeMo-RL's raises, and
    py_wire's :class:`RowIndexError`."""


def _row_error(argument: str, row: int, num_rows: int) -> PackedRowIndexError:
    return PackedRowIndexError(
        f"{argument}: PackedTensor row {row} is out of range for {num_rows} rows"
    )


class PackDimError(BatchError, IndexError):
    """``dim_to_pack`` out of range for the segments: a ``BatchError`` that is also the
    ``IndexError`` NeMo-RL's ``PackedTensor`` raises."""


class PackedTensor:
    """A logical batch of rows backed by packable tensor segments: NeMo-RL's ``PackedTensor``
    (``nemo_rl/data/multimodal_utils.py``), method by method, plus lazy decoded views.

    NeMo-RL's representation: ``tensors`` holds one entry per row (``None``: no media) unless
    the CSR map is set: then ``tensors`` are *physical* segments, ``_row_offsets`` partitions
    the logical references and ``_segment_indices`` maps each to ``tensors``;
    ``_segment_provenance`` (one id per physical segment) turns deduplication on. ``len()`` is
    the logical row count.

    py_wire extras: build from ``list[Tensor | None | list[Tensor]]`` (a row with several
    segments gives the CSR form); ``pt[i]`` is row ``i``'s segments or ``None``; ``pt[a:b]``
    is :meth:`slice` over that range; ``rows()`` and ``segment_counts()``. A decoded value is
    backed by the frame: ``tensors`` and the CSR lists are built once, on first use, as views;
    ``as_tensor()`` is a view of the frame while the segments are stored in row order and
    ``tensors`` still holds them (reading ``tensors`` or iterating rows does not change that).
    """

    def __init__(
        self,
        tensors: Any,
        dim_to_pack: int = 0,
        *,
        pad_to_max_shape: bool = False,
        _row_offsets: list[int] | None = None,
        _segment_indices: list[int] | None = None,
        _segment_provenance: list[bytes] | None = None,
    ) -> None:
        if tensors is None:
            raise WireError("Input tensors to PackedTensor cannot be None")
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        elif not isinstance(tensors, list):
            tensors = items_arg("tensors", tensors)
        if _row_offsets is None and any(
            r is not None and not isinstance(r, torch.Tensor) for r in tensors
        ):
            # py_wire's rows of several segments: the CSR form over physical segments.
            flat: list[torch.Tensor | None] = []
            offsets, indices = [0], []
            for i, r in enumerate(tensors):
                segs = [] if r is None else [r] if isinstance(r, torch.Tensor) else None
                if segs is None:
                    segs = items_arg(f"tensors[{i}]", r)
                    for j, seg in enumerate(segs):
                        if not isinstance(seg, torch.Tensor):
                            raise TypeError(
                                f"tensors[{i}][{j}] must be a tensor, not {type(seg).__name__}"
                            )
                for seg in segs:
                    indices.append(len(flat))
                    flat.append(seg)
                offsets.append(len(indices))
            tensors, _row_offsets, _segment_indices = flat, offsets, indices
        if (_row_offsets is None) != (_segment_indices is None):
            raise WireError(
                "_row_offsets and _segment_indices must either both be set or both be None"
            )
        if _row_offsets is not None:
            assert _segment_indices is not None
            if not _row_offsets or _row_offsets[0] != 0:
                raise WireError("_row_offsets must start with 0")
            if any(a > b for a, b in itertools.pairwise(_row_offsets)):
                raise WireError("_row_offsets must be non-decreasing")
            if _row_offsets[-1] != len(_segment_indices):
                raise WireError("_row_offsets must end at the number of logical segment references")
            if _segment_indices and (
                min(_segment_indices) < 0 or max(_segment_indices) >= len(tensors)
            ):
                raise WireError(
                    "_segment_indices cannot reference an out-of-range physical segment"
                )
        if _segment_provenance is not None and len(_segment_provenance) != len(tensors):
            raise WireError("_segment_provenance must have one entry per physical segment")
        dim_to_pack = integer("dim_to_pack", dim_to_pack)
        flag("pad_to_max_shape", pad_to_max_shape)
        self._frame: _FrameRows | None = None
        self._built: list[Any] | None = None  # what the frame's tensors list was built as
        self._tensors: list[torch.Tensor | None] | None = tensors
        self.dim_to_pack = dim_to_pack
        self.pad_to_max_shape = pad_to_max_shape
        self.__row_offsets = _row_offsets
        self.__segment_indices = _segment_indices
        self._segment_provenance = _segment_provenance

    @classmethod
    def _from_frame(cls, frame_rows: _FrameRows, dim_to_pack: int) -> PackedTensor:
        pt = cls.__new__(cls)
        pt._frame = frame_rows
        pt._built = None
        pt._tensors = None
        pt.dim_to_pack = dim_to_pack
        pt.pad_to_max_shape = False
        pt.__row_offsets = None
        pt.__segment_indices = None
        pt._segment_provenance = None
        return pt

    @classmethod
    def _no_segments(
        cls, num_rows: int, rank: int, dtype: torch.dtype, dim_to_pack: int
    ) -> PackedTensor:
        """``num_rows`` rows without segments, built in O(1) Python calls."""
        tables = {
            "seg_shapes": torch.zeros((0, rank), dtype=torch.int64),
            "seg_offsets": torch.zeros(1, dtype=torch.int64),
            "row_offsets": torch.zeros(num_rows + 1, dtype=torch.int64),
            "row_segments": torch.zeros(0, dtype=torch.int64),
        }
        return cls._from_frame(_FrameRows(torch.zeros(0, dtype=dtype), tables, True), dim_to_pack)

    # -- NeMo-RL's state, built lazily from a frame -------------------------------------------

    def _materialize(self) -> None:
        """Build ``tensors`` (views) and the CSR lists from the frame, once. Rows with at most
        one segment and no sharing give NeMo-RL's legacy form (one entry per row); otherwise
        the CSR form, with provenance when segments are shared (deduplication on)."""
        if self._tensors is not None:
            return
        f = self._frame
        assert f is not None
        _, _, row_offsets, row_segments = f._tables()
        base, end = row_offsets[0], row_offsets[-1]
        refs = row_segments[base:end]
        physical = list(dict.fromkeys(refs))  # the segments these rows use, first use first
        segs = [f._segment(i) for i in physical]
        counts = [b - a for a, b in itertools.pairwise(row_offsets)]
        shared = len(physical) < len(refs)
        if not shared and all(c <= 1 for c in counts):
            self._tensors = [
                f._segment(row_segments[a]) if b > a else None
                for a, b in itertools.pairwise(row_offsets)
            ]
        else:
            where = {p: i for i, p in enumerate(physical)}
            self._tensors = list(segs)
            self.__row_offsets = [o - base for o in row_offsets]
            self.__segment_indices = [where[p] for p in refs]
            if shared:
                self._segment_provenance = [uuid.uuid4().bytes for _ in segs]
        self._built = list(self._tensors)

    @property
    def tensors(self) -> list[torch.Tensor | None]:
        """NeMo-RL's ``tensors``: one stable list (writes to it persist)."""
        self._materialize()
        assert self._tensors is not None
        return self._tensors

    @tensors.setter
    def tensors(self, value: list[torch.Tensor | None]) -> None:
        self._materialize()
        self._tensors = value

    @property
    def _row_offsets(self) -> list[int] | None:
        self._materialize()
        return self.__row_offsets

    @_row_offsets.setter
    def _row_offsets(self, value: list[int] | None) -> None:
        self._materialize()
        self.__row_offsets = value

    @property
    def _segment_indices(self) -> list[int] | None:
        self._materialize()
        return self.__segment_indices

    @_segment_indices.setter
    def _segment_indices(self, value: list[int] | None) -> None:
        self._materialize()
        self.__segment_indices = value

    def _frame_intact(self) -> _FrameRows | None:
        """The frame, while ``tensors`` still holds exactly the views built from it."""
        f = self._frame
        if f is None:
            return None
        if self._tensors is None:
            return f
        built = self._built
        if (
            built is not None
            and len(built) == len(self._tensors)
            and all(a is b for a, b in zip(built, self._tensors, strict=True))
        ):
            return f
        return None

    def __getstate__(self) -> dict[str, Any]:
        self._materialize()
        return {
            "tensors": self._tensors,
            "dim_to_pack": self.dim_to_pack,
            "pad_to_max_shape": self.pad_to_max_shape,
            "_row_offsets": self.__row_offsets,
            "_segment_indices": self.__segment_indices,
            "_segment_provenance": self._segment_provenance,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["tensors"],
            state["dim_to_pack"],
            pad_to_max_shape=state.get("pad_to_max_shape", False),
            _row_offsets=state.get("_row_offsets"),
            _segment_indices=state.get("_segment_indices"),
            _segment_provenance=state.get("_segment_provenance"),
        )

    # -- rows ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._tensors is None and self._frame is not None:
            return self._frame.num_rows
        if self.__row_offsets is not None:
            return len(self.__row_offsets) - 1
        assert self._tensors is not None
        return len(self._tensors)

    def _row_segment_indices(self, row: int) -> list[int]:
        if self._row_offsets is None:
            return [row]
        assert self._segment_indices is not None
        return self._segment_indices[self._row_offsets[row] : self._row_offsets[row + 1]]

    def _row(self, row: int) -> Row:
        f = self._frame_intact()
        if f is not None and self._tensors is None:
            return f.row(row)
        segs = [self.tensors[i] for i in self._row_segment_indices(row)]
        return [s for s in segs if s is not None] or None

    def rows(self) -> list[Row]:
        """Every row's segments (views for decoded data), ``None`` for rows without any."""
        return [self._row(r) for r in range(len(self))]

    def __getitem__(self, index: int | slice) -> Any:
        """``pt[i]``: row ``i``'s segments or ``None``; ``pt[a:b]``: :meth:`slice` of the rows
        (a ``slice`` clamps as Python's; a row out of range is a :class:`PackedRowIndexError`,
        an ``IndexError`` too). Lists, tensors and arrays of rows go to :meth:`slice`."""
        if isinstance(index, slice | list | tuple | range) or (
            isinstance(index, torch.Tensor | np.ndarray) and index.ndim > 0
        ):
            return self.slice(index)
        n = len(self)
        row = integer("index", index)
        if not -n <= row < n:
            raise _row_error("index", row, n)
        return self._row(row % n)

    def __iter__(self) -> Iterator[Row]:
        return (self._row(r) for r in range(len(self)))

    def segment_counts(self) -> list[int]:
        """Segments per row (0 for rows without media)."""
        return self.logical_segment_counts_by_row()

    def logical_segment_counts_by_row(self) -> list[int]:
        """The number of non-empty media segments in each logical row."""
        f = self._frame_intact()
        if f is not None and self._tensors is None:
            return f.segment_counts()
        if self._row_offsets is None:
            return [int(t is not None) for t in self.tensors]
        assert self._segment_indices is not None
        t, ro, si = self.tensors, self._row_offsets, self._segment_indices
        return [sum(t[i] is not None for i in si[ro[r] : ro[r + 1]]) for r in range(len(self))]

    def iter_logical_segments(self) -> Iterator[torch.Tensor | None]:
        """Physical tensor segments in logical row / segment order."""
        if self._segment_indices is None:
            yield from self.tensors
            return
        for i in self._segment_indices:
            yield self.tensors[i]

    @property
    def num_segments(self) -> int:
        return sum(self.segment_counts())

    @property
    def deduplication_enabled(self) -> bool:
        """Whether this value carries stable physical-segment provenance."""
        self._materialize() if self._frame is not None else None
        return self._segment_provenance is not None

    def enable_deduplication(self) -> PackedTensor:
        """Assign stable provenance without changing logical contents."""
        if self._segment_provenance is None:
            self._segment_provenance = [uuid.uuid4().bytes for _ in range(len(self.tensors))]
        return self

    def _csr(self) -> tuple[torch.Tensor, ...] | None:
        """(flat values, flat segment shapes, segment offsets, row offsets, row segments) of a
        decoded PackedTensor, for re-encoding without per-row work; ``None`` otherwise."""
        f = self._frame_intact()
        if f is None:
            return None
        return f.flat, f.seg_shapes.reshape(-1), f.seg_offsets, f.row_offsets, f.row_segments

    # -- whole-batch views ------------------------------------------------------------------

    def as_tensor(
        self, device: Any = None, *, pad_to_max_shape: bool | None = None
    ) -> torch.Tensor | None:
        """All segments in logical order, concatenated along ``dim_to_pack``; ``None`` when
        there are none. NeMo-RL's signature: ``device`` first (moving ``tensors`` there in
        place, as NeMo-RL does); ``pad_to_max_shape`` (keyword only) overrides the attribute.

        Decoded data stored in row order is returned as a view without copying (then moved to
        ``device`` if one is given).
        """
        if pad_to_max_shape is not None:
            flag("pad_to_max_shape", pad_to_max_shape)
        pad = self.pad_to_max_shape if pad_to_max_shape is None else pad_to_max_shape
        if device is not None:
            device = device_arg("device", device)
        f = self._frame_intact()
        if f is not None and not pad:
            whole = f.contiguous_values()
            if whole is not None:
                if not (whole.numel() or f.num_refs):
                    return None
                if device is not None:
                    self.to(device)
                    return whole.to(device)
                return whole
        if device is not None:
            self.to(device)
        labelled = [
            (r, j, s) for r, row in enumerate(self.rows()) if row for j, s in enumerate(row)
        ]
        if not labelled:
            return None
        dim = self.dim_to_pack
        if pad:
            padded = _pad_to_max([s for _, _, s in labelled], dim)
            labelled = [(r, j, p) for (r, j, _), p in zip(labelled, padded, strict=True)]
        out = _cat(labelled, dim, "PackedTensor.as_tensor()")
        return out if device is None else out.to(device)

    def to(self, device: str | torch.device) -> PackedTensor:
        """Move physical segments in place, keeping provenance (a value-preserving move)."""
        device = device_arg("device", device)
        self.tensors = [t.to(device) if t is not None else None for t in self.tensors]
        return self

    def to_dtype(self, dtype: torch.dtype) -> PackedTensor:
        """An independent wrapper with floating segments cast to ``dtype`` (integer geometry
        untouched); a real conversion mints new provenance, as NeMo-RL's does."""
        if not isinstance(dtype, torch.dtype):
            raise TypeError(f"dtype must be a torch.dtype, not {type(dtype).__name__} {dtype!r}")
        tensors = self.tensors
        convert = any(t is not None and t.is_floating_point() and t.dtype != dtype for t in tensors)
        new = (
            [t.to(dtype) if t is not None and t.is_floating_point() else t for t in tensors]
            if convert
            else list(tensors)
        )
        prov = self._segment_provenance
        return type(self)(
            new,
            self.dim_to_pack,
            pad_to_max_shape=self.pad_to_max_shape,
            _row_offsets=_copy(self._row_offsets),
            _segment_indices=_copy(self._segment_indices),
            _segment_provenance=(
                None
                if prov is None
                else [uuid.uuid4().bytes for _ in tensors]
                if convert
                else list(prov)
            ),
        )

    def slice(self, indices: Any) -> PackedTensor:
        """The rows at ``indices`` (a list, a tensor, a range or a ``slice``), as NeMo-RL's:
        legacy values stay legacy, CSR values keep their sharing. Views, no copy; a row range
        of decoded in-order data stays a view of the frame."""
        if isinstance(indices, slice):
            picked = resolve_slice(indices, len(self), "indices")
            start, stop, step = picked.start, picked.stop, picked.step
            f = self._frame_intact()
            if step == 1 and f is not None and self._tensors is None:
                return type(self)._from_frame(
                    f.row_range(start, max(start, stop)), self.dim_to_pack
                )
            indices = range(start, stop, step)
        if isinstance(indices, torch.Tensor | np.ndarray):
            indices = indices.tolist()
        idx = [integer(f"indices[{i}]", r) for i, r in enumerate(items_arg("indices", indices))]
        n = len(self)
        for i, row in enumerate(idx):
            if not -n <= row < n:
                raise _row_error(f"indices[{i}]", row, n)
            idx[i] = row % n
        if not self.deduplication_enabled and self._row_offsets is None:
            return type(self)(
                [self.tensors[i] for i in idx],
                self.dim_to_pack,
                pad_to_max_shape=self.pad_to_max_shape,
            )
        remap: dict[int, int] = {}
        tensors: list[torch.Tensor | None] = []
        provenances: list[bytes] = []
        indices_out: list[int] = []
        offsets = [0]
        for row in idx:
            for p in self._row_segment_indices(row):
                if p not in remap:
                    remap[p] = len(tensors)
                    tensors.append(self.tensors[p])
                    if self._segment_provenance is not None:
                        provenances.append(self._segment_provenance[p])
                indices_out.append(remap[p])
            offsets.append(len(indices_out))
        return type(self)(
            tensors,
            self.dim_to_pack,
            pad_to_max_shape=self.pad_to_max_shape,
            _row_offsets=offsets,
            _segment_indices=indices_out,
            _segment_provenance=provenances if self._segment_provenance is not None else None,
        )

    @classmethod
    def empty_like(cls, other: Any) -> PackedTensor:
        """Empty logical rows matching ``other``."""
        _packed_items([other], "other")
        return cls.empty_rows_like(other, len(other))

    @classmethod
    def empty_rows_like(cls, other: Any, num_rows: int) -> PackedTensor:
        """``num_rows`` logical rows without media, in ``other``'s form (NeMo-RL's rules)."""
        _packed_items([other], "other")
        num_rows = count("num_rows", num_rows, maximum=MAX_EMPTY_ROWS)
        pad = getattr(other, "pad_to_max_shape", False)
        if _has_csr(other):
            return cls([], other.dim_to_pack, pad_to_max_shape=pad,
                       _row_offsets=[0] * (num_rows + 1), _segment_indices=[],
                       _segment_provenance=[])  # fmt: skip
        if num_rows == 0:
            return cls([], other.dim_to_pack, pad_to_max_shape=pad, _row_offsets=[0],
                       _segment_indices=[])  # fmt: skip
        return cls([None] * num_rows, other.dim_to_pack, pad_to_max_shape=pad)

    @classmethod
    def concat(cls, from_packed_tensors: Sequence[Any]) -> PackedTensor:
        """Rows of every item in order (items may be NeMo-RL's own ``PackedTensor``). With any
        CSR or dedup item the result is CSR and re-interns segments by provenance."""
        items = _packed_items(from_packed_tensors)
        if not items:
            raise WireError("concat: from_packed_tensors needs at least one PackedTensor")
        dims = {p.dim_to_pack for p in items}
        if len(dims) != 1:
            raise WireError(
                f"from_packed_tensors: all packed tensors must have one dim_to_pack, got {dims}"
            )
        pads = {getattr(p, "pad_to_max_shape", False) for p in items}
        if len(pads) != 1:
            raise WireError(
                "from_packed_tensors: all packed tensors must have one pad_to_max_shape setting"
            )
        dim, pad = dims.pop(), pads.pop()
        if not any(_has_csr(p) for p in items):
            return cls([t for p in items for t in p.tensors], dim, pad_to_max_shape=pad)
        tensors: list[torch.Tensor | None] = []
        provenances: list[bytes] = []
        seen: dict[bytes, int] = {}
        indices: list[int] = []
        offsets = [0]
        for p in items:
            prov = getattr(p, "_segment_provenance", None)
            remap: dict[int, int] = {}
            for i, t in enumerate(p.tensors):
                key = prov[i] if prov is not None else None
                if key is not None and key in seen:
                    remap[i] = seen[key]
                    continue
                remap[i] = len(tensors)
                tensors.append(t)
                key = key if key is not None else uuid.uuid4().bytes
                provenances.append(key)
                seen[key] = remap[i]
            ro, si = getattr(p, "_row_offsets", None), getattr(p, "_segment_indices", None)
            for r in range(len(p)):
                refs = [r] if ro is None or si is None else si[ro[r] : ro[r + 1]]
                indices.extend(remap[i] for i in refs)
                offsets.append(len(indices))
        return cls(tensors, dim, pad_to_max_shape=pad, _row_offsets=offsets,
                   _segment_indices=indices, _segment_provenance=provenances)  # fmt: skip

    @classmethod
    def merge_segments(cls, from_packed_tensors: Sequence[Any]) -> PackedTensor:
        """Message turns merged: legacy inputs concatenate; CSR / dedup ones collapse into one
        logical row."""
        items = _packed_items(from_packed_tensors)
        if not any(_has_csr(p) for p in items):
            return cls.concat(items)
        c = cls.concat(items)
        return cls(c.tensors, c.dim_to_pack, pad_to_max_shape=c.pad_to_max_shape,
                   _row_offsets=[0, len(c._segment_indices or [])],
                   _segment_indices=c._segment_indices,
                   _segment_provenance=c._segment_provenance)  # fmt: skip

    @classmethod
    def flattened_concat(cls, from_packed_tensors: Sequence[Any]) -> PackedTensor:
        """Each item packed into one tensor (``as_tensor()``), then one row per item; CSR /
        dedup items (one logical row each) concatenate instead."""
        items = _packed_items(from_packed_tensors)
        if not items:
            raise WireError("from_packed_tensors needs at least one PackedTensor")
        dims = {p.dim_to_pack for p in items}
        if len(dims) != 1:
            raise WireError(
                "from_packed_tensors: all packed tensors must have the same dim_to_pack"
            )
        pads = {getattr(p, "pad_to_max_shape", False) for p in items}
        if len(pads) != 1:
            raise WireError(
                "from_packed_tensors: all packed tensors must have one pad_to_max_shape setting"
            )
        if any(_has_csr(p) for p in items):
            if not all(len(p) == 1 for p in items):
                raise WireError(
                    "from_packed_tensors: flattened_concat requires one logical row per input"
                )
            return cls.concat(items)
        return cls([p.as_tensor() for p in items], dims.pop(), pad_to_max_shape=pads.pop())

    def __repr__(self) -> str:
        return (
            f"PackedTensor(rows={len(self)}, segments={self.num_segments}, "
            f"dim_to_pack={self.dim_to_pack})"
        )


def _packed_items(values: Any, name: str = "from_packed_tensors") -> list[Any]:
    """A list of packed tensors (py_wire's or NeMo-RL's: anything with ``tensors`` and
    ``dim_to_pack``), else a ``TypeError`` naming ``name``."""
    out = items_arg(name, values)
    for i, p in enumerate(out):
        if not (hasattr(p, "tensors") and hasattr(p, "dim_to_pack")):
            where = name if name == "other" else f"{name}[{i}]"
            raise TypeError(f"{where} must be a PackedTensor, not {type(p).__name__}")
    return out


def _copy(x: list[Any] | None) -> list[Any] | None:
    return None if x is None else list(x)


def _has_csr(p: Any) -> bool:
    return (
        getattr(p, "_segment_provenance", None) is not None
        or getattr(p, "_row_offsets", None) is not None
    )


def _cat(labelled: list[tuple[int, int, torch.Tensor]], dim: int, what: str) -> torch.Tensor:
    """The segments concatenated along ``dim``; a ``BatchError`` naming the rows, segments and
    dims that disagree instead of torch's "Sizes of tensors must match"."""
    try:
        return torch.cat([s for _, _, s in labelled], dim=dim)
    except (RuntimeError, IndexError) as e:
        r0, j0, first = labelled[0]
        for r, j, s in labelled[1:]:
            if s.dim() != first.dim():
                why = f"rank {s.dim()} differs from rank {first.dim()}"
            else:
                rank = first.dim()
                if not -rank <= dim < rank:
                    raise BatchError(
                        f"{what}: dim_to_pack {dim} is out of range for segments of rank {rank}"
                    ) from None
                diff = [d for d in range(rank) if d != dim % rank and s.shape[d] != first.shape[d]]
                if not diff:
                    continue
                d = diff[0]
                why = f"dim {d} is {s.shape[d]}, not {first.shape[d]}"
            raise BatchError(
                f"{what}: row {r} segment {j} (shape {list(s.shape)}) cannot be concatenated "
                f"with row {r0} segment {j0} (shape {list(first.shape)}) along dim_to_pack={dim}: "
                f"{why}; every dim but the pack dim must match: pass pad_to_max_shape=True to "
                "zero-pad them to their max"
            ) from None
        raise BatchError(f"{what}: cannot concatenate the segments along dim {dim}: {e}") from None


def _pad_to_max(segments: list[torch.Tensor], dim: int) -> list[torch.Tensor]:
    ranks = {s.dim() for s in segments}
    if len(ranks) != 1:
        raise BatchError(f"pad_to_max_shape needs segments of one rank, got ranks {sorted(ranks)}")
    rank = ranks.pop()
    if not -rank <= dim < rank:
        raise PackDimError(f"dim_to_pack {dim} is out of range for rank {rank}")
    dim %= rank
    target = [max(s.shape[d] for s in segments) for d in range(rank)]
    # The padded size in Python ints, before torch allocates (or overflows on) it: segment
    # shapes of a hostile frame ([2**40, 0] beside [0, 2**40]) must not size the output.
    inner = math.prod(n for d, n in enumerate(target) if d != dim)
    cells = sum(s.shape[dim] for s in segments) * inner
    held = sum(s.numel() for s in segments)
    if not padded_cells_backed(cells, held):
        raise WireError(
            f"pad_to_max_shape: padding the segments to their max shape {target} (pack dim "
            f"{dim}) makes {cells} elements from {held}: more than the segments justify"
        )
    out = []
    for s in segments:
        want = list(target)
        want[dim] = s.shape[dim]
        if list(s.shape) == want:
            out.append(s)
            continue
        padded = s.new_zeros(want)
        padded[tuple(slice(0, n) for n in s.shape)] = s
        out.append(padded)
    return out


class _FrameRows:
    """Lazy rows over a decoded frame's CSR tables; index lists are read once, on demand."""

    __slots__ = (
        "_cut",
        "_lists",
        "_own",
        "_value_range",
        "flat",
        "in_order",
        "num_refs",
        "num_rows",
        "row_offsets",
        "row_segments",
        "seg_offsets",
        "seg_shapes",
        "values",
    )

    def __init__(self, values: torch.Tensor, tables: dict[str, Any], in_order: bool) -> None:
        self.values = values
        self.flat = values.reshape(-1)
        self.seg_shapes: torch.Tensor = tables["seg_shapes"]
        self.seg_offsets: torch.Tensor = tables["seg_offsets"]
        self.row_offsets: torch.Tensor = tables["row_offsets"]
        self.row_segments: torch.Tensor = tables["row_segments"]
        self.num_rows: int = self.row_offsets.shape[0] - 1
        self.num_refs: int = self.row_segments.shape[0]
        self.in_order = in_order
        self._lists: tuple[list[list[int]], list[int], list[int], list[int]] | None = None
        self._value_range: tuple[int, int] | None = None
        # Each segment gets a storage of exactly its own bytes: a row or a shard that is
        # pickled, saved or sent on carries its own segments, not the whole field.
        self._own = StorageSlicer(values)
        self._cut = RowCutter(self.flat)  # a segment: elements [lo, hi) of the flat values

    def _tables(self) -> tuple[list[list[int]], list[int], list[int], list[int]]:
        if self._lists is None:
            self._lists = (
                self.seg_shapes.tolist(),
                self.seg_offsets.tolist(),
                self.row_offsets.tolist(),
                self.row_segments.tolist(),
            )
        return self._lists

    def _segment(self, seg: int) -> torch.Tensor:
        shapes, offsets, _, _ = self._tables()
        try:
            return self._cut(offsets[seg], offsets[seg + 1]).view(shapes[seg])
        except (RuntimeError, IndexError) as e:
            # The codec validated these tables; only a buffer written since can get here.
            raise FrameError(
                f"segment {seg} no longer fits its values (was the frame's buffer written "
                f"after decoding?): {e}"
            ) from None

    def row(self, index: int) -> Row:
        _, _, row_offsets, row_segments = self._tables()
        if index < 0:
            index += self.num_rows
        if not 0 <= index < self.num_rows:
            raise IndexError(f"row {index} out of range for {self.num_rows} rows")
        ids = row_segments[row_offsets[index] : row_offsets[index + 1]]
        return [self._segment(i) for i in ids] or None

    def materialize(self) -> list[Row]:
        return [self.row(r) for r in range(self.num_rows)]

    def segment_counts(self) -> list[int]:
        return torch.diff(self.row_offsets).tolist()

    def row_range(self, start: int, stop: int) -> _FrameRows:
        """Rows ``start..stop`` over the same values and segment tables (views, O(1) torch
        calls). In-order data keeps only the values those rows reference, so ``as_tensor()``
        of the range is still a view."""
        sub = _FrameRows.__new__(_FrameRows)
        sub.values, sub.flat, sub._own, sub._cut = self.values, self.flat, self._own, self._cut
        sub.seg_shapes, sub.seg_offsets = self.seg_shapes, self.seg_offsets
        sub.row_segments, sub.num_refs = self.row_segments, self.num_refs
        sub.row_offsets = self.row_offsets[start : stop + 1]
        sub.num_rows = stop - start
        sub.in_order = self.in_order
        sub._value_range = None
        lists = self._lists
        # The sub-range's Python tables are the parent's, with row offsets narrowed: one list
        # slice instead of a tolist() of every table again.
        sub._lists = (
            None if lists is None else (lists[0], lists[1], lists[2][start : stop + 1], lists[3])
        )
        if self.in_order:
            if lists is not None:
                lo, hi = lists[2][start], lists[2][stop]
                sub._value_range = (lists[1][lo], lists[1][hi])
            else:
                lo, hi = int(self.row_offsets[start]), int(self.row_offsets[stop])
                sub._value_range = (int(self.seg_offsets[lo]), int(self.seg_offsets[hi]))
        return sub

    def contiguous_values(self) -> torch.Tensor | None:
        """The values of these rows as one view, when they are exactly the rows'
        concatenation (in order, stacked along dim 0)."""
        # In order, and shaped as the segments stacked: [Σ items, static...] or rank-1 segments.
        stacked = self.values.dim() > 1 or self.seg_shapes.shape[1] == 1
        if not (self.in_order and stacked):
            return None
        if self._value_range is None:
            return self.values
        lo, hi = self._value_range
        inner = 1
        for d in self.values.shape[1:]:
            inner *= d
        if inner == 0 or lo % inner or hi % inner:
            return None
        return self._own(self.values[lo // inner : hi // inner])
