"""The TQ columns a group is stored in: which fields travel in which column, the codec of each
column's frames, and a column's bytes (one buffer of 64-byte aligned frames, or Frame objects)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from py_wire import BatchError, Frame, FrameError, Schema, load_schema
from py_wire.adapters import (
    Codec,
    as_jagged,
    codec_nbytes,
    column_fields,
    encode_with_codec,
    hold_schema,
    items,
    names,
    with_context,
)
from py_wire.interop.transfer_queue.meta import tq_module

#: One group's checked fields, as the codec takes them (``py_wire.adapters.checked_fields``).
Raw = list[tuple[str, str, Any, Any]]

#: TQ column names, one frame per TQ row in each.
TEXT = "py_wire.text"


MEDIA = "py_wire.media"


COLUMNS = (TEXT, MEDIA)


#: A write-back's TQ column: this prefix, then the fields it holds, comma-separated
#: (:func:`write_back`).
WRITE_BACK = "py_wire.fields:"


#: ``__metadata__`` key naming the column a frame was encoded for (checked on get). Text and
#: media frames carry it; a write-back frame does not (its fields name its column, and get
#: checks them: 64 bytes less on each key's one-row write-back frame).
COLUMN_KEY = "py_wire.transfer_queue.column"


#: ``__metadata__`` key holding the identity of the group a frame was stored for: one random
#: id per group at :func:`put`, carried by the group's text and media frames and by every
#: write-back frame of its keys, and tagged on its keys (``GROUP``). :func:`get` compares
#: them, so a key never reads another group's media or an earlier put's write-backs.
GROUP_KEY = "py_wire.transfer_queue.group"


#: The tag naming each key's group identity (``GROUP_KEY``'s value).
GROUP = "py_wire.group"


#: The tag listing the write-back columns :func:`write_back` added to a key: how :func:`get`
#: learns the names of write-back columns that only some of the keys it fetches hold (TQ's
#: metadata of many keys lists the columns all of them hold).
WRITE_BACKS = "py_wire.write_backs"


#: Frames start at multiples of this inside a column's buffer (py_wire's tensor alignment).
ALIGN = 64


#: The tag :func:`put` sets on each group for TQ's ``SeqlenBalancedSampler``: the group's tokens.
TOTAL_LENGTHS = "total_lengths"


#: Per-sample keys (:func:`put` with one key per sample): the tag naming the key whose
#: ``py_wire.media`` column holds the sample's group's media (its group's first key) ...
MEDIA_HOLDER = "py_wire.media_key"


#: ... and the tag naming the sample's row in that group's media frame.
MEDIA_ROW = "py_wire.media_row"


#: The tag naming the fingerprint of the schema a key's frames were encoded with. Write-back
#: frames and per-sample text frames are compact (they name the schema by fingerprint, not
#: its text: a 1-row frame's header is then ~450 bytes, not ~4.4 KB); a reader that does not
#: hold the schema learns it, before fetching them, from the key ``SCHEMA_HOLDER`` names.
SCHEMA = "py_wire.schema"


#: The tag naming the key whose text frame embeds the schema: the key itself for a key per
#: group, the group's first key for per-sample keys (clear a group's keys together).
SCHEMA_HOLDER = "py_wire.schema_key"


#: The tag recording what :func:`put` stored in a key's text column: its rows' token counts,
#: comma-separated (one for a per-sample key), then ``;`` and the fields its text frame holds,
#: comma-separated (``"960;input_ids,input_lengths"``). One string, not lists: TQ deep-copies
#: every key's tags on each put and lookup. :func:`write_back` checks written rows against it
#: without fetching the text column (a key whose tags lack it or garble it is checked against
#: its frames); :func:`get` compares each write-back frame's rows with the text frame's.
STORED = "py_wire.stored"


def media_fields(schema: Schema | str | Path) -> tuple[str, ...]:
    """The fields stored in the media column: those the schema declares ``column = "media"``
    (images, their grids and masks), in schema order."""
    return tuple(column_fields(load_schema(schema), "media"))


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


#: Per (schema fingerprint, column, stage, compact): the codec of that column's frames.
_CODECS: dict[tuple[str, str, str | None, bool], Codec] = {}


_MAX_CODECS = 256


def column_codec(
    sch: Schema,
    column: str,
    stage: str | None,
    carried: Sequence[str],
    group: str | None = None,
    compact: bool = False,
) -> Codec:
    """The codec of one column's frames: the contracts ``stage`` is held to whose media field
    the column carries (``names``); with ``group``, frames that carry that group identity
    (``GROUP_KEY``; built each time: a codec costs microseconds). ``compact``: frames that
    name the schema by fingerprint (``SCHEMA``), not embed its text."""
    key = (sch.fingerprint, column, stage, compact)
    if compact:
        hold_schema(sch)  # this process reads back what it writes
    codec = None if group is not None else _CODECS.get(key)
    if codec is None:
        contracts = [
            text
            for c, text in zip(sch.contracts, sch._contracts_json, strict=True)
            if c.media_field in set(carried) and text in sch._contracts_for(stage)
        ]
        metadata = sch._schema_entries(compact)
        if not is_write_back(column):
            metadata[COLUMN_KEY] = column
        if group is not None:
            metadata[GROUP_KEY] = group
        codec = Codec(
            list(sch._specs.values()), contracts, sch.sequence_field, sch.lengths_field, metadata
        )
        if group is not None:
            return codec
        if len(_CODECS) >= _MAX_CODECS:
            _CODECS.clear()
        _CODECS[key] = codec
    return codec


def frame_group(frame: Frame) -> str | None:
    """The group identity ``frame`` was stored for (None: a frame put by a py_wire without
    group identities)."""
    return frame.metadata.get(GROUP_KEY)


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


def packed_column(codecs: Sequence[Codec], raws: Sequence[Raw]) -> torch.Tensor:
    """One column as a jagged ``uint8`` nested tensor, one frame per group (``codecs[i]``
    encodes ``raws[i]``), each at a 64-byte aligned offset of one buffer (its length padded to
    a multiple of 64)."""
    sizes = [codec_nbytes(c, raw) for c, raw in zip(codecs, raws, strict=True)]

    def fill(i: int, view: Any) -> None:
        encode_with_codec(codecs[i], raws[i], None, None, view)

    return _column(sizes, fill)


def frames_column(frames: Sequence[Frame]) -> torch.Tensor:
    """Frames already encoded, as the jagged ``uint8`` column TQ's storage units hold (the
    layout :func:`put` writes): each frame's bytes at a 64-byte aligned offset of one buffer."""
    frames = items("frames", frames, each=_frame_item)

    def fill(i: int, view: Any) -> None:
        view[:] = memoryview(frames[i])

    return _column([f.nbytes for f in frames], fill)


def _frame_item(value: object) -> Frame:
    if not isinstance(value, Frame):
        raise TypeError(f"frames holds a {type(value).__name__}, not a py_wire Frame")
    return value


def stored_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
    """The frames of one column as TQ's get returned them (``value``): a jagged ``uint8``
    tensor (SimpleStorage) or one Frame per key (RayStore)."""
    if not isinstance(column, str):
        raise TypeError(f"column must be a str, not {type(column).__name__} {column!r:.60}")
    keys = names("keys", keys)
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
        whole = buf.numpy()  # numpy slices: a torch slice per key costs ~10x as much
        return [Frame.from_buffer(whole[offsets[i] : offsets[i + 1]]) for i in range(len(keys))]
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
