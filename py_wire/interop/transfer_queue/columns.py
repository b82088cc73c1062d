"""The TQ columns a group is stored in: which fields travel in which column, the codec of each
column's frames, and a column's bytes (one buffer of 64-byte aligned frames, or Frame objects)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import _native
from py_wire._dtypes import DTYPES
from py_wire._errors import with_context
from py_wire._native import BatchError, Frame, FrameError
from py_wire._schema import FieldDef, Schema, load_schema
from py_wire._typing import as_jagged
from py_wire.interop.transfer_queue.meta import names, tq_module

#: One group's checked fields, as the codec takes them (``py_wire._encode.checked_fields``).
Raw = list[tuple[str, str, Any, Any]]

#: TQ column names, one frame per TQ row in each.
TEXT = "py_wire.text"


MEDIA = "py_wire.media"


COLUMNS = (TEXT, MEDIA)


#: A write-back's TQ column: this prefix, then the fields it holds, comma-separated
#: (:func:`write_back`).
WRITE_BACK = "py_wire.fields:"


#: ``__metadata__`` key naming the column a frame was encoded for (checked on get).
COLUMN_KEY = "py_wire.transfer_queue.column"


#: Frames start at multiples of this inside a column's buffer (py_wire's tensor alignment).
ALIGN = 64


#: The tag :func:`put` sets on each group for TQ's ``SeqlenBalancedSampler``: the group's tokens.
TOTAL_LENGTHS = "total_lengths"


#: Per-sample keys (:func:`put` with one key per sample): the tag naming the key whose
#: ``py_wire.media`` column holds the sample's group's media (its group's first key) ...
MEDIA_HOLDER = "py_wire.media_key"


#: ... and the tag naming the sample's row in that group's media frame.
MEDIA_ROW = "py_wire.media_row"


#: The tag :func:`put` sets on every key: the fingerprint of the schema its frames are of. Frames
#: that a reader can resolve from elsewhere are compact (they name the schema by this fingerprint
#: only: a one-row frame's embedded schema is most of its bytes), so a fetch first makes sure the
#: process holds the schema (:func:`py_wire.interop.transfer_queue.get.fetch_columns`).
SCHEMA_TAG = "py_wire.schema"


#: Per-sample keys: the tag naming the key whose text column holds an embedded frame of the
#: schema (its group's first key); the other keys' text rows are compact. A key without it holds
#: an embedded text frame itself (a key per group).
SCHEMA_HOLDER = "py_wire.schema_key"


def media_fields(schema: Schema | str | Path) -> tuple[str, ...]:
    """The fields stored in the media column: those the schema declares ``column = "media"``
    (images, their grids and masks), in schema order."""
    return tuple(load_schema(schema).column_fields("media"))


def column_of(sch: Schema, name: str) -> str:
    return MEDIA if sch.fields[name].column == "media" else TEXT


def wanted_fields(sch: Schema, stage: str | None, fields: Sequence[str] | None) -> set[str] | None:
    """The fields a fetch returns: the stage's (None: every field), narrowed to ``fields``."""
    wanted = set(sch.fields_for(stage)) if stage is not None else None
    if fields is None:
        return wanted
    fields = names("fields", fields)
    for name in fields:
        if name not in sch.fields:
            raise with_context(
                BatchError(
                    f"fields: {name!r} is not a field of schema {sch.name!r}; fields: "
                    f"{list(sch.fields)}"
                ),
                field=str(name),
            )
        if wanted is not None and name not in wanted:
            raise with_context(
                BatchError(f"fields: {name!r} is not a field of stage {stage!r}"), field=name
            )
    return set(fields)


def columns_for(
    schema: Schema | str | Path, stage: str | None = None, fields: Sequence[str] | None = None
) -> tuple[str, ...]:
    """The stored columns a fetch for ``stage`` (and ``fields``) reads: the text column always,
    the media column when a wanted field is declared ``column = "media"`` (every stage when
    ``stage`` and ``fields`` are None)."""
    sch = load_schema(schema)
    media = set(media_fields(sch))
    if not media:
        return (TEXT,)
    wanted = wanted_fields(sch, stage, fields)
    if wanted is None or wanted & media:
        return COLUMNS
    return (TEXT,)


#: Per (schema fingerprint, column, stage, compact): the codec whose frames carry COLUMN_KEY.
_CODECS: dict[tuple[str, str, str | None, bool], _native.Codec] = {}


_MAX_CODECS = 256


def column_codec(
    sch: Schema, column: str, stage: str | None, carried: Sequence[str], compact: bool = False
) -> _native.Codec:
    """The codec of one column's frames: the contracts ``stage`` is held to whose media field
    the column carries (``names``); ``compact`` frames name the schema by fingerprint only."""
    key = (sch.fingerprint, column, stage, compact)
    codec = _CODECS.get(key)
    if codec is None:
        contracts = [
            text
            for c, text in zip(sch.contracts, sch._contracts_json, strict=True)
            if c.media_field in set(carried) and text in sch._contracts_for(stage)
        ]
        codec = _native.Codec(
            list(sch._specs.values()),
            contracts,
            sch.sequence_field,
            sch.lengths_field,
            {**sch._schema_entries(compact), COLUMN_KEY: column},
        )
        if len(_CODECS) >= _MAX_CODECS:
            _CODECS.clear()
        _CODECS[key] = codec
    return codec


def _aligned_offsets(sizes: Sequence[int]) -> torch.Tensor:
    """Where rows of ``sizes`` bytes start in one buffer, each at a multiple of ``ALIGN``
    (its length padded to one); the last entry is the buffer's length."""
    slots = [-(-n // ALIGN) * ALIGN for n in sizes]
    offsets = torch.zeros(len(slots) + 1, dtype=torch.int64)
    torch.cumsum(torch.tensor(slots, dtype=torch.int64), 0, out=offsets[1:])
    return offsets


def _column(sizes: Sequence[int], fill: Callable[[int, Any], None]) -> torch.Tensor:
    """A jagged ``uint8`` column of rows of ``sizes`` bytes at aligned offsets of one buffer:
    ``fill(i, view)`` writes row ``i`` into its view; the padding after it is zeroed."""
    offsets = _aligned_offsets(sizes)
    buf = torch.empty(int(offsets[-1]), dtype=torch.uint8)
    view = buf.numpy()
    for i, n in enumerate(sizes):
        lo, hi = int(offsets[i]), int(offsets[i + 1])
        fill(i, view[lo : lo + n])
        view[lo + n : hi] = 0
    return torch.nested.nested_tensor_from_jagged(buf, offsets)


def packed_column(codec: _native.Codec, raws: Sequence[Raw]) -> torch.Tensor:
    """One column as a jagged ``uint8`` nested tensor, one frame per group, each at a 64-byte
    aligned offset of one buffer (its length padded to a multiple of 64)."""
    sizes = [_native.encoded_nbytes(codec, raw) for raw in raws]

    def fill(i: int, view: Any) -> None:
        _native.encode(codec, raws[i], None, None, view)

    return _column(sizes, fill)


def frames_column(frames: Sequence[Frame]) -> torch.Tensor:
    """Frames already encoded, as the jagged ``uint8`` column TQ's storage units hold (the
    layout :func:`put` writes): each frame's bytes at a 64-byte aligned offset of one buffer."""

    def fill(i: int, view: Any) -> None:
        view[:] = memoryview(frames[i])

    return _column([f.nbytes for f in frames], fill)


def stored_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
    """The frames of one column as TQ's get returned them: a jagged ``uint8`` tensor
    (SimpleStorage) or one Frame per key (RayStore)."""
    if isinstance(value, torch.Tensor):
        if not (value.is_nested and value.layout == torch.jagged and value.dtype == torch.uint8):
            what = "nested" if value.is_nested else "dense"
            raise with_context(
                FrameError(
                    f"TQ column {column!r} holds a {what} {value.dtype} tensor, not py_wire "
                    "frames (a jagged uint8 tensor, or Frame objects)"
                ),
                field=column,
                found=str(value.dtype),
                expected="torch.uint8",
            )
        buf = value.values()
        offsets = as_jagged(value).offsets().tolist()
        if len(offsets) != len(keys) + 1:
            raise FrameError(
                f"TQ column {column!r} holds {len(offsets) - 1} rows for {len(keys)} keys"
            )
        return [
            Frame.from_buffer(buf[offsets[i] : offsets[i + 1]].numpy()) for i in range(len(keys))
        ]
    values = value.tolist() if hasattr(value, "tolist") else value
    if isinstance(values, list | tuple) and all(isinstance(v, Frame) for v in values):
        if len(values) != len(keys):
            raise FrameError(
                f"TQ column {column!r} holds {len(values)} frames for {len(keys)} keys"
            )
        return list(values)
    raise FrameError(
        f"TQ column {column!r} holds {type(value).__name__}, not py_wire frames "
        "(a jagged uint8 tensor, or Frame objects)"
    )


def is_ours(column: str) -> bool:
    return column in COLUMNS or column.startswith(WRITE_BACK)


def is_write_back(column: str) -> bool:
    return column.startswith(WRITE_BACK)


def written_fields(column: str) -> list[str]:
    return column[len(WRITE_BACK) :].split(",") if column.startswith(WRITE_BACK) else []


def stores_frames_as_objects() -> bool:
    """Whether this process's TQ client stores each value with ``ray.put`` (TQ's RayStore
    backend), so that a frame goes as one :class:`~py_wire.Frame` object rather than as bytes
    through TQ's storage units."""
    client = tq_module().get_client()
    storage = getattr(getattr(client, "storage_manager", None), "storage_client", None)
    try:
        module = importlib.import_module("transfer_queue.storage.clients.ray_storage_client")
    except ImportError:  # a TQ without RayStore
        return False
    return isinstance(storage, module.RayStorageClient)


def row_bytes_field(sch: Schema, column: str) -> tuple[str, FieldDef] | None:
    """The field whose raw values a write-back column holds, one key's rows per TQ row, when
    the column is one per-token or scalar field of static dims stored as it is given (no wire
    cast): such a row is its values' bytes alone, what NeMo-RL's own wire moves, where a frame
    would add a header and offsets to every key. None: the column holds frames. Decided by
    the schema and the column's name alone, the same way on write and on read."""
    names = written_fields(column)
    if len(names) != 1 or names[0] not in sch.fields:
        return None
    field = sch.fields[names[0]]
    static = all(isinstance(d, int) for d in field.shape)
    if field.tier not in ("per_token", "scalar") or not static or field.wire_dtype is not None:
        return None
    return names[0], field


def row_bytes(field: FieldDef) -> int:
    """Bytes of one token (per-token) or one row (scalar) of ``field`` (static dims)."""
    n = torch.empty((), dtype=DTYPES[field.dtype]).element_size()
    for d in field.shape:
        n *= int(d)
    return n


def stored_rows(value: Any, column: str, keys: Sequence[str]) -> tuple[Any, list[int]]:
    """A raw-bytes column as TQ's get returned it (a jagged ``uint8`` tensor on SimpleStorage,
    one byte string per key on RayStore): one ``uint8`` numpy buffer of every key's bytes in
    order, and where each key's start (the last entry its end)."""
    if isinstance(value, torch.Tensor):
        if not (value.is_nested and value.layout == torch.jagged and value.dtype == torch.uint8):
            raise with_context(
                FrameError(f"TQ column {column!r} holds a {value.dtype} tensor, not raw rows"),
                field=column,
            )
        offsets = as_jagged(value).offsets().tolist()
        buf = value.values().numpy()
        if len(offsets) != len(keys) + 1:
            raise FrameError(
                f"TQ column {column!r} holds {len(offsets) - 1} rows for {len(keys)} keys"
            )
        return buf[offsets[0] : offsets[-1]], [o - offsets[0] for o in offsets]
    values = value.tolist() if hasattr(value, "tolist") else value
    if not isinstance(values, list | tuple) or len(values) != len(keys):
        raise FrameError(
            f"TQ column {column!r} holds {type(value).__name__}, not one byte row per key"
        )
    parts = []
    for key, v in zip(keys, values, strict=True):
        if not isinstance(v, bytes | bytearray | memoryview):
            raise with_context(
                FrameError(
                    f"key {key!r}: TQ column {column!r} holds {type(v).__name__}, not raw rows"
                ),
                field=column,
            )
        parts.append(np.frombuffer(v, dtype=np.uint8))
    offsets = [0]
    for p in parts:
        offsets.append(offsets[-1] + len(p))
    return (np.concatenate(parts) if parts else np.zeros(0, np.uint8)), offsets


def rows_column(data: Any, offsets: Sequence[int], as_objects: bool) -> Any:
    """Each key's bytes (``data[offsets[i]:offsets[i + 1]]``, a ``uint8`` numpy buffer) as a TQ
    column: one jagged ``uint8`` tensor over ``data`` (no copy), or a byte string per key."""
    if as_objects:
        return [data[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(offsets) - 1)]
    return torch.nested.nested_tensor_from_jagged(
        torch.from_numpy(data), torch.tensor(list(offsets), dtype=torch.int64)
    )
