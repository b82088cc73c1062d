"""``PackedTensor``: rows of 0..k tensor segments, concatenated along a pack dim on demand.

Semantics follow NeMo-RL's PackedTensor (``as_tensor`` concatenates along ``dim_to_pack``,
``pad_to_max_shape`` pads every other dim, ``None`` marks a row without media) with CSR rows:
a row holds any number of segments, and decoded rows are lazy views into the frame.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import torch

from py_wire._native import BatchError, FrameError

Row = list[torch.Tensor] | None


class PackedTensor:
    """Rows of tensor segments that concatenate along ``dim_to_pack``.

    Build one from ``list[Tensor | None | list[Tensor]]``; ``decode`` returns them as lazy views.
    ``pt[i]`` is row ``i``'s segments (``None`` for a row without any).
    """

    __slots__ = ("_dim_to_pack", "_frame", "_rows")

    def __init__(
        self,
        tensors: Iterable[torch.Tensor | Sequence[torch.Tensor] | None],
        dim_to_pack: int = 0,
    ) -> None:
        rows: list[Row] = []
        for row in tensors:
            if row is None:
                rows.append(None)
            elif isinstance(row, torch.Tensor):
                rows.append([row])
            else:
                segs = list(row)
                rows.append(segs or None)
        self._rows: list[Row] | None = rows
        self._frame: _FrameRows | None = None
        self._dim_to_pack = dim_to_pack

    @classmethod
    def _from_frame(cls, frame_rows: _FrameRows, dim_to_pack: int) -> PackedTensor:
        pt = cls.__new__(cls)
        pt._rows = None
        pt._frame = frame_rows
        pt._dim_to_pack = dim_to_pack
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

    # -- rows ----------------------------------------------------------------------------------

    @property
    def dim_to_pack(self) -> int:
        return self._dim_to_pack

    def rows(self) -> list[Row]:
        """Every row's segments (views for decoded data), ``None`` for empty rows."""
        if self._rows is None:
            assert self._frame is not None
            self._rows = self._frame.materialize()
        return self._rows

    def __len__(self) -> int:
        if self._rows is None and self._frame is not None:
            return self._frame.num_rows
        return len(self.rows())

    def __getitem__(self, index: int) -> Row:
        if self._rows is None and self._frame is not None:
            return self._frame.row(index)
        return self.rows()[index]

    def __iter__(self) -> Iterator[Row]:
        return iter(self.rows())

    def segment_counts(self) -> list[int]:
        """Segments per row (0 for rows without media)."""
        if self._rows is None and self._frame is not None:
            return self._frame.segment_counts()
        return [0 if r is None else len(r) for r in self.rows()]

    #: NeMo-RL's name for :meth:`segment_counts`.
    logical_segment_counts_by_row = segment_counts

    @property
    def num_segments(self) -> int:
        return sum(self.segment_counts())

    @property
    def tensors(self) -> list[torch.Tensor | None]:
        """One tensor per row (its segments concatenated along the pack dim), as NeMo-RL's
        ``PackedTensor.tensors``. Rows with one segment are views; several are concatenated."""
        out: list[torch.Tensor | None] = []
        for r, row in enumerate(self.rows()):
            if row is None:
                out.append(None)
            elif len(row) == 1:
                out.append(row[0])
            else:
                labelled = [(r, j, s) for j, s in enumerate(row)]
                out.append(_cat(labelled, self._dim_to_pack, "PackedTensor.tensors"))
        return out

    def _csr(self) -> tuple[torch.Tensor, ...] | None:
        """(flat values, flat segment shapes, segment offsets, row offsets, row segments) of a
        decoded PackedTensor, for re-encoding without per-row work; ``None`` otherwise."""
        f = self._frame
        if f is None:
            return None
        return f.flat, f.seg_shapes.reshape(-1), f.seg_offsets, f.row_offsets, f.row_segments

    # -- whole-batch views ------------------------------------------------------------------

    def as_tensor(self, pad_to_max_shape: bool = False) -> torch.Tensor | None:
        """All segments concatenated along the pack dim, ``None`` when there are none.

        Decoded data stored in row order is returned as a view without copying.
        ``pad_to_max_shape`` zero-pads every non-pack dim to its max over the segments.
        """
        if self._rows is None and self._frame is not None and not pad_to_max_shape:
            whole = self._frame.contiguous_values()
            if whole is not None:
                return whole if whole.numel() or self._frame.num_refs else None
        rows = self.rows()
        labelled = [(r, j, s) for r, row in enumerate(rows) if row for j, s in enumerate(row)]
        if not labelled:
            return None
        dim = self._dim_to_pack
        if pad_to_max_shape:
            padded = _pad_to_max([s for _, _, s in labelled], dim)
            labelled = [(r, j, p) for (r, j, _), p in zip(labelled, padded, strict=True)]
        return _cat(labelled, dim, "PackedTensor.as_tensor()")

    def slice(self, indices: Iterable[int] | slice) -> PackedTensor:
        """The rows at ``indices`` (views, no copy)."""
        rows = self.rows()
        picked = rows[indices] if isinstance(indices, slice) else [rows[i] for i in indices]
        return PackedTensor(picked, self._dim_to_pack)

    @classmethod
    def concat(cls, items: Sequence[PackedTensor]) -> PackedTensor:
        """Rows of every item, in order. Pack dims must agree."""
        if not items:
            raise ValueError("concat needs at least one PackedTensor")
        dims = {p.dim_to_pack for p in items}
        if len(dims) != 1:
            raise ValueError(f"cannot concat PackedTensors packed along different dims {dims}")
        return cls([row for p in items for row in p.rows()], dims.pop())

    def __repr__(self) -> str:
        return (
            f"PackedTensor(rows={len(self)}, segments={self.num_segments}, "
            f"dim_to_pack={self._dim_to_pack})"
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
        raise BatchError(f"dim_to_pack {dim} is out of range for rank {rank}")
    dim %= rank
    target = [max(s.shape[d] for s in segments) for d in range(rank)]
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
        "_lists",
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
            return self.flat[offsets[seg] : offsets[seg + 1]].view(shapes[seg])
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

    def contiguous_values(self) -> torch.Tensor | None:
        """The whole values tensor, when it is exactly the rows' concatenation."""
        # In order, and shaped as the segments stacked: [Σ items, static...] or rank-1 segments.
        stacked = self.values.dim() > 1 or self.seg_shapes.shape[1] == 1
        return self.values if self.in_order and stacked else None
