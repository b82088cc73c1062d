"""Frame operations without decoding: take rows, chunk or split into micro-batches, shard
across data-parallel ranks, concatenate frames. The row work runs in Rust; segments shared between
rows stay shared, and packed media are never cut as if dim 1 were the sequence."""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

import numpy as np
import torch

from py_wire import _native
from py_wire._args import MAX_COUNT, count, flag, integer, items, optional_count
from py_wire._decode import checked_schema
from py_wire._native import Frame, SchemaError, WireError
from py_wire._rows import resolve_slice, row_index_error
from py_wire._source import as_frame

#: The most sections ``split`` takes (zero-row sections are allowed, so the row count does not
#: bound them).
MAX_SECTIONS = 1 << 24


def take_rows(
    frame: Frame,
    rows: Sequence[int] | Sequence[range] | range | slice | torch.Tensor | np.ndarray,
) -> Frame:
    """A new frame with ``rows`` of ``frame``, in that order (repeats allowed; negative indices
    count from the end; a list of step-1 ranges takes those spans one after another). ``rows``
    may also be an integer tensor or array of indices, or a boolean one with a value per row
    (a mask: its true rows, in order). A ``slice``, a ``range``, spans and index arrays are
    resolved in Rust, never row by row here."""
    frame = as_frame(frame)
    if isinstance(rows, slice):
        rows = resolve_slice(rows, frame.num_rows)
    elif isinstance(rows, torch.Tensor | np.ndarray):
        rows = index_array(rows, frame.num_rows)
    elif not isinstance(rows, range) and hasattr(rows, "tolist"):
        # An array.array or the like; tolist() is untyped (Any), which would widen `rows`.
        rows = cast("list[int]", rows.tolist())
    schema = checked_schema(frame)
    picked = _native.gather([frame], rows)
    picked.schema = schema
    return picked


def index_array(rows: torch.Tensor | np.ndarray, num_rows: int) -> np.ndarray:
    """A tensor or array of row indices as the contiguous int64 array the codec reads in one
    piece (no Python int per row); a boolean mask, one value per row, as its true rows.
    Floats, and unsigned values past int64, are refused rather than cast."""
    if isinstance(rows, torch.Tensor):
        if rows.is_floating_point() or rows.is_complex():
            raise WireError(f"rows: an index tensor must hold integers, not {rows.dtype}")
        rows = rows.detach().cpu().numpy()
    if rows.ndim != 1:
        raise WireError(f"rows: an index array must be 1-D, not of shape {tuple(rows.shape)}")
    if rows.dtype == np.bool_:
        if len(rows) != num_rows:
            raise WireError(
                f"rows: a boolean mask needs one value per row ({num_rows}), not {len(rows)}"
            )
        return np.flatnonzero(rows).astype(np.int64, copy=False)
    if rows.dtype.kind not in "iu":
        raise WireError(f"rows: an index array must hold integers, not {rows.dtype}")
    if rows.dtype == np.uint64 and len(rows) and int(rows.max()) > np.iinfo(np.int64).max:
        raise row_index_error("rows", int(rows.max()), num_rows)
    return np.ascontiguousarray(rows, dtype=np.int64)


def chunk(frame: Frame, chunks: int) -> list[Frame]:
    """``chunks`` frames of near-equal row counts (the first ones one row larger), as
    ``torch.tensor_split(x, chunks)`` cuts rows."""
    return _split(frame, count("chunks", chunks, minimum=1))


def concat(frames: Sequence[Frame], *, compact: bool | None = None) -> Frame:
    """All rows of ``frames``, in order. The frames must share a schema; a packed field that
    some frames lack (text-only beside multimodal batches) gives their rows no segments.

    The output's header takes the first frame's form (embedded or compact, see
    ``encode(..., compact=True)``) and its metadata, whatever the form of the others;
    ``compact=True`` or ``False`` chooses the form instead (``concat([frame], compact=False)``
    embeds the schema in a compact frame)."""
    if isinstance(frames, Frame | bytes | bytearray | memoryview):
        raise TypeError("frames must be a list of frames, not one frame")
    frames = [as_frame(f) for f in items("frames", frames)]
    if not frames:
        raise WireError("concat: frames needs at least one frame")
    if compact is not None:
        flag("compact", compact)
    schemas = [checked_schema(f) for f in frames]
    prints = sorted({s.fingerprint for s in schemas})
    if len(prints) != 1:
        raise SchemaError(f"cannot concatenate frames of different schemas: {prints}")
    entries = None if compact is None else schemas[0]._schema_entries(compact)
    joined = _native.gather(frames, None, entries)
    joined.schema = schemas[0]
    return joined


def split(frame: Frame, sections: Sequence[int]) -> list[Frame]:
    """Frames of the given row counts, which must add up to the frame's rows (as
    ``torch.split`` with a list). For ``n`` near-equal parts use :func:`chunk`."""
    if isinstance(sections, int):
        raise TypeError(
            f"split(frame, sections): sections must be a list of row counts, not the int "
            f"{sections!r} (torch.split reads an int as a chunk size, so py_wire takes none); "
            f"py_wire.chunk(frame, {sections!r}) makes {sections!r} near-equal parts"
        )
    return _split(frame, sections)


def _split(frame: Frame, sections: int | Sequence[int]) -> list[Frame]:
    frame = as_frame(frame)
    schema = checked_schema(frame)
    n = frame.num_rows
    if isinstance(sections, int) and not isinstance(sections, bool):
        if not 1 <= sections <= max(n, 1):
            raise WireError(f"chunks must be between 1 and the {n} rows, got {sections}")
        sizes = [len(_near_equal_part(n, sections, i)) for i in range(sections)]
    else:
        if isinstance(sections, str | bytes) or not isinstance(sections, Sequence):
            raise TypeError(f"sections must be a list of ints, not {type(sections).__name__}")
        try:
            too_many = len(sections) > MAX_SECTIONS
        except OverflowError:
            too_many = True
        if too_many:
            raise WireError(f"sections: more than {MAX_SECTIONS} sections")
        sizes = [count(f"sections[{i}]", s) for i, s in enumerate(sections)]
    parts = _native.split_rows(frame, sizes)
    for part in parts:
        part.schema = schema
    return parts


def shard(
    frame: Frame,
    rank: int,
    world_size: int,
    *,
    batch_size: int | None = None,
    allow_uneven: bool = False,
) -> Frame:
    """Data-parallel rank ``rank``'s contiguous share of the rows (as ``chunk(frame,
    world_size)[rank]``, without building the other shards).

    With ``batch_size`` (or ``allow_uneven``) the rows are sharded as NeMo-RL's
    ``shard_by_batch_size(world_size, batch_size, allow_uneven_shards)``: cut into chunks of
    ``batch_size`` rows, each chunk into ``world_size`` equal parts, rank ``rank`` taking its
    part of every chunk, in chunk order (so every rank steps through the chunks together).
    """
    world_size = count("world_size", world_size, minimum=1)
    rank = count("rank", rank)
    if rank >= world_size:
        raise WireError(f"rank {rank} is not in 0..{world_size}")
    batch_size = optional_count("batch_size", batch_size, minimum=1)
    flag("allow_uneven", allow_uneven)
    frame = as_frame(frame)
    if batch_size is not None or allow_uneven:
        from py_wire._trainer import shard_rows

        ranges = shard_rows(
            frame.num_rows, rank, world_size, batch_size=batch_size, allow_uneven=allow_uneven
        )
        return take_rows(frame, ranges)
    return take_rows(frame, _near_equal_part(frame.num_rows, world_size, rank))


def _near_equal_part(rows: int, parts: int, index: int) -> range:
    """Rows of part ``index`` of ``parts`` near-equal contiguous parts, the first ones one row
    larger (``torch.tensor_split``'s rule): the one rule for ``chunk`` and ``shard``."""
    base, extra = divmod(rows, parts)
    start = index * base + min(index, extra)
    return range(start, start + base + (index < extra))


def truncate(frame: Frame, max_len: int) -> Frame:
    """A new frame whose per-token fields keep at most ``max_len`` tokens per row (the first
    ones); packed media stay whole (a segment is never cut, on any dim), scalars are unchanged
    except the schema's lengths field, which becomes each row's truncated length.

    Built from views (``decode``): one token mask for every per-token field (torch, no loop
    over rows), then one ``encode``. The result is validated like any encode, so a cut that
    falls inside an image's placeholder run, or drops placeholders whose media stay, raises
    :class:`ContractError`: choose a longer ``max_len``, or drop those rows first
    (``take_rows``).
    """
    import torch

    from py_wire._decode import decode
    from py_wire._encode import encode

    max_len = integer("max_len", max_len)
    if max_len < 0:
        raise WireError(f"max_len must be a non-negative int, got {max_len}")
    max_len = min(max_len, MAX_COUNT)  # longer than any row: nothing is cut
    frame = as_frame(frame)
    schema = checked_schema(frame)
    # Read only, then copied by encode: views even of a read-only source. Packed fields come
    # back as PackedTensors, which keep shared segments shared.
    batch = decode(frame, writable="view")
    keep: torch.Tensor | None = None
    offsets: torch.Tensor | None = None
    for name, value in batch.items():
        if schema.fields[name].tier != "per_token":
            continue
        if keep is None:  # every per-token field shares the frame's sequence offsets
            lengths = torch.diff(value.offsets())
            starts = value.offsets()[:-1].repeat_interleave(lengths)
            keep = torch.arange(int(lengths.sum())) - starts < max_len
            offsets = torch.nn.functional.pad(lengths.clamp(max=max_len).cumsum(0), (1, 0))
        batch[name] = torch.nested.nested_tensor_from_jagged(value.values()[keep], offsets)
    key = schema.lengths_field
    if key is not None and key in batch and offsets is not None:
        batch[key] = batch[key].clamp(max=max_len)
    return encode(batch, schema, compact=frame.compact)
