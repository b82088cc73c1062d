"""Storing a batch: rows cut into groups, each group checked as :func:`py_wire.encode` checks a
batch and encoded into its columns, then one ``kv_batch_put``."""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import BatchError, Frame, FrameError, PackedTensor, Schema, concat, load_schema, split
from py_wire.adapters import (
    Codec,
    RowWindows,
    as_jagged,
    batch_mapping,
    checked_fields,
    column_fields,
    count,
    encode_with_codec,
    items,
    names,
    plain_tensors,
    with_context,
)
from py_wire.interop.transfer_queue.columns import (
    COLUMNS,
    GROUP,
    MEDIA,
    MEDIA_HOLDER,
    MEDIA_ROW,
    SCHEMA,
    SCHEMA_HOLDER,
    STORED,
    TEXT,
    TOTAL_LENGTHS,
    WRITE_BACKS,
    Raw,
    column_codec,
    column_of,
    frames_column,
    media_fields,
    packed_column,
    stores_frames_as_objects,
)
from py_wire.interop.transfer_queue.meta import (
    partition,
    refuse_repeats,
    tq_module,
    with_field,
)


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


def value_rows(value: Any) -> int:
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
    return value_rows(value)


def group_rows(name: str, value: Any, start: int, stop: int) -> Any:
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
    if isinstance(value, RowWindows):
        return RowWindows(
            value.tensor[start:stop], value.starts[start:stop], value.lengths[start:stop], value.dim
        )
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
        group = {k: group_rows(k, v, start, stop) for k, v in batch.items()}
        raw = checked_fields(group, sch, stage)
        for column in COLUMNS:
            plans[column].append([r for r in raw if column_of(sch, r[0]) == column or r[0] == seq])
    return plans, COLUMNS if media_fields(sch) else (TEXT,)


def encode_columns(
    codecs: Mapping[str, Sequence[Codec]],
    plans: Mapping[str, Sequence[Raw]],
    as_objects: bool,
) -> dict[str, Any]:
    """Per column, each group's frame: ``codecs[column][i]`` encodes ``plans[column][i]``."""
    out: dict[str, Any] = {}
    with plain_tensors():
        for column, column_codecs in codecs.items():
            raws = plans[column]
            if not raws:
                continue
            if as_objects:
                out[column] = [
                    encode_with_codec(codec, raw, None, None, None)
                    for codec, raw in zip(column_codecs, raws, strict=True)
                ]
            else:
                out[column] = packed_column(column_codecs, raws)
    return out


def _stored_codecs(
    sch: Schema,
    stage: str | None,
    columns: Sequence[str],
    groups: Sequence[str],
    compact: Sequence[str] = (),
) -> dict[str, list[Codec]]:
    """Per column, one codec per group: its frames carry the group's identity (and name the
    schema by fingerprint in the ``compact`` columns)."""
    return {
        c: [
            column_codec(sch, c, stage, column_fields(sch, c[len("py_wire.") :]), g, c in compact)
            for g in groups
        ]
        for c in columns
    }


def new_groups(n: int) -> list[str]:
    """``n`` fresh group identities (random: a group put again is another group)."""
    return [uuid.uuid4().hex for _ in range(n)]


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
    groups = new_groups(len(plans[TEXT]))
    return encode_columns(_stored_codecs(sch, stage, columns, groups), plans, as_objects=False)


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
    groups = new_groups(len(plans[TEXT]))
    return encode_columns(_stored_codecs(sch, stage, columns, groups), plans, as_objects=True)


def _row_tokens(raw: tuple[str, str, Any, Any]) -> list[int]:
    """Each row's tokens in one group's checked sequence field (``_encode._classify``'s
    forms)."""
    _, kind, first, second = raw
    if kind == "jagged":
        return [int(n) for n in torch.diff(second).tolist()]
    if kind == "padded":
        return [int(n) for n in second]
    return [int(r.shape[0]) for r in first]


def _tags(
    plans: Mapping[str, Sequence[Raw]],
    sch: Schema,
    tags: Sequence[Mapping[str, Any]] | None,
    per_sample: bool,
    key_groups: Sequence[str],
    schema_holders: Sequence[str],
) -> list[dict[str, Any]]:
    """Each key's TQ tags: the caller's, plus ``total_lengths`` (its tokens, what TQ's
    ``SeqlenBalancedSampler`` balances by) unless the caller set it, and py_wire's own: the
    key's group identity (``key_groups``), its schema's fingerprint and the key whose text
    frame embeds it (``schema_holders``), its text column's rows and fields (``STORED``), no
    media key (a per-sample put names it after) and no write-backs. py_wire's tags are set
    whatever the caller's say (tags copied from another group's sample) or TQ keeps from an
    earlier put of the key (it merges tags). A key is a group, or with ``per_sample`` a row of
    one."""
    seq = sch.sequence_field
    tokens: list[int | None] = [None] * len(key_groups)
    stored: list[str | None] = [None] * len(key_groups)
    if seq is not None:
        tokens, stored = [], []
        for raw in plans[TEXT]:
            rows = _row_tokens(next(r for r in raw if r[0] == seq))
            held = ",".join(r[0] for r in raw)
            if per_sample:
                tokens += rows
                stored += [f"{n};{held}" for n in rows]
            else:
                tokens.append(sum(rows))
                stored.append(f"{','.join(map(str, rows))};{held}")
    out = []
    for i, (n, group, holder) in enumerate(zip(tokens, key_groups, schema_holders, strict=True)):
        tag = {} if tags is None else dict(tags[i])
        if n is not None:
            tag.setdefault(TOTAL_LENGTHS, n)
        tag.update({GROUP: group, MEDIA_HOLDER: None, MEDIA_ROW: None, WRITE_BACKS: []})
        tag.update({SCHEMA: sch.fingerprint, SCHEMA_HOLDER: holder, STORED: stored[i]})
        out.append(tag)
    return out


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
    """Store ``batch`` in TQ under ``keys``, in ``partition_id``: one key per group (a TQ row
    per group) or one key per sample (a TQ row per sample, each group's media stored once: see
    below), in order, with optional per-key ``tags`` (TQ's; py_wire adds ``total_lengths``, the
    key's tokens, unless given). ``stage`` checks the batch as ``encode(stage=)`` does: a
    rollout batch needs only what ``stage`` needs, and later stages' fields come by
    :func:`write_back`. Returns TQ's ``KVBatchMeta`` of ``keys``, or None for a batch of no
    rows (nothing is stored). Raises :class:`~py_wire.BatchError` for anything
    :func:`py_wire.encode` refuses, before TQ sees a byte.

    **Per-sample keys** (as NeMo-RL keys its rows): each key's text column holds its sample's
    row alone (cut from its group's frame, not encoded again); the group's media frame is
    stored once, in the media column of the group's first key, and every key of the group is
    tagged with that key (``MEDIA_HOLDER``) and its row there (``MEDIA_ROW``). :func:`get` of
    any samples reads their groups' media frames once and takes their rows: it returns what it
    returns for per-group keys. Clear a group's keys together (its first key holds the others'
    media)."""
    sch = load_schema(schema)
    partition(partition_id)
    as_objects = stores_frames_as_objects()
    plans, held = _group_plans(batch, sch, group_size, stage)
    n = len(plans[TEXT])
    keys = names("keys", keys)
    refuse_repeats(keys, "keys")
    rows = _num_rows(batch_mapping("batch", batch), sch)
    per_sample = len(keys) != n and len(keys) == rows
    if len(keys) not in (n, rows):
        raise with_field(
            BatchError(
                f"{len(keys)} keys for the batch's {n} groups of group_size={group_size!r:.60} "
                f"and {rows} rows (one key per group, or one per sample)"
            ),
            "keys",
        )
    if tags is not None:
        tags = items("tags", tags)
        for i, tag in enumerate(tags):
            if not isinstance(tag, Mapping):
                raise TypeError(f"tags[{i}] must be a mapping, not {type(tag).__name__}")
        if len(tags) != len(keys):
            what = "samples" if per_sample else "groups"
            raise with_field(BatchError(f"{len(tags)} tags for {len(keys)} {what}"), "tags")
    if n == 0:
        return None
    groups = new_groups(n)
    # Per-sample text frames name the schema by fingerprint; each group's first key embeds it.
    codecs = _stored_codecs(sch, stage, held, groups, (TEXT,) if per_sample else ())
    key_groups, holders = groups, keys
    if per_sample:
        spans = _group_spans(rows, group_size)
        key_groups = [g for g, (lo, hi) in zip(groups, spans, strict=True) for _ in range(hi - lo)]
        holders = [keys[lo] for lo, hi in spans for _ in range(hi - lo)]
    key_tags = _tags(plans, sch, tags, per_sample, key_groups, holders)
    if not per_sample:
        columns = encode_columns(codecs, plans, as_objects)
        meta = refuse_overwriting_media(keys, partition_id) if MEDIA in columns else None
        return tq_put(keys, partition_id, columns, as_objects, key_tags, meta)
    return _put_per_sample(keys, partition_id, codecs, plans, as_objects, key_tags)


def refuse_overwriting_media(keys: Sequence[str], partition_id: str) -> Any:
    """Refuses a put over a key whose media column other live samples read (a per-sample
    group's first key, while samples of that group not put again now remain): it would give
    them another group's images. A :class:`~py_wire.FrameError` (as a fetch of such samples
    is) naming the key and those samples; clear a group's keys together first. Returns TQ's
    ``BatchMeta`` of ``keys`` (created where new), which the put then goes through."""
    client = tq_module().get_client()
    # create=True: what kv_batch_put does next (called once the batch is encoded, so a refused
    # batch registers no key), and a key not stored yet is then no warning in TQ's log
    meta = client.kv_retrieve_meta(keys=list(keys), partition_id=partition_id, create=True)
    holders = {
        key: tags.get(GROUP)
        for key, tags in zip(keys, meta.custom_meta, strict=True)
        if tags.get(MEDIA_HOLDER) == key
    }
    if not holders:
        return meta
    putting = set(keys)
    held = tq_module().kv_list(partition_id).get(partition_id, {})
    for holder, group in holders.items():
        readers = [
            k
            for k, tags in held.items()
            if k not in putting and tags.get(MEDIA_HOLDER) == holder and tags.get(GROUP) == group
        ]
        if readers:
            raise with_context(
                FrameError(
                    f"key {holder!r} holds the media of its group's samples {readers[:4]}, "
                    "which are still stored: a put over it would give them another group's "
                    "images (clear a group's keys together, or put them again together)"
                ),
                field="keys",
            )
    return meta


def _put_per_sample(
    keys: list[str],
    partition_id: str,
    codecs: Mapping[str, Sequence[Codec]],
    plans: Mapping[str, Sequence[Raw]],
    as_objects: bool,
    key_tags: list[dict[str, Any]],
) -> Any:
    """Each group's media frame under its first key, then each sample's text row under its own
    key, tagged with its media's key and row. Media go first: a sampler that picks keys by
    their text column never hands out a sample whose media are not stored yet. The text rows
    are compact, but for each group's first one, which embeds the schema (``SCHEMA_HOLDER``)."""
    frames = encode_columns(codecs, plans, as_objects=True)
    texts: list[Frame] = []
    holders: list[str] = []
    for group in frames[TEXT]:
        holder = keys[len(texts)]
        if MEDIA in frames:
            for row in range(group.num_rows):
                key_tags[len(texts) + row].update({MEDIA_HOLDER: holder, MEDIA_ROW: row})
        rows = split(group, [1] * group.num_rows)
        rows[0] = concat([rows[0]], compact=False)
        texts += rows
        holders.append(holder)
    meta = None
    if MEDIA in frames:
        meta = refuse_overwriting_media(keys, partition_id)
        media = {MEDIA: _as_column(frames[MEDIA], as_objects)}
        tq_put(holders, partition_id, media, as_objects, None)
    text = {TEXT: _as_column(texts, as_objects)}
    # Through the lookup the media check made (created every key): no second one.
    return tq_put(keys, partition_id, text, as_objects, key_tags, meta)


def _as_column(frames: list[Frame], as_objects: bool) -> Any:
    return frames if as_objects else frames_column(frames)


def tq_put(
    keys: list[str],
    partition_id: str,
    columns: Mapping[str, Any],
    as_objects: bool,
    tags: list[dict[str, Any]] | None,
    meta: Any = None,
) -> Any:
    """``kv_batch_put`` of ``columns`` under ``keys``; given ``meta`` (TQ's ``BatchMeta`` of
    exactly ``keys``, just retrieved), the put goes through it, without the metadata call
    ``kv_batch_put`` makes first to find the keys. Returns TQ's ``KVBatchMeta``."""
    from tensordict import NonTensorStack, TensorDict

    if as_objects:
        columns = {c: NonTensorStack(*frames) for c, frames in columns.items()}
    fields = TensorDict(dict(columns), batch_size=[len(keys)])
    tq = tq_module()
    if meta is None:
        return tq.kv_batch_put(keys=keys, partition_id=partition_id, fields=fields, tags=tags)
    meta.update_custom_meta(tags)
    meta = tq.get_client().put(fields, meta)
    out = tq.KVBatchMeta(
        keys=list(keys),
        tags=[{}] * len(keys),
        partition_id=partition_id,
        fields=meta.field_names,
        extra_info=meta.extra_info,
    )
    # Each key's tags copied one level (TQ's KVBatchMeta deep-copies every key's tags, O(keys)
    # of Python a put): the BatchMeta they come from is this call's own and dropped here.
    out.tags = [dict(t) for t in meta.custom_meta]
    return out
