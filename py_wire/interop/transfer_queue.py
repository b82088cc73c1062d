"""TransferQueue: py_wire frames as TransferQueue rows.

TransferQueue (TQ, PyPI ``transferqueue``) keeps what it is good at: keys, tags, partitions,
samplers, consumption tracking and capacity. py_wire keeps what TQ cannot: ragged media with
their image boundaries, per-row shapes and lengths, media shared inside a GRPO group, dtypes
checked at the producer. :func:`put` stores a batch as frames, :func:`get` returns the decoded
views of the rows asked for (:func:`get_frames` the frames themselves).

**Granularity: one TQ row per GRPO group** (``group_size`` rows of the batch, the ``n``
generations of one prompt; ``group_size=1`` gives one TQ row per sample). A group's rows share
their prompt's images: inside one frame they are one segment, stored and moved once (the
Qwen2.5-VL batch of ``benchmarks/data_plane.py``: 73 MB instead of 291 MB); per-row frames
would store every image ``n`` times. GRPO consumes whole groups anyway (advantages are
normalised per group), so TQ's samplers pick groups: a sampler sees one key per group, and
its tags are the caller's (nothing py_wire needs travels in tags).

**Stages are columns.** Every group is two TQ columns, each holding one frame per row:
``py_wire.text`` (every per-token, scalar and non-media packed field) and ``py_wire.media`` (the
media fields: packed fields that a placeholder contract names or that hold floating-point
data, e.g. ``pixel_values``, ``image_grid_thw``; plus the sequence field, so that the media
frame is checkable on its own, :func:`py_wire.check_contracts`, for 0.4 % more bytes on the
Qwen2.5-VL batch). ``get(..., stage=s)`` fetches the media column only when stage ``s`` needs a
media field: a text-only stage (``generation`` of ``qwen2_5_vl``, or ``columns=("text",)``)
moves no media byte. Shapes, lengths and segment boundaries live inside the frames.

**The producer checks everything.** :func:`put` validates the whole batch as :func:`py_wire.encode`
does (names, required fields, dtypes, shapes, placeholder contracts) before anything reaches
TQ: a ``reward`` that drifted from float32 to bfloat16 raises :class:`~py_wire.BatchError`
(TQ alone logs "dtype mismatch" and promotes on get).

**Why above ``kv_batch_put`` / ``kv_batch_get`` rather than a registered storage manager.**
TQ's ``StorageManager`` interface is ``put_data(TensorDict)`` / ``get_data() -> TensorDict``
and the client wraps every get in a ``TensorDict`` whatever the manager does, so a registered
manager (``StorageManagerFactory``) or KV client (``StorageClientFactory``) cannot remove the
TensorDict boundary; it would only replace SimpleStorage's storage units with new actors of
its own. What TQ's conversions cost is the per-field nested rebuild of *many* ragged tensors;
a frame column is one jagged ``uint8`` tensor per column whose rows TQ's serializer moves as
buffers with no copy on put (the groups are encoded straight into one buffer, each at a
64-byte aligned slot) and concatenates once on get (one memcpy of the stored bytes, which
:func:`get` then decodes as views, 64-byte alignment kept). The rest of the time is TQ's own
byte moves through its storage units, which a manager of ours would pay too.

**Two storage paths, chosen from the TQ client's backend.** On SimpleStorage (TQ's default)
a column is one jagged ``uint8`` tensor, as above: its bytes go through TQ's storage units
(ZMQ sockets, about four copies of every stored byte on put and get together). On TQ's
``RayStore`` backend (``backend.storage_backend: RayStore``) each group's frame is one
:class:`~py_wire.Frame` value that TQ's ``RayStorageClient`` stores with ``ray.put``: the frame
goes into Ray's object store once, and :func:`get` decodes it in place (a read-only object
store page is mapped copy-on-write, so views are writable and a write stays private; see
:meth:`py_wire.Frame.copy_on_write`). TQ's own tensor path on RayStore needs NIXL
(``ray.put(..., _tensor_transport="nixl")``); frames, stored as objects, do not. As with any
``ray.put``, the producer process owns the objects: they live while it does (TQ's design for
RayStore, not py_wire's), and :func:`clear` (TQ's ``kv_clear``) frees them.

Nothing here starts Ray or TQ: call ``ray.init(num_cpus=4)`` (TQ's controller and each of its
storage units take one CPU; fewer makes ``transfer_queue.init()`` hang) and
``transfer_queue.init()`` first.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import _native
from py_wire._args import batch_mapping, count, items
from py_wire._decode import Writable, checked_schema, decode
from py_wire._dtypes import DTYPES
from py_wire._encode import _fields, plain_tensors
from py_wire._errors import with_context
from py_wire._native import BatchError, Frame, FrameError
from py_wire._ops import concat
from py_wire._schema import FINGERPRINT_KEY, SCHEMA_KEY, Schema, load_schema
from py_wire._typing import as_jagged

#: TQ column names, one frame per TQ row in each.
TEXT = "py_wire.text"
MEDIA = "py_wire.media"
COLUMNS = (TEXT, MEDIA)
#: ``__metadata__`` key naming the column a frame was encoded for (checked on get).
COLUMN_KEY = "py_wire.transfer_queue.column"
#: Frames start at multiples of this inside a column's buffer (py_wire's tensor alignment).
ALIGN = 64


def _tq() -> Any:
    """The ``transfer_queue`` module (imported on use: it is not a dependency of py_wire)."""
    return importlib.import_module("transfer_queue")


def media_fields(schema: Schema | str | Path) -> tuple[str, ...]:
    """The fields stored in the media column: packed fields that a placeholder contract names
    (media, grid, sizes, count) or whose dtype is floating point, in schema order."""
    sch = load_schema(schema)
    named: set[str] = set()
    for c in sch.contracts:
        named.update(
            f for f in (c.media_field, c.grid_field, c.sizes_field, c.count_field) if f is not None
        )
    return tuple(
        name
        for name, f in sch.fields.items()
        if f.tier == "packed" and (name in named or DTYPES[f.dtype].is_floating_point)
    )


def columns_for(schema: Schema | str | Path, stage: str | None = None) -> tuple[str, ...]:
    """The TQ columns a fetch for ``stage`` reads: the text column always, the media column
    when the stage needs a media field (every stage when ``stage`` is None)."""
    sch = load_schema(schema)
    media = media_fields(sch)
    if not media:
        return (TEXT,)
    if stage is None or set(sch.fields_for(stage)) & set(media):
        return COLUMNS
    return (TEXT,)


#: Per (schema fingerprint, column, with contracts): the codec whose frames carry COLUMN_KEY.
_CODECS: dict[tuple[str, str, bool], _native.Codec] = {}


def _codec(sch: Schema, column: str, contracts: bool) -> _native.Codec:
    key = (sch.fingerprint, column, contracts)
    codec = _CODECS.get(key)
    if codec is None:
        codec = _native.Codec(
            list(sch._specs.values()),
            sch._contracts_for(None) if contracts else [],
            sch.sequence_field,
            sch.lengths_field,
            {SCHEMA_KEY: sch.canonical_json, FINGERPRINT_KEY: sch.fingerprint, COLUMN_KEY: column},
        )
        _CODECS[key] = codec
    return codec


def _group_spans(num_rows: int, group_size: int | Sequence[int]) -> list[tuple[int, int]]:
    if isinstance(group_size, bool):
        raise TypeError(f"group_size must be an int or a sequence of ints, not {group_size!r}")
    if isinstance(group_size, int | np.integer):
        size = int(group_size)
        if size < 1 or num_rows % size:
            raise with_field(
                BatchError(
                    f"group_size={size} must be a positive divisor of the batch's {num_rows} rows"
                ),
                "group_size",
            )
        sizes = [size] * (num_rows // size)
    else:
        sizes = [
            count(f"group_size[{i}]", s) for i, s in enumerate(items("group_size", group_size))
        ]
        if any(s < 1 for s in sizes) or sum(sizes) != num_rows:
            raise with_field(
                BatchError(
                    f"group_size {sizes} must be positive and add up to the batch's {num_rows} rows"
                ),
                "group_size",
            )
    spans, start = [], 0
    for s in sizes:
        spans.append((start, start + s))
        start += s
    return spans


def with_field(err: BatchError, field: str) -> BatchError:
    return with_context(err, field=field)


def _num_rows(batch: Mapping[str, Any], sch: Schema) -> int:
    value = batch.get(sch.sequence_field) if sch.sequence_field else None
    if value is None:
        value = next((v for v in batch.values() if v is not None), None)
    if value is None:
        return 0
    if isinstance(value, torch.Tensor) and value.is_nested:
        return int(value.size(0))
    try:
        return len(value)
    except TypeError:
        name = next(k for k, v in batch.items() if v is value)
        raise TypeError(
            f"batch field {name!r} must hold rows (a list, a tensor), not {type(value).__name__}"
        ) from None


def _rows(value: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of one input value, in a form ``encode`` accepts, without copying."""
    if value is None:
        return None
    if isinstance(value, torch.Tensor) and value.is_nested and value.layout == torch.jagged:
        offsets = as_jagged(value).offsets()
        lo, hi = int(offsets[start]), int(offsets[stop])
        return torch.nested.nested_tensor_from_jagged(
            value.values()[lo:hi], offsets[start : stop + 1] - lo
        )
    if isinstance(value, torch.Tensor) and value.is_nested:  # strided nested
        return list(value.unbind())[start:stop]
    if isinstance(value, torch.Tensor | np.ndarray | list | tuple):
        return value[start:stop]
    if hasattr(value, "tensors") and hasattr(value, "slice"):  # PackedTensor, NeMo-RL's too
        return value.slice(range(start, stop))
    raise TypeError(
        f"cannot take rows of a {type(value).__name__} (give lists, tensors, numpy arrays, "
        "jagged nested tensors or PackedTensors)"
    )


def _group_plans(
    batch: Mapping[str, Any], sch: Schema, group_size: int | Sequence[int]
) -> tuple[dict[str, list[list[tuple[str, str, Any, Any]]]], tuple[str, ...]]:
    """Per column, each group's checked fields (as :func:`py_wire.encode` checks a batch), and
    the columns the schema has."""
    batch = batch_mapping("batch", batch)
    media = set(media_fields(sch))
    spans = _group_spans(_num_rows(batch, sch), group_size)
    plans: dict[str, list[list[tuple[str, str, Any, Any]]]] = {c: [] for c in COLUMNS}
    for start, stop in spans:
        group = {k: _rows(v, start, stop) for k, v in batch.items()}
        raw = _fields(group, sch, None)
        plans[TEXT].append([r for r in raw if r[0] not in media])
        plans[MEDIA].append([r for r in raw if r[0] in media or r[0] == sch.sequence_field])
    return plans, COLUMNS if media else (TEXT,)


def encode_groups(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    group_size: int | Sequence[int] = 1,
) -> dict[str, torch.Tensor]:
    """The batch as TQ columns: per column a jagged ``uint8`` nested tensor, one frame per group
    (each at a 64-byte aligned offset of one buffer, its length padded to a multiple of 64).
    Every group is checked as :func:`py_wire.encode` checks a batch, before any byte is
    written. No column when the batch has no rows; no media column for a schema without media
    fields."""
    sch = load_schema(schema)
    media = bool(media_fields(sch))
    plans, columns = _group_plans(batch, sch, group_size)
    spans = plans[TEXT]
    out: dict[str, torch.Tensor] = {}
    with plain_tensors():
        for column in columns:
            codec = _codec(sch, column, contracts=column == MEDIA or not media)
            sizes = [_native.encoded_nbytes(codec, raw) for raw in plans[column]]
            slots = [-(-n // ALIGN) * ALIGN for n in sizes]
            offsets = torch.zeros(len(slots) + 1, dtype=torch.int64)
            torch.cumsum(torch.tensor(slots, dtype=torch.int64), 0, out=offsets[1:])
            buf = torch.empty(int(offsets[-1]), dtype=torch.uint8)
            view = buf.numpy()
            for i, raw in enumerate(plans[column]):
                lo = int(offsets[i])
                _native.encode(codec, raw, None, None, view[lo : lo + sizes[i]])
                view[lo + sizes[i] : lo + slots[i]] = 0
            if spans:
                out[column] = torch.nested.nested_tensor_from_jagged(buf, offsets)
    return out


def encode_group_frames(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    group_size: int | Sequence[int] = 1,
) -> dict[str, list[Frame]]:
    """The batch as TQ columns of :class:`~py_wire.Frame` objects, one per group (the RayStore
    path): the same frames :func:`encode_groups` packs into one buffer, each in its own."""
    sch = load_schema(schema)
    media = bool(media_fields(sch))
    plans, columns = _group_plans(batch, sch, group_size)
    out: dict[str, list[Frame]] = {}
    with plain_tensors():
        for column in columns:
            codec = _codec(sch, column, contracts=column == MEDIA or not media)
            if plans[column]:
                out[column] = [
                    _native.encode(codec, raw, None, None, None) for raw in plans[column]
                ]
    return out


def stores_frames_as_objects() -> bool:
    """Whether this process's TQ client stores each value with ``ray.put`` (TQ's RayStore
    backend), so that a frame goes as one :class:`~py_wire.Frame` object rather than as bytes
    through TQ's storage units."""
    client = _tq().get_client()
    storage = getattr(getattr(client, "storage_manager", None), "storage_client", None)
    try:
        module = importlib.import_module("transfer_queue.storage.clients.ray_storage_client")
    except ImportError:  # a TQ without RayStore
        return False
    return isinstance(storage, module.RayStorageClient)


def put(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    keys: Sequence[str],
    partition_id: str,
    *,
    group_size: int | Sequence[int] = 1,
    tags: Sequence[Mapping[str, Any]] | None = None,
) -> Any:
    """Store ``batch`` in TQ, one row per group under ``keys`` (one key per group, in order),
    in ``partition_id``, with optional per-group ``tags`` (TQ's, untouched). Returns TQ's
    ``KVBatchMeta``, or None for a batch of no rows (nothing is stored). Raises
    :class:`~py_wire.BatchError` for anything :func:`py_wire.encode` refuses, before TQ sees a
    byte."""
    sch = load_schema(schema)
    as_objects = stores_frames_as_objects()
    columns: Mapping[str, Any] = (
        encode_group_frames(batch, sch, group_size)
        if as_objects
        else encode_groups(batch, sch, group_size)
    )
    n = 0 if not columns else len(next(iter(columns.values())))
    keys = list(keys)
    if len(keys) != n:
        raise with_field(BatchError(f"{len(keys)} keys for {n} groups (one key per group)"), "keys")
    if tags is not None and len(tags) != n:
        raise with_field(BatchError(f"{len(tags)} tags for {n} groups"), "tags")
    if n == 0:
        return None
    from tensordict import NonTensorStack, TensorDict

    if as_objects:
        columns = {c: NonTensorStack(*frames) for c, frames in columns.items()}
    fields = TensorDict(columns, batch_size=[n])
    return _tq().kv_batch_put(
        keys=keys,
        partition_id=partition_id,
        fields=fields,
        tags=None if tags is None else [dict(t) for t in tags],
    )


def _stored_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
    """The frames of one column as TQ's get returned them: a jagged ``uint8`` tensor
    (SimpleStorage) or one Frame per key (RayStore)."""
    if (
        isinstance(value, torch.Tensor)
        and value.is_nested
        and value.layout == torch.jagged
        and value.dtype == torch.uint8
    ):
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


def _column_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
    frames = []
    for key, frame in zip(keys, _stored_frames(value, column, keys), strict=True):
        if frame.metadata.get(COLUMN_KEY) != column:
            raise FrameError(
                f"key {key!r}: the frame in TQ column {column!r} was encoded for column "
                f"{frame.metadata.get(COLUMN_KEY)!r}"
            )
        frame.schema = checked_schema(frame)
        frames.append(frame)
    return frames


def get_frames(
    keys: Sequence[str] | str,
    partition_id: str,
    columns: Sequence[str] = COLUMNS,
) -> dict[str, list[Frame]]:
    """Per column of ``columns``, the frames of ``keys`` in that order: views of the one buffer
    TQ's get returns (no further copy). A schema without media fields has no media column."""
    keys = _key_list(keys)
    bad = [c for c in columns if c not in COLUMNS]
    if bad or not columns:
        raise with_field(
            BatchError(f"columns {list(columns)} must be some of {list(COLUMNS)}"), "columns"
        )
    got = _tq().kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(columns))
    return {c: _column_frames(got[c], c, keys) for c in columns}


def _all_frames(keys: list[str], partition_id: str) -> dict[str, list[Frame]]:
    """Both columns in one TQ round trip (TQ returns only the columns it holds), the media
    column required when the frames' schema has media fields."""
    got = _tq().kv_batch_get(keys=keys, partition_id=partition_id, select_fields=list(COLUMNS))
    held = set(got.keys())
    if TEXT not in held:
        raise FrameError(f"TQ holds no {TEXT!r} column for keys {keys[:4]}")
    frames = {c: _column_frames(got[c], c, keys) for c in COLUMNS if c in held}
    if MEDIA not in frames and media_fields(checked_schema(frames[TEXT][0])):
        raise FrameError(
            f"TQ holds no {MEDIA!r} column for keys {keys[:4]}, though their schema has media"
        )
    return frames


def _key_list(keys: Sequence[str] | str) -> list[str]:
    keys = [keys] if isinstance(keys, str) else list(keys)
    if not keys:
        raise with_field(BatchError("keys is empty: nothing to get"), "keys")
    return keys


def get(
    keys: Sequence[str] | str,
    partition_id: str,
    *,
    stage: str | None = None,
    columns: Sequence[str] | None = None,
    writable: Writable = "auto",
    **decode_options: Any,
) -> dict[str, Any]:
    """The rows of ``keys`` (groups, in that order) decoded as :func:`py_wire.decode` does
    (``decode_options`` are its keywords), the fields of both columns merged into one dict.
    ``stage`` decodes that stage's fields and fetches the media column only when the stage
    needs media; ``columns=(TEXT,)`` asks for the text column alone. Several keys are joined
    with :func:`py_wire.concat` (one copy); a single key decodes as views of TQ's buffer."""
    keys = _key_list(keys)
    if columns is None and stage is None:
        frames = _all_frames(keys, partition_id)
    elif columns is None:
        frames = get_frames(keys, partition_id, (TEXT,))
        wanted = columns_for(checked_schema(frames[TEXT][0]), stage)
        if MEDIA in wanted:
            frames.update(get_frames(keys, partition_id, (MEDIA,)))
    else:
        frames = get_frames(keys, partition_id, columns)
    out: dict[str, Any] = {}
    for column in COLUMNS:
        if column not in frames:
            continue
        group = frames[column]
        frame = group[0] if len(group) == 1 else concat(group)
        fields = decode(frame, stage=stage, writable=writable, **decode_options)
        for name, value in fields.items():
            out.setdefault(name, value)
    return out
