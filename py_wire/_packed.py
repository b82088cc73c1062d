"""``PackedTensor``: rows of 0..k tensor segments that concatenate along a pack dim.

py_wire's own CSR form: physical ``segments``, ``row_offsets`` (one more than the rows) over
``row_segments`` (indices into ``segments``). A segment several rows use (a GRPO group's
shared image) is one tensor, referenced by each. Decoded values are views of the frame, built
on first use. NeMo-RL's ``PackedTensor`` converts to and from this form in
``py_wire.interop.nemo_rl``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from py_wire._args import device as device_arg
from py_wire._args import flag, host_indices, integer, padded_cells_backed
from py_wire._args import items as items_arg
from py_wire._native import BatchError, FrameError, RowIndexError, WireError
from py_wire._rows import resolve_slice
from py_wire._storage import RowCutter, StorageSlicer

Row = list[torch.Tensor] | None

#: Bytes of a segment's identity; all zeros is no identity (docs/format.md, ``f.seg_ids``).
ID_LEN = 16
NO_ID = bytes(ID_LEN)


class PackedRowIndexError(RowIndexError, IndexError):
    """A row of a :class:`PackedTensor` out of range: a :class:`RowIndexError` that is also an
    ``IndexError``, as Python's sequences raise."""


def _row_error(argument: str, row: int, num_rows: int) -> PackedRowIndexError:
    return PackedRowIndexError(
        f"{argument}: PackedTensor row {row} is out of range for {num_rows} rows"
    )


class PackDimError(BatchError, IndexError):
    """``dim_to_pack`` out of range for the segments: a :class:`BatchError` that is also an
    ``IndexError``."""


class PackedTensor:
    """The value of a packed field: ``len()`` rows, each holding 0..k tensor segments that
    concatenate along ``dim_to_pack`` (an image's patches, an audio clip's frames).

    Build it from rows, ``PackedTensor([seg, None, [seg_a, seg_b]], dim_to_pack=0)`` (a row
    is a tensor, ``None`` or a list of tensors; a tensor object in several rows is stored
    once), or from its CSR tables with :meth:`from_csr`. ``pt[i]`` is row ``i``'s segments or
    ``None``; ``pt[a:b]`` and :meth:`slice` select rows (views, shared segments stay shared);
    :meth:`as_tensor` concatenates every segment; :meth:`concat` joins values. A value is not
    changed after it is built: :meth:`to` returns a new one.

    Segments may carry an identity (:attr:`segment_ids`, 16 bytes each: NeMo-RL's segment
    provenance, or what a frame stores): segments with one id are one segment wherever they
    travel, so frames, shards and fetches of one prompt store its shared images once when they
    are joined again (:meth:`concat`, frame ops, NeMo-RL's gather after ``to_nemo``).

    A decoded value is backed by its frame: rows are views, built on first use, and
    ``as_tensor()`` of rows stored in order is a view of the frame.
    """

    __slots__ = ("_frame", "_ids", "_row_offsets", "_row_segments", "_segments", "dim_to_pack")

    def __init__(self, rows: Any, dim_to_pack: int = 0) -> None:
        if isinstance(rows, torch.Tensor | np.ndarray) or rows is None:
            raise TypeError(
                "PackedTensor(rows): rows must be a list with one entry per row (a tensor, "
                f"None or a list of tensors), not {type(rows).__name__}"
            )
        rows = items_arg("rows", rows)
        segments: list[torch.Tensor] = []
        offsets, refs = [0], []
        where: dict[int, int] = {}
        for i, row in enumerate(rows):
            if row is None:
                segs: list[Any] = []
            elif isinstance(row, torch.Tensor):
                segs = [row]
            else:
                segs = items_arg(f"rows[{i}]", row)
            for j, seg in enumerate(segs):
                if not isinstance(seg, torch.Tensor):
                    raise TypeError(f"rows[{i}][{j}] must be a tensor, not {type(seg).__name__}")
                k = where.get(id(seg))
                if k is None:
                    k = where[id(seg)] = len(segments)
                    segments.append(seg)
                refs.append(k)
            offsets.append(len(refs))
        self._set(None, segments, offsets, refs, integer("dim_to_pack", dim_to_pack))

    @classmethod
    def from_csr(
        cls,
        segments: Sequence[torch.Tensor],
        row_offsets: Sequence[int],
        row_segments: Sequence[int],
        dim_to_pack: int = 0,
        segment_ids: Sequence[bytes | None] | None = None,
    ) -> PackedTensor:
        """Rows from CSR tables: row ``r`` holds ``segments[i]`` for each ``i`` in
        ``row_segments[row_offsets[r]:row_offsets[r + 1]]``. Offsets start at 0, never
        decrease and end at ``len(row_segments)``; every index names a segment.
        ``segment_ids`` (optional) gives each segment its identity: 16 bytes, or ``None``
        for none."""
        segs = items_arg("segments", segments)
        for i, seg in enumerate(segs):
            if not isinstance(seg, torch.Tensor):
                raise TypeError(f"segments[{i}] must be a tensor, not {type(seg).__name__}")
        offsets = _int_list("row_offsets", row_offsets)
        refs = _int_list("row_segments", row_segments)
        if not offsets or offsets[0] != 0:
            raise WireError(f"row_offsets must start at 0, got {offsets[:1]}")
        for r, (a, b) in enumerate(itertools.pairwise(offsets)):
            if a > b:
                raise WireError(f"row_offsets decrease at row {r}: {a} then {b}")
        if offsets[-1] != len(refs):
            raise WireError(
                f"row_offsets end at {offsets[-1]}, not at the {len(refs)} row_segments"
            )
        for i, s in enumerate(refs):
            if not 0 <= s < len(segs):
                raise WireError(f"row_segments[{i}] is {s}: out of range for {len(segs)} segments")
        ids = _id_list(segment_ids, len(segs))
        pt = cls.__new__(cls)
        pt._set(None, segs, offsets, refs, integer("dim_to_pack", dim_to_pack), ids)
        return pt

    def _set(
        self,
        frame: _FrameRows | None,
        segments: list[torch.Tensor] | None,
        row_offsets: list[int] | None,
        row_segments: list[int] | None,
        dim_to_pack: int,
        ids: list[bytes] | None = None,
    ) -> None:
        self._frame = frame
        self._ids = ids
        self._segments = segments
        self._row_offsets = row_offsets
        self._row_segments = row_segments
        self.dim_to_pack = dim_to_pack

    @classmethod
    def _from_frame(cls, frame_rows: _FrameRows, dim_to_pack: int) -> PackedTensor:
        pt = cls.__new__(cls)
        pt._set(frame_rows, None, None, None, dim_to_pack)
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

    # -- the CSR tables ------------------------------------------------------------------------

    def _materialize(self) -> None:
        """Build the segment views and the CSR lists from the frame, once: the segments these
        rows use, in the order of first use."""
        if self._segments is not None:
            return
        f = self._frame
        assert f is not None
        _, _, row_offsets, row_segments = f._tables()
        base, end = row_offsets[0], row_offsets[-1]
        refs = row_segments[base:end]
        physical = list(dict.fromkeys(refs))
        where = {p: i for i, p in enumerate(physical)}
        self._segments = [f._segment(p) for p in physical]
        frame_ids = f.ids()
        self._ids = None if frame_ids is None else [frame_ids[p] for p in physical]
        self._row_offsets = [o - base for o in row_offsets]
        self._row_segments = [where[p] for p in refs]

    @property
    def segments(self) -> list[torch.Tensor]:
        """The physical segments, each once (a new list; the tensors are the value's own)."""
        self._materialize()
        assert self._segments is not None
        return list(self._segments)

    @property
    def row_offsets(self) -> list[int]:
        """Row ``r``'s references are ``row_segments[row_offsets[r]:row_offsets[r + 1]]``."""
        self._materialize()
        assert self._row_offsets is not None
        return list(self._row_offsets)

    @property
    def row_segments(self) -> list[int]:
        """Each row's segments, as indices into :attr:`segments`, rows one after another."""
        self._materialize()
        assert self._row_segments is not None
        return list(self._row_segments)

    @property
    def segment_ids(self) -> list[bytes | None] | None:
        """Each of :attr:`segments`' identity (16 bytes, ``None`` for a segment without one);
        ``None`` when no segment has one."""
        self._materialize()
        if self._ids is None:
            return None
        return [None if i == NO_ID else i for i in self._ids]

    def _segment_id_bytes(self) -> bytes | None:
        """The ids as the codec takes them: 16 bytes per segment of :meth:`_csr`'s tables
        (decoded) or of :attr:`segments`, zeros for none; ``None`` without identity."""
        f = self._frame
        if f is not None and self._segments is None:
            return f.id_bytes()
        if self._ids is None:
            return None
        return b"".join(self._ids)

    def csr(self) -> tuple[list[torch.Tensor], list[int], list[int]]:
        """``(segments, row_offsets, row_segments)``: what :meth:`from_csr` takes."""
        return self.segments, self.row_offsets, self.row_segments

    def __reduce__(self) -> tuple[Any, ...]:
        ids = self.segment_ids
        if ids is not None:
            return (_rebuild, (*self.csr(), self.dim_to_pack, ids))
        return (_rebuild, (*self.csr(), self.dim_to_pack))

    # -- rows ----------------------------------------------------------------------------------

    def __len__(self) -> int:
        if self._row_offsets is None:
            assert self._frame is not None
            return self._frame.num_rows
        return len(self._row_offsets) - 1

    def _row(self, row: int) -> Row:
        if self._segments is None:
            assert self._frame is not None
            return self._frame.row(row)
        assert self._row_offsets is not None and self._row_segments is not None
        refs = self._row_segments[self._row_offsets[row] : self._row_offsets[row + 1]]
        return [self._segments[i] for i in refs] or None

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
        """Segments per row (0 for rows without any)."""
        if self._row_offsets is None:
            assert self._frame is not None
            return self._frame.segment_counts()
        return [b - a for a, b in itertools.pairwise(self._row_offsets)]

    @property
    def num_segments(self) -> int:
        """Segment references over all rows (a shared segment counts once per row)."""
        return sum(self.segment_counts())

    def _csr(self) -> tuple[torch.Tensor, ...] | None:
        """(flat values, flat segment shapes, segment offsets, row offsets, row segments) of a
        decoded PackedTensor, for re-encoding without per-row work; ``None`` otherwise."""
        f = self._frame
        if f is None:
            return None
        return f.flat, f.seg_shapes.reshape(-1), f.seg_offsets, f.row_offsets, f.row_segments

    # -- whole-value operations -------------------------------------------------------------

    def as_tensor(
        self, device: Any = None, *, pad_to_max_shape: bool = False
    ) -> torch.Tensor | None:
        """Every row's segments in order, concatenated along ``dim_to_pack`` (on ``device`` if
        given); ``None`` when there are none. ``pad_to_max_shape=True`` zero-pads every other
        dim to its maximum first. Decoded rows stored in order give a view of the frame."""
        flag("pad_to_max_shape", pad_to_max_shape)
        if device is not None:
            device = device_arg("device", device)
        f = self._frame
        if f is not None and not pad_to_max_shape:
            whole = f.contiguous_values()
            if whole is not None:
                if not (whole.numel() or f.num_refs):
                    return None
                return whole if device is None else whole.to(device)
        labelled = [
            (r, j, s) for r, row in enumerate(self.rows()) if row for j, s in enumerate(row)
        ]
        if not labelled:
            return None
        dim = self.dim_to_pack
        if pad_to_max_shape:
            padded = _pad_to_max([s for _, _, s in labelled], dim)
            labelled = [(r, j, p) for (r, j, _), p in zip(labelled, padded, strict=True)]
        out = _cat(labelled, dim, "PackedTensor.as_tensor()")
        return out if device is None else out.to(device)

    def to(self, device: str | torch.device, *, non_blocking: bool = False) -> PackedTensor:
        """The same rows on ``device``. A decoded value moves its frame's values once (one
        transfer, not one per segment); its row tables stay on the host."""
        device = device_arg("device", device)
        flag("non_blocking", non_blocking)
        return self._map(lambda t: t.to(device, non_blocking=non_blocking))

    def _map(self, move: Any) -> PackedTensor:
        f = self._frame
        if f is not None and self._segments is None:
            return type(self)._from_frame(f.with_values(move(f.values)), self.dim_to_pack)
        segments, offsets, refs = self.csr()
        out = type(self).__new__(type(self))
        out._set(None, [move(s) for s in segments], offsets, refs, self.dim_to_pack, self._ids)
        return out

    def slice(self, indices: Any) -> PackedTensor:
        """The rows at ``indices`` (a list, a tensor, a range or a ``slice``): views, no copy;
        segments the picked rows share stay shared. A row range of decoded in-order data
        stays a view of the frame."""
        if isinstance(indices, slice):
            picked = resolve_slice(indices, len(self), "indices")
            start, stop, step = picked.start, picked.stop, picked.step
            f = self._frame
            if step == 1 and f is not None and self._segments is None:
                return type(self)._from_frame(
                    f.row_range(start, max(start, stop)), self.dim_to_pack
                )
            indices = range(start, stop, step)
        if isinstance(indices, torch.Tensor | np.ndarray):
            indices = host_indices("indices", indices).tolist()
        idx = [integer(f"indices[{i}]", r) for i, r in enumerate(items_arg("indices", indices))]
        n = len(self)
        for i, row in enumerate(idx):
            if not -n <= row < n:
                raise _row_error(f"indices[{i}]", row, n)
            idx[i] = row % n
        self._materialize()
        assert self._segments is not None and self._row_offsets is not None
        assert self._row_segments is not None
        remap: dict[int, int] = {}
        segments: list[torch.Tensor] = []
        refs: list[int] = []
        offsets = [0]
        for row in idx:
            for p in self._row_segments[self._row_offsets[row] : self._row_offsets[row + 1]]:
                if p not in remap:
                    remap[p] = len(segments)
                    segments.append(self._segments[p])
                refs.append(remap[p])
            offsets.append(len(refs))
        ids = None if self._ids is None else [self._ids[p] for p in remap]
        out = type(self).__new__(type(self))
        out._set(None, segments, offsets, refs, self.dim_to_pack, ids)
        return out

    @classmethod
    def concat(cls, values: Sequence[PackedTensor]) -> PackedTensor:
        """The rows of every value, in order. Segments that are the same tensor, views of the
        same bytes (two slices of one decoded value), or carry one identity (two decoded
        frames of one prompt's media: :attr:`segment_ids`) are stored once."""
        items = items_arg("values", values)
        if not items:
            raise WireError("concat: values needs at least one PackedTensor")
        for i, p in enumerate(items):
            if not isinstance(p, PackedTensor):
                raise TypeError(f"values[{i}] must be a PackedTensor, not {type(p).__name__}")
        dims = {p.dim_to_pack for p in items}
        if len(dims) != 1:
            raise WireError(f"concat: the values pack along different dims {sorted(dims)}")
        segments: list[torch.Tensor] = []
        ids: list[bytes] = []
        seen: dict[Any, int] = {}
        refs: list[int] = []
        offsets = [0]
        identified = False
        for p in items:
            segs, ro, rs = p.csr()
            p_ids = p._ids or [NO_ID] * len(segs)
            identified |= p._ids is not None
            remap = []
            for s, i in zip(segs, p_ids, strict=True):
                key: Any = _location(s) if i == NO_ID else i
                k = seen.get(key)
                if k is None:
                    k = seen[key] = len(segments)
                    segments.append(s)
                    ids.append(i)
                remap.append(k)
            base = len(refs)
            refs.extend(remap[i] for i in rs)
            offsets.extend(base + o for o in ro[1:])
        out = cls.__new__(cls)
        out._set(None, segments, offsets, refs, dims.pop(), ids if identified else None)
        return out

    def __repr__(self) -> str:
        return (
            f"PackedTensor(rows={len(self)}, segments={self.num_segments}, "
            f"dim_to_pack={self.dim_to_pack})"
        )


def _rebuild(
    segments: list[torch.Tensor],
    row_offsets: list[int],
    row_segments: list[int],
    dim: int,
    ids: list[bytes | None] | None = None,
) -> PackedTensor:
    return PackedTensor.from_csr(segments, row_offsets, row_segments, dim, ids)


def _id_list(segment_ids: Any, count: int) -> list[bytes] | None:
    """``segment_ids`` checked: one per segment, each 16 bytes or ``None`` (no identity)."""
    if segment_ids is None:
        return None
    ids = items_arg("segment_ids", segment_ids)
    if len(ids) != count:
        raise BatchError(f"segment_ids has {len(ids)} entries for {count} segments")
    out = []
    for i, x in enumerate(ids):
        if x is None:
            out.append(NO_ID)
            continue
        if not isinstance(x, bytes | bytearray | memoryview):
            raise TypeError(f"segment_ids[{i}] must be bytes or None, not {type(x).__name__}")
        b = bytes(x)
        if len(b) != ID_LEN:
            raise BatchError(f"segment_ids[{i}] has {len(b)} bytes; a segment id has {ID_LEN}")
        out.append(b)
    return None if all(i == NO_ID for i in out) else out


def _location(t: torch.Tensor) -> tuple[Any, ...]:
    """Where a tensor's elements are: equal for two views of the same bytes."""
    return (
        t.device,
        t.dtype,
        t.untyped_storage().data_ptr(),
        t.storage_offset(),
        tuple(t.shape),
        t.stride(),
    )


def _int_list(name: str, value: Any) -> list[int]:
    if isinstance(value, torch.Tensor | np.ndarray):
        value = host_indices(name, value).tolist()
    return [integer(f"{name}[{i}]", v) for i, v in enumerate(items_arg(name, value))]


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
        "seg_ids",
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
        self.seg_ids: torch.Tensor | None = tables.get("seg_ids")
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

    def id_bytes(self) -> bytes | None:
        """The segment id table's bytes (16 per segment), ``None`` when the frame has none."""
        ids = self.seg_ids
        return None if ids is None else ids.contiguous().numpy().tobytes()

    def ids(self) -> list[bytes] | None:
        """Each segment's id (zeros: none), ``None`` when the frame has no id table."""
        raw = self.id_bytes()
        if raw is None:
            return None
        return [raw[i : i + ID_LEN] for i in range(0, len(raw), ID_LEN)]

    def _segment(self, seg: int) -> torch.Tensor:
        shapes, offsets, _, _ = self._tables()
        try:
            return self._cut.shaped(offsets[seg], offsets[seg + 1], shapes[seg])
        except (RuntimeError, IndexError, ValueError) as e:
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

    def with_values(self, values: torch.Tensor) -> _FrameRows:
        """These rows over ``values`` (the same values elsewhere: on a device, pinned)."""
        tables = {
            "seg_shapes": self.seg_shapes,
            "seg_offsets": self.seg_offsets,
            "row_offsets": self.row_offsets,
            "row_segments": self.row_segments,
        }
        if self.seg_ids is not None:
            tables["seg_ids"] = self.seg_ids
        out = _FrameRows(values, tables, self.in_order)
        out.num_rows, out._lists, out._value_range = self.num_rows, self._lists, self._value_range
        return out

    def row_range(self, start: int, stop: int) -> _FrameRows:
        """Rows ``start..stop`` over the same values and segment tables (views, O(1) torch
        calls). In-order data keeps only the values those rows reference, so ``as_tensor()``
        of the range is still a view."""
        sub = _FrameRows.__new__(_FrameRows)
        sub.values, sub.flat, sub._own, sub._cut = self.values, self.flat, self._own, self._cut
        sub.seg_shapes, sub.seg_offsets = self.seg_shapes, self.seg_offsets
        sub.row_segments, sub.num_refs = self.row_segments, self.num_refs
        sub.seg_ids = self.seg_ids
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
