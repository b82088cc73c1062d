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
``py_wire.text`` and ``py_wire.media``. Which column a field travels in is declared in the
schema file (``column = "media"`` on images, their grids and masks; ``"text"``, the default,
for everything else; see docs/schemas.md); the sequence field travels in both, so that each
column's frame is checkable on its own (:func:`py_wire.check_contracts`) and :func:`get` can
check that the columns of one key are one group's (same schema, rows and tokens) before merging
them. ``get(..., stage=s)`` or ``get(..., fields=[...])`` fetches the media column only when a
wanted field is declared media: a text-only stage (``generation`` of ``qwen2_5_vl``) moves no
media byte. Whatever columns it reads, a fetch returns exactly what :func:`py_wire.decode`
returns of the whole batch for that stage. Shapes, lengths and segment boundaries live inside
the frames.

**Write-backs.** The fields later stages add (``prev_logprobs``, ``reference_policy_logprobs``,
``advantages``) are not stored at put (``put(..., stage="logprob")`` accepts a rollout batch
without them) but added per key by :func:`write_back`, each write-back one more TQ column
(``py_wire.fields:<names>``) checked against the stored groups (schema, rows, each row's
tokens) before TQ sees a byte; :func:`get` merges stored and written-back fields.

**Samplers.** :func:`put` tags each group with ``total_lengths`` (its tokens), what TQ's
``SeqlenBalancedSampler`` reads; :func:`get_by_meta` decodes the samples of the ``BatchMeta``
a sampler or ``get_meta`` hands out, and :func:`decode_columns` the frames of columns already
fetched.

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
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import _native
from py_wire._args import batch_mapping, count, flag, items
from py_wire._decode import (
    FrameViews,
    Writable,
    add_missing_fields,
    checked_schema,
    decode_selected,
)
from py_wire._encode import _fields, plain_tensors
from py_wire._errors import with_context
from py_wire._native import BatchError, Frame, FrameError
from py_wire._ops import concat, take_rows
from py_wire._packed import PackedTensor
from py_wire._schema import FINGERPRINT_KEY, SCHEMA_KEY, Schema, load_schema
from py_wire._typing import as_jagged

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


def _tq() -> Any:
    """The ``transfer_queue`` module (imported on use: it is not a dependency of py_wire)."""
    return importlib.import_module("transfer_queue")


def media_fields(schema: Schema | str | Path) -> tuple[str, ...]:
    """The fields stored in the media column: those the schema declares ``column = "media"``
    (images, their grids and masks), in schema order."""
    return tuple(load_schema(schema).column_fields("media"))


def _column_of(sch: Schema, name: str) -> str:
    return MEDIA if sch.fields[name].column == "media" else TEXT


def _wanted(sch: Schema, stage: str | None, fields: Sequence[str] | None) -> set[str] | None:
    """The fields a fetch returns: the stage's (None: every field), narrowed to ``fields``."""
    wanted = set(sch.fields_for(stage)) if stage is not None else None
    if fields is None:
        return wanted
    fields = _names("fields", fields)
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
    wanted = _wanted(sch, stage, fields)
    if wanted is None or wanted & media:
        return COLUMNS
    return (TEXT,)


#: Per (schema fingerprint, column, stage): the codec whose frames carry COLUMN_KEY.
_CODECS: dict[tuple[str, str, str | None], _native.Codec] = {}
_MAX_CODECS = 256


def _codec(sch: Schema, column: str, stage: str | None, names: Sequence[str]) -> _native.Codec:
    """The codec of one column's frames: the contracts ``stage`` is held to whose media field
    the column carries (``names``)."""
    key = (sch.fingerprint, column, stage)
    codec = _CODECS.get(key)
    if codec is None:
        carried = set(names)
        contracts = [
            text
            for c, text in zip(sch.contracts, sch._contracts_json, strict=True)
            if c.media_field in carried and text in sch._contracts_for(stage)
        ]
        codec = _native.Codec(
            list(sch._specs.values()),
            contracts,
            sch.sequence_field,
            sch.lengths_field,
            {SCHEMA_KEY: sch.canonical_json, FINGERPRINT_KEY: sch.fingerprint, COLUMN_KEY: column},
        )
        if len(_CODECS) >= _MAX_CODECS:
            _CODECS.clear()
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
        # Each size is at least 1 and they add up to the rows: no more sizes than rows.
        listed = items("group_size", group_size, limit=max(num_rows, 1))
        sizes = [count(f"group_size[{i}]", s) for i, s in enumerate(listed)]
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


def _value_rows(value: Any) -> int:
    if isinstance(value, torch.Tensor) and value.is_nested:
        return int(value.size(0))
    try:
        return len(value)
    except TypeError:
        raise TypeError(
            f"a batch field must hold rows (a list, a tensor), not {type(value).__name__}"
        ) from None


def _num_rows(batch: Mapping[str, Any], sch: Schema) -> int:
    value = batch.get(sch.sequence_field) if sch.sequence_field else None
    if value is None:
        value = next((v for v in batch.values() if v is not None), None)
    if value is None:
        return 0
    return _value_rows(value)


def _rows(name: str, value: Any, start: int, stop: int) -> Any:
    """Rows ``start:stop`` of field ``name``'s input value, in a form ``encode`` accepts,
    without copying."""
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
    if isinstance(value, torch.Tensor | np.ndarray) and value.ndim == 0:
        raise TypeError(f"field {name!r}: a 0-d {type(value).__name__} has no rows")
    if isinstance(value, torch.Tensor | np.ndarray | list | tuple):
        return value[start:stop]
    if isinstance(value, PackedTensor):
        return value.slice(range(start, stop))
    if hasattr(value, "tensors") and hasattr(value, "dim_to_pack"):
        raise with_field(
            BatchError(
                f"field {name!r}: a {type(value).__name__} with .tensors (NeMo-RL's "
                "PackedTensor) is not py_wire's: put it with py_wire.interop.nemo_rl.put, or "
                "convert the batch with py_wire.interop.nemo_rl.from_nemo first"
            ),
            name,
        )
    raise TypeError(
        f"field {name!r}: cannot take rows of a {type(value).__name__} (give lists, tensors, "
        "numpy arrays, jagged nested tensors or PackedTensors)"
    )


Raw = list[tuple[str, str, Any, Any]]


def _group_plans(
    batch: Mapping[str, Any],
    sch: Schema,
    group_size: int | Sequence[int],
    stage: str | None = None,
) -> tuple[dict[str, list[Raw]], tuple[str, ...]]:
    """Per column, each group's checked fields (as :func:`py_wire.encode` checks a batch, for
    ``stage``), and the columns the schema has. The sequence field travels in every column."""
    batch = batch_mapping("batch", batch)
    seq = sch.sequence_field
    spans = _group_spans(_num_rows(batch, sch), group_size)
    plans: dict[str, list[Raw]] = {c: [] for c in COLUMNS}
    for start, stop in spans:
        group = {k: _rows(k, v, start, stop) for k, v in batch.items()}
        raw = _fields(group, sch, stage)
        for column in COLUMNS:
            plans[column].append([r for r in raw if _column_of(sch, r[0]) == column or r[0] == seq])
    return plans, COLUMNS if media_fields(sch) else (TEXT,)


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


def _packed_column(codec: _native.Codec, raws: Sequence[Raw]) -> torch.Tensor:
    """One column as a jagged ``uint8`` nested tensor, one frame per group, each at a 64-byte
    aligned offset of one buffer (its length padded to a multiple of 64)."""
    sizes = [_native.encoded_nbytes(codec, raw) for raw in raws]

    def fill(i: int, view: Any) -> None:
        _native.encode(codec, raws[i], None, None, view)

    return _column(sizes, fill)


def _frames_column(frames: Sequence[Frame]) -> torch.Tensor:
    """Frames already encoded, as the jagged ``uint8`` column TQ's storage units hold (the
    layout :func:`put` writes): each frame's bytes at a 64-byte aligned offset of one buffer."""

    def fill(i: int, view: Any) -> None:
        view[:] = memoryview(frames[i])

    return _column([f.nbytes for f in frames], fill)


def _encode_columns(
    codecs: Mapping[str, _native.Codec], plans: Mapping[str, Sequence[Raw]], as_objects: bool
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with plain_tensors():
        for column, codec in codecs.items():
            raws = plans[column]
            if not raws:
                continue
            if as_objects:
                out[column] = [_native.encode(codec, raw, None, None, None) for raw in raws]
            else:
                out[column] = _packed_column(codec, raws)
    return out


def _stored_codecs(sch: Schema, stage: str | None, columns: Sequence[str]) -> dict[str, Any]:
    return {c: _codec(sch, c, stage, sch.column_fields(c[len("py_wire.") :])) for c in columns}


def encode_groups(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    group_size: int | Sequence[int] = 1,
    *,
    stage: str | None = None,
) -> dict[str, torch.Tensor]:
    """The batch as TQ columns: per column a jagged ``uint8`` nested tensor, one frame per group
    (each at a 64-byte aligned offset of one buffer, its length padded to a multiple of 64).
    Every group is checked as :func:`py_wire.encode` checks a batch (for ``stage``), before any
    byte is written. No column when the batch has no rows; no media column for a schema that
    declares no media fields."""
    sch = load_schema(schema)
    plans, columns = _group_plans(batch, sch, group_size, stage)
    return _encode_columns(_stored_codecs(sch, stage, columns), plans, as_objects=False)


def encode_group_frames(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    group_size: int | Sequence[int] = 1,
    *,
    stage: str | None = None,
) -> dict[str, list[Frame]]:
    """The batch as TQ columns of :class:`~py_wire.Frame` objects, one per group (the RayStore
    path): the same frames :func:`encode_groups` packs into one buffer, each in its own."""
    sch = load_schema(schema)
    plans, columns = _group_plans(batch, sch, group_size, stage)
    return _encode_columns(_stored_codecs(sch, stage, columns), plans, as_objects=True)


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


def _group_tags(
    plans: Mapping[str, Sequence[Raw]], sch: Schema, tags: Sequence[Mapping[str, Any]] | None
) -> list[dict[str, Any]] | None:
    """Each group's TQ tags: the caller's, plus ``total_lengths`` (the group's tokens, what
    TQ's ``SeqlenBalancedSampler`` balances by) unless the caller set it."""
    seq = sch.sequence_field
    if seq is None:
        return None if tags is None else [dict(t) for t in tags]
    out = []
    for i, raw in enumerate(plans[TEXT]):
        tag = {} if tags is None else dict(tags[i])
        if TOTAL_LENGTHS not in tag:
            tag[TOTAL_LENGTHS] = _token_count(next(r for r in raw if r[0] == seq))
        out.append(tag)
    return out


def _token_count(raw: tuple[str, str, Any, Any]) -> int:
    """The tokens of one group's checked sequence field (``_encode._classify``'s forms)."""
    _, kind, first, _second = raw
    if kind == "jagged":
        return int(first.shape[0])
    return sum(int(r.shape[0]) for r in first)


def put(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    keys: Sequence[str],
    partition_id: str,
    *,
    group_size: int | Sequence[int] = 1,
    tags: Sequence[Mapping[str, Any]] | None = None,
    stage: str | None = None,
) -> Any:
    """Store ``batch`` in TQ, one row per group under ``keys`` (one key per group, in order),
    in ``partition_id``, with optional per-group ``tags`` (TQ's; py_wire adds
    ``total_lengths``, the group's tokens, unless given). ``stage`` checks the batch as
    ``encode(stage=)`` does: a rollout batch needs only what ``stage`` needs, and later stages'
    fields come by :func:`write_back`. Returns TQ's ``KVBatchMeta``, or None for a batch of no
    rows (nothing is stored). Raises :class:`~py_wire.BatchError` for anything
    :func:`py_wire.encode` refuses, before TQ sees a byte."""
    sch = load_schema(schema)
    _partition(partition_id)
    as_objects = stores_frames_as_objects()
    plans, names = _group_plans(batch, sch, group_size, stage)
    columns = _encode_columns(_stored_codecs(sch, stage, names), plans, as_objects)
    n = len(plans[TEXT])
    keys = _names("keys", keys)
    _refuse_repeats(keys, "keys")
    if len(keys) != n:
        raise with_field(
            BatchError(
                f"{len(keys)} keys for the batch's {n} groups of group_size={group_size!r:.60} "
                "(one key per group)"
            ),
            "keys",
        )
    if tags is not None:
        tags = items("tags", tags)
        for i, tag in enumerate(tags):
            if not isinstance(tag, Mapping):
                raise TypeError(f"tags[{i}] must be a mapping, not {type(tag).__name__}")
        if len(tags) != n:
            raise with_field(BatchError(f"{len(tags)} tags for {n} groups"), "tags")
    if n == 0:
        return None
    return _tq_put(keys, partition_id, columns, as_objects, _group_tags(plans, sch, tags))


def _tq_put(
    keys: list[str],
    partition_id: str,
    columns: Mapping[str, Any],
    as_objects: bool,
    tags: list[dict[str, Any]] | None,
) -> Any:
    from tensordict import NonTensorStack, TensorDict

    if as_objects:
        columns = {c: NonTensorStack(*frames) for c, frames in columns.items()}
    fields = TensorDict(dict(columns), batch_size=[len(keys)])
    return _tq().kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, tags=tags)


# -- reading ----------------------------------------------------------------------------------


def _stored_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
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


def _is_ours(column: str) -> bool:
    return column in COLUMNS or column.startswith(WRITE_BACK)


def _is_write_back(column: str) -> bool:
    return column.startswith(WRITE_BACK)


def _written_fields(column: str) -> list[str]:
    return column[len(WRITE_BACK) :].split(",") if column.startswith(WRITE_BACK) else []


def _key_list(keys: Sequence[str] | str) -> list[str]:
    keys = [keys] if isinstance(keys, str) else _names("keys", keys)
    if not keys:
        raise with_field(BatchError("keys is empty: nothing to get"), "keys")
    _refuse_repeats(keys, "keys")
    return keys


def _names(what: str, value: object) -> list[str]:
    """A sequence of strings (TQ keys, column or field names), checked before TQ sees it."""
    if isinstance(value, str | bytes):
        raise TypeError(f"{what} must be a sequence of str, not one {type(value).__name__}")
    out = items(what, value)
    for i, name in enumerate(out):
        if not isinstance(name, str):
            raise TypeError(f"{what}[{i}] must be a str, not {type(name).__name__} {name!r:.60}")
    return out


def _partition(partition_id: object) -> str:
    if not isinstance(partition_id, str):
        raise TypeError(
            f"partition_id must be a str, not {type(partition_id).__name__} {partition_id!r:.60}"
        )
    return partition_id


def _refuse_repeats(items: Sequence[Any], what: str) -> None:
    """A key (or sample) named twice is a BatchError naming it and both places."""
    if len(set(items)) == len(items):
        return
    seen: dict[Any, int] = {}
    for i, item in enumerate(items):
        if item in seen:
            raise with_context(
                BatchError(f"{item!r} is named twice ({what} {seen[item]} and {i})"),
                field=what,
                row=i,
            )
        seen[item] = i


def _meta(keys: list[str], partition_id: str) -> Any:
    """TQ's metadata of ``keys`` (no data moved): the columns every key holds."""
    _partition(partition_id)
    meta = _tq().get_client().kv_retrieve_meta(keys=keys, partition_id=partition_id, create=False)
    if meta.size != len(keys):
        held = set(_tq().kv_list(partition_id).get(partition_id, {}))
        missing = [k for k in keys if k not in held] or keys
        raise with_field(
            BatchError(f"keys {missing[:4]} are not in TQ partition {partition_id!r}"), "keys"
        )
    return meta


def _fetch(meta: Any, columns: Sequence[str], keys: Sequence[str]) -> dict[str, list[Frame]]:
    if not columns:
        return {}
    got = _tq().get_client().get_data(meta.select_fields(list(columns)))
    return {c: _column_frames(got[c], c, keys) for c in columns}


def get_frames(
    keys: Sequence[str] | str,
    partition_id: str,
    columns: Sequence[str] = COLUMNS,
) -> dict[str, list[Frame]]:
    """Per column of ``columns`` (stored columns or write-back columns), the frames of ``keys``
    in that order: views of the one buffer TQ's get returns (no further copy). A column the
    keys do not hold is a :class:`~py_wire.FrameError`."""
    keys = _key_list(keys)
    columns = _names("columns", columns)
    if not columns or not all(_is_ours(c) for c in columns):
        raise with_field(
            BatchError(
                f"columns {columns!r} must be some of {list(COLUMNS)} or write-back columns "
                f"({WRITE_BACK}...)"
            ),
            "columns",
        )
    meta = _meta(keys, partition_id)
    absent = [c for c in columns if c not in meta.field_names]
    if absent:
        raise FrameError(f"TQ holds no column {absent[0]!r} for every one of keys {keys[:4]}")
    return _fetch(meta, columns, keys)


def _check_groups(frames: Mapping[str, Sequence[Frame]], keys: Sequence[str]) -> None:
    """Every column of one key holds the same group: one schema and one row count per key
    (here), one sequence, offsets and tokens (:func:`_check_sequences`). A text frame merged
    with another group's media would pair rows with the wrong images."""
    text = frames[TEXT]
    for column, group in frames.items():
        if isinstance(group, str | bytes) or not isinstance(group, Sequence):
            raise TypeError(f"frames[{column!r}] must be a list of frames, one per key")
        if len(group) != len(keys):
            raise with_field(
                BatchError(f"frames[{column!r}] holds {len(group)} frames for {len(keys)} keys"),
                "keys",
            )
    sch = checked_schema(text[0])
    for column, group in frames.items():
        for key, t, f in zip(keys, text, group, strict=True):
            problem = None
            if checked_schema(f).fingerprint != sch.fingerprint:
                problem = f"schema {checked_schema(f).name!r} ({checked_schema(f).fingerprint})"
            elif checked_schema(t).fingerprint != sch.fingerprint:
                problem = f"schema {checked_schema(t).name!r}, another key's {sch.name!r}"
            elif f.num_rows != t.num_rows:
                problem = f"{f.num_rows} rows where its text column holds {t.num_rows}"
            if problem is not None:
                _not_one_group(key, column, problem)


def _not_one_group(key: str, column: str, problem: str) -> None:
    raise with_context(
        FrameError(
            f"key {key!r}: TQ column {column!r} holds {problem}: its columns are not one "
            "group's (refusing to merge them)"
        ),
        field=column,
    )


def _check_sequences(
    frames: Mapping[str, Sequence[Frame]],
    joined: Mapping[str, Frame],
    keys: Sequence[str],
    seq: str | None,
) -> None:
    """Each column's sequence field (offsets and tokens) is its text column's: compared once
    over the joined frames, then key by key to name the one that differs."""
    if seq is None:
        return
    text = _sequence(joined[TEXT], seq)
    for column, frame in joined.items():
        if column == TEXT or _same(text, _sequence(frame, seq)):
            continue
        for key, t, f in zip(keys, frames[TEXT], frames[column], strict=True):
            if not _same(_sequence(t, seq), _sequence(f, seq)):
                _not_one_group(key, column, f"a sequence field {seq!r} unlike its text column's")
        _not_one_group(str(list(keys)[:4]), column, f"a sequence field {seq!r} unlike the text's")


def _sequence(frame: Frame, seq: str) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The frame's sequence offsets and the sequence field's values, as views (no decode)."""
    views = FrameViews(frame)
    f = views.fields.get(seq)
    if f is None or views.seq_offsets is None:
        return None
    return views.seq_offsets, views.values(f.values)


def _same(
    a: tuple[torch.Tensor, torch.Tensor] | None, b: tuple[torch.Tensor, torch.Tensor] | None
) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def decode_columns(
    frames: Mapping[str, Sequence[Frame]],
    keys: Sequence[str],
    *,
    stage: str | None = None,
    fields: Sequence[str] | None = None,
    writable: Writable = "auto",
    **decode_options: Any,
) -> dict[str, Any]:
    """Per column, the frames of ``keys`` (as :func:`get_frames` returns them) decoded into one
    batch: exactly what :func:`py_wire.decode` returns of the whole batch for ``stage``
    (narrowed to ``fields``). The columns must be one group's per key
    (:class:`~py_wire.FrameError` otherwise); a field of the stage that no column holds is
    rows without segments for an optional packed field (a :class:`~py_wire.ContractError`
    when rows hold its placeholder tokens) and a :class:`~py_wire.FrameError` when the stage
    requires it."""
    if not isinstance(frames, Mapping):
        raise TypeError(
            f"frames must map each column to its frames (get_frames), not {type(frames).__name__}"
        )
    keys = _key_list(keys)
    fields = None if fields is None else _names("fields", fields)
    if TEXT not in frames:
        raise FrameError(f"frames holds no {TEXT!r} column for keys {keys[:4]}")
    _check_groups(frames, keys)
    sch = checked_schema(frames[TEXT][0])
    wanted = _wanted(sch, stage, fields)
    seq = sch.sequence_field
    merged: dict[str, Any] = {}
    source: dict[str, str] = {}
    joined = {c: g[0] if len(g) == 1 else concat(list(g)) for c, g in frames.items()}
    _check_sequences(frames, joined, keys, seq)
    for column, frame in joined.items():
        held = {f.name for f in frame.layout.fields}
        if column != TEXT:
            held.discard(seq)  # every column carries it; the text column's is returned
        keep = held if wanted is None else held & wanted
        for name, value in decode_selected(
            frame, keep, writable=writable, **decode_options
        ).items():
            if name in keep and name in merged:
                # A write-back with replace=True holds a field the text column holds too:
                # the write-back's is the field now. Any other pair is two answers.
                if source[name] == TEXT and _is_write_back(column):
                    merged[name], source[name] = value, column
                    continue
                if column == TEXT and _is_write_back(source[name]):
                    continue
                raise with_context(
                    FrameError(f"field {name!r} is held by two TQ columns of keys {keys[:4]}"),
                    field=name,
                )
            merged.setdefault(name, value)
            source.setdefault(name, column)
    if wanted is not None:
        _check_required(sch, stage, wanted, merged, keys)
        rows = decode_options.get("rows")
        tokens = None
        if seq is not None:
            t = decode_selected(joined[TEXT], {seq}, writable="view", rows=rows).get(seq)
            tokens = None if t is None else (t.values(), t.offsets())
        num_rows = len(range(joined[TEXT].num_rows)[rows]) if rows is not None else None
        add_missing_fields(
            merged,
            sch,
            wanted,
            joined[TEXT].num_rows if num_rows is None else num_rows,
            decode_options.get("layout"),
            tokens,
        )
    order = {n: i for i, n in enumerate(sch.fields)}
    return dict(sorted(merged.items(), key=lambda kv: order.get(kv[0], len(order))))


def _check_required(
    sch: Schema, stage: str | None, wanted: set[str], merged: Mapping[str, Any], keys: Any
) -> None:
    needed = sch.required_for(stage) if stage is not None else list(sch.fields)
    for name in needed:
        if name in wanted and name not in merged:
            raise with_context(
                FrameError(
                    f"field {name!r}{f' (stage {stage!r} needs it)' if stage else ''} is neither "
                    f"stored nor written back for keys {list(keys)[:4]}"
                ),
                field=name,
            )


def _needed_columns(
    held: Sequence[str], sch: Schema | None, stage: str | None, fields: Sequence[str] | None
) -> list[str]:
    """The held py_wire columns a fetch reads (``sch``: None before the text column is read,
    when only the text and write-back columns can be chosen)."""
    ours = [c for c in held if _is_ours(c)]
    if stage is None and fields is None:
        return ours
    if sch is None:
        if stage is not None:
            return [TEXT]
        wanted: set[str] | None = set(fields or ())
    else:
        wanted = _wanted(sch, stage, fields)
        if wanted is None:
            return ours
    assert wanted is not None
    out = [TEXT]
    if MEDIA in ours and sch is not None and wanted & set(media_fields(sch)):
        out.append(MEDIA)
    out += [c for c in ours if set(_written_fields(c)) & wanted]
    return out


def get(
    keys: Sequence[str] | str,
    partition_id: str,
    *,
    stage: str | None = None,
    fields: Sequence[str] | None = None,
    columns: Sequence[str] | None = None,
    writable: Writable = "auto",
    **decode_options: Any,
) -> dict[str, Any]:
    """The rows of ``keys`` (groups, in that order) decoded as :func:`py_wire.decode` decodes
    the whole batch (``decode_options`` are its keywords): the stored columns and every
    write-back merged into one dict, each key's columns checked to be one group's. ``stage``
    returns that stage's fields, ``fields`` the named ones; the media column is fetched only
    when a wanted field is declared ``column = "media"``. ``columns`` reads exactly those TQ
    columns (``(TEXT,)``: the text column alone). Several keys are joined with
    :func:`py_wire.concat` (one copy); a single key decodes as views of TQ's buffer."""
    keys = _key_list(keys)
    fields = None if fields is None else _names("fields", fields)
    meta = _meta(keys, partition_id)
    held = list(meta.field_names)
    if TEXT not in held:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    if columns is not None:
        frames = get_frames(keys, partition_id, columns)
        asked = {f.name for c in frames for f in frames[c][0].layout.fields}
        if TEXT not in frames:  # read for the checks and the tokens
            frames = {**_fetch(meta, [TEXT], keys), **frames}
        out = decode_columns(
            frames, keys, stage=stage, fields=fields, writable=writable, **decode_options
        )
        return {
            k: v
            for k, v in out.items()
            if k in asked or k not in checked_schema(frames[TEXT][0]).fields
        }
    frames = _read(meta, keys, stage, fields)
    return decode_columns(
        frames, keys, stage=stage, fields=fields, writable=writable, **decode_options
    )


def _read(
    meta: Any, keys: list[str], stage: str | None, fields: Sequence[str] | None
) -> dict[str, list[Frame]]:
    """The columns of ``keys`` a fetch for ``stage`` / ``fields`` reads: the text and write-back
    columns first, then the media column when the (now known) schema says a wanted field is
    media."""
    held = list(meta.field_names)
    frames = _fetch(meta, _needed_columns(held, None, stage, fields), keys)
    sch = checked_schema(frames[TEXT][0])
    if MEDIA not in held and media_fields(sch) and stage is None and fields is None:
        raise FrameError(
            f"TQ holds no {MEDIA!r} column for keys {keys[:4]}, though their schema has media"
        )
    rest = [c for c in _needed_columns(held, sch, stage, fields) if c not in frames]
    frames.update(_fetch(meta, rest, keys))
    return frames


def get_samples(
    samples: Sequence[tuple[str, int]],
    partition_id: str,
    *,
    stage: str | None = None,
    fields: Sequence[str] | None = None,
    **decode_options: Any,
) -> dict[str, Any]:
    """Per-sample addressing over groups stored once: ``samples`` are ``(group key, row)``
    pairs, in the order wanted (NeMo-RL's per-sample metas, pre-sharding and DP dispatch
    address samples; the media stay stored once per group). Each distinct group is fetched
    once and the rows are taken from it (:func:`py_wire.take_rows`: a copy of those rows).
    Returns what :func:`get` returns for those rows. A sample named twice or a row outside
    its group is a :class:`~py_wire.BatchError` naming the sample (``row``: its index in
    ``samples``)."""
    if isinstance(samples, str | bytes) or not isinstance(samples, Sequence) or not samples:
        raise TypeError("samples must be a non-empty sequence of (key, row) pairs")
    for i, sample in enumerate(samples):
        if (
            not isinstance(sample, tuple)
            or len(sample) != 2
            or not isinstance(sample[0], str)
            or isinstance(sample[1], bool)
            or not isinstance(sample[1], int)
        ):
            raise TypeError(f"samples[{i}] must be a (key, row) pair, not {sample!r}")
    _refuse_repeats(samples, "samples")
    fields = None if fields is None else _names("fields", fields)
    keys = list(dict.fromkeys(k for k, _ in samples))
    meta = _meta(keys, partition_id)
    if TEXT not in meta.field_names:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    frames = _read(meta, keys, stage, fields)
    start, first = 0, {}
    for key, frame in zip(keys, frames[TEXT], strict=True):
        first[key] = (start, frame.num_rows)
        start += frame.num_rows
    picks = []
    for i, (key, row) in enumerate(samples):
        base, rows = first[key]
        if not 0 <= row < rows:
            raise with_context(
                BatchError(f"sample ({key!r}, {row}): group {key!r} holds {rows} rows"),
                field="samples",
                row=i,
            )
        picks.append(base + row)
    taken = {
        c: [take_rows(g[0] if len(g) == 1 else concat(list(g)), picks)] for c, g in frames.items()
    }
    return decode_columns(taken, ["samples"], stage=stage, fields=fields, **decode_options)


def get_by_meta(
    meta: Any,
    *,
    stage: str | None = None,
    fields: Sequence[str] | None = None,
    writable: Writable = "auto",
    **decode_options: Any,
) -> dict[str, Any]:
    """What :func:`get` returns, for the samples of a TQ ``BatchMeta`` or ``KVBatchMeta`` (what
    ``get_meta`` and TQ's samplers hand out), or NeMo-RL's ``KVBatchMeta`` (``sample_ids``,
    ``partition_id``), instead of keys. A sample named twice is a :class:`~py_wire.BatchError`
    naming it."""
    keys, partition_id = meta_keys(meta)
    return get(keys, partition_id, stage=stage, fields=fields, writable=writable, **decode_options)


def meta_keys(meta: Any) -> tuple[list[str], str]:
    """The keys and partition a meta addresses: TQ's ``KVBatchMeta`` (``keys``) or
    ``BatchMeta`` (global indexes of one partition, resolved by TQ), or NeMo-RL's
    ``KVBatchMeta`` (``sample_ids``)."""
    keys = getattr(meta, "keys", None)
    if keys is None:
        keys = getattr(meta, "sample_ids", None)
    partition_id = getattr(meta, "partition_id", None)
    if keys is None and not hasattr(meta, "partition_ids"):
        raise TypeError(
            f"meta must be TQ's KVBatchMeta (keys, partition_id) or BatchMeta, or NeMo-RL's "
            f"KVBatchMeta (sample_ids, partition_id), not {type(meta).__name__}"
        )
    if keys is None:  # a BatchMeta: global indexes of one partition
        parts = set(meta.partition_ids)
        if len(parts) != 1:
            raise with_field(
                BatchError(f"the BatchMeta spans partitions {sorted(parts)}; give one"), "meta"
            )
        (partition_id,) = parts
        keys = (
            _tq()
            .get_client()
            .kv_retrieve_keys(global_indexes=list(meta.global_indexes), partition_id=partition_id)
        )
    if not isinstance(partition_id, str):
        raise TypeError(f"meta has no partition_id: {type(meta).__name__}")
    return _names("meta.keys", keys), partition_id


# -- write-backs ------------------------------------------------------------------------------


def write_back(
    keys: Sequence[str] | str,
    partition_id: str,
    fields: Mapping[str, Any],
    *,
    replace: bool = False,
) -> Any:
    """Add ``fields`` (name → value over the rows of ``keys``' groups, in that order: what a
    logprob, reference or driver step computes) to the groups stored under ``keys``, as one
    more TQ column (``py_wire.fields:<names>``); :func:`get` merges it with the stored ones.

    Checked against what is stored before TQ sees a byte: each field is one of the stored
    schema's, of its text column, neither stored nor written back before; it has as many rows
    as the groups hold; a per-token field's row ``i`` has exactly as many tokens as stored row
    ``i`` (a padded ``[B, W, ...]`` tensor is cut to the stored lengths, ``W`` at least the
    longest); dtypes and shapes as :func:`py_wire.encode` checks them. Any mismatch is a
    :class:`~py_wire.BatchError` naming the field (and row). Returns TQ's ``KVBatchMeta``.

    ``replace=True`` also takes fields the groups hold already (NeMo-RL's driver rewrites
    ``sample_mask`` after filtering): stored at put, or written back before in a write-back of
    exactly these fields (which TQ then overwrites). :func:`get` returns the replacement; the
    sequence field and media are never replaced."""
    flag("replace", replace)
    keys = _key_list(keys)
    if not isinstance(fields, Mapping) or not fields:
        raise TypeError("fields must be a non-empty mapping of field name to value")
    meta = _meta(keys, partition_id)
    held = list(meta.field_names)
    if TEXT not in held:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    text = _fetch(meta, [TEXT], keys)[TEXT]
    sch = checked_schema(text[0])
    for key, frame in zip(keys, text, strict=True):
        if checked_schema(frame).fingerprint != sch.fingerprint:
            raise with_field(
                BatchError(
                    f"key {key!r} holds schema {checked_schema(frame).name!r}, key "
                    f"{keys[0]!r} {sch.name!r}: a write-back covers groups of one schema"
                ),
                "keys",
            )
    names = _check_written(sch, fields, held, text, replace)
    seq = sch.sequence_field
    joined = text[0] if len(text) == 1 else concat(text)
    stored_seq = decode_selected(joined, {seq}, writable="view")[seq] if seq else None
    batch: dict[str, Any] = {} if stored_seq is None else {seq: stored_seq}  # type: ignore[dict-item]
    total = joined.num_rows
    lengths = None if stored_seq is None else torch.diff(stored_seq.offsets())
    for name in names:
        batch[name] = _aligned(sch, name, fields[name], total, lengths)
    column = WRITE_BACK + ",".join(names)
    codec = _codec(sch, column, None, ())
    plans = {column: []}  # type: dict[str, list[Raw]]
    start = 0
    for frame in text:
        stop = start + frame.num_rows
        group = {k: _rows(k, v, start, stop) for k, v in batch.items()}
        plans[column].append(_fields(group, sch, None, required=False))
        start = stop
    as_objects = stores_frames_as_objects()
    columns = _encode_columns({column: codec}, plans, as_objects)
    return _tq_put(keys, partition_id, columns, as_objects, None)


def _check_written(
    sch: Schema,
    fields: Mapping[str, Any],
    held: Sequence[str],
    text: Sequence[Frame],
    replace: bool,
) -> list[str]:
    """The written fields in schema order, each one the stored groups may take."""
    stored = {f.name for frame in text[:1] for f in frame.layout.fields}
    written = {n for c in held for n in _written_fields(c)}
    column = WRITE_BACK + ",".join(n for n in sch.fields if n in fields)
    for name in fields:
        problem = None
        if name not in sch.fields:
            problem = f"is not a field of schema {sch.name!r}; fields: {list(sch.fields)}"
        elif name == sch.sequence_field:
            problem = "is the sequence field, stored at put"
        elif sch.fields[name].column != "text":
            problem = 'is declared column = "media": media are stored at put'
        elif name in stored and not replace:
            problem = "is stored already for these keys (put holds it; replace=True replaces it)"
        elif name in written and not replace:
            problem = "was written back already for these keys (replace=True replaces it)"
        elif name in written and column not in held:
            together = [c for c in held if name in _written_fields(c)]
            problem = (
                f"was written back in {together} with other fields: replace them together "
                f"(one write_back of {_written_fields(together[0])})"
            )
        if problem is not None:
            raise with_field(BatchError(f"write_back: field {name!r} {problem}"), str(name))
    return [n for n in sch.fields if n in fields]


def _aligned(sch: Schema, name: str, value: Any, total: int, lengths: torch.Tensor | None) -> Any:
    """``value`` checked against the stored rows: ``total`` rows and, for a per-token field,
    each row's stored token count (``lengths``); a padded tensor cut to those lengths."""
    field = sch.fields[name]
    if value is None:
        raise with_field(BatchError(f"write_back: field {name!r} is None"), name)
    rows = _value_rows(value)
    if rows != total:
        raise with_field(
            BatchError(
                f"write_back: field {name!r} has {rows} rows, the stored groups of the keys "
                f"hold {total}"
            ),
            name,
        )
    if field.tier != "per_token" or lengths is None:
        return value
    padded = isinstance(value, torch.Tensor | np.ndarray) and not (
        isinstance(value, torch.Tensor) and value.is_nested
    )
    if padded:
        value = torch.as_tensor(value)
        width = int(lengths.max()) if total else 0
        if value.dim() != 2 + len(field.shape) or value.shape[1] < width:
            raise with_field(
                BatchError(
                    f"write_back: field {name!r} is a padded {list(value.shape)} tensor; it "
                    f"needs [{total}, >= {width}, ...] (the longest stored row)"
                ),
                name,
            )
        mask = torch.arange(value.shape[1]) < lengths[:, None]
        return torch.nested.nested_tensor_from_jagged(
            value[mask], torch.nn.functional.pad(torch.cumsum(lengths, 0), (1, 0))
        )
    got = (
        torch.diff(as_jagged(value).offsets())
        if isinstance(value, torch.Tensor)
        else torch.tensor([len(r) for r in value], dtype=torch.int64)
    )
    bad = torch.nonzero(got != lengths)
    if bad.numel():
        row = int(bad[0, 0])
        raise with_context(
            BatchError(
                f"write_back: field {name!r} row {row} has {int(got[row])} tokens, the stored "
                f"row {int(lengths[row])}"
            ),
            field=name,
            row=row,
        )
    return value
