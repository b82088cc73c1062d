"""Write-backs: the fields later stages add, checked against the stored groups, stored as one
more TQ column."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import numpy as np
import torch

from py_wire import BatchError, Frame, FrameError, Schema, concat, split
from py_wire.adapters import (
    RowWindows,
    as_jagged,
    checked_fields,
    checked_schema,
    decode_selected,
    flag,
    tier_items,
    with_context,
)
from py_wire.interop.transfer_queue.columns import (
    GROUP,
    SCHEMA,
    STORED,
    TEXT,
    WRITE_BACK,
    WRITE_BACKS,
    Raw,
    column_codec,
    frame_group,
    frames_column,
    stores_frames_as_objects,
    written_fields,
)
from py_wire.interop.transfer_queue.get import fetch_columns, partial_write_backs, resolve_schemas
from py_wire.interop.transfer_queue.meta import key_list, retrieve_meta, with_field
from py_wire.interop.transfer_queue.put import encode_columns, group_rows, tq_put, value_rows


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
    :class:`~py_wire.BatchError` naming the field (and row). What is stored is read from the
    record :func:`put` tagged each key with (``STORED``: its rows' tokens and text fields,
    with ``SCHEMA`` and ``GROUP``), so a write-back is one metadata lookup and one put; keys
    whose tags lack that record (or garble it) have their text column fetched instead. A
    :func:`get` compares every write-back frame's group and rows with its key's text frame
    (a write-back made against tags that no longer describe the frames is refused there).
    Returns TQ's ``KVBatchMeta``.

    ``replace=True`` also takes fields the groups hold already (NeMo-RL's driver rewrites
    ``sample_mask`` after filtering): stored at put, or written back before in a write-back of
    exactly these fields (which TQ then overwrites). :func:`get` returns the replacement; the
    sequence field and media are never replaced."""
    flag("replace", replace)
    keys = key_list(keys)
    if not isinstance(fields, Mapping) or not fields:
        raise TypeError("fields must be a non-empty mapping of field name to value")
    meta = retrieve_meta(keys, partition_id)
    # Columns every key holds, and those some hold (a write-back to some of them before).
    held = [*meta.field_names, *partial_write_backs(meta, keys, partition_id)]
    if TEXT not in held:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    stored = _recorded(meta, keys) or _read_stored(meta, keys)
    sch = stored.schema
    names = _check_written(sch, fields, held, stored.fields, replace)
    # The written fields alone: the sequence field's tokens stay in the text column (a get
    # compares the rows' offsets with it; the group identity binds the frames to its rows).
    batch: dict[str, Any] = {}
    total = sum(stored.rows)
    for name in names:
        batch[name] = _aligned(sch, name, fields[name], total, stored.tokens)
    column = WRITE_BACK + ",".join(names)
    frames = _encoded(sch, column, batch, stored.groups, stored.rows)
    as_objects = stores_frames_as_objects()
    value = frames if as_objects else frames_column(frames)
    # Each key's tags list its write-back columns: how a fetch of it with keys that lack this
    # column learns the column's name (TQ lists the columns all fetched keys hold).
    custom = list(getattr(meta, "custom_meta", None) or [{} for _ in keys])
    tags = [{WRITE_BACKS: sorted({*(c.get(WRITE_BACKS) or ()), column})} for c in custom]
    return tq_put(keys, partition_id, {column: value}, as_objects, tags, meta)


class _Stored(NamedTuple):
    """What the keys' text columns hold, as a write-back is checked against it."""

    schema: Schema
    #: each key's group identity
    groups: list[str | None]
    #: each key's rows
    rows: list[int]
    #: every row's tokens, in order (None: the schema has no sequence field)
    tokens: torch.Tensor | None
    #: the fields the (first key's) text frame holds
    fields: set[str]


#: The most tokens a row may have by its ``STORED`` tag (a garbled tag reads the frames).
_MAX_TOKENS = 1 << 48


def _recorded(meta: Any, keys: Sequence[str]) -> _Stored | None:
    """What :func:`put` recorded in the keys' tags (``STORED``, ``SCHEMA``, ``GROUP``): no
    fetch. None when a key's tags lack or garble any of them, name several schemas, or one
    this process cannot hold: the text frames are read then (:func:`_read_stored`)."""
    custom = list(getattr(meta, "custom_meta", None) or ())
    if len(custom) != len(keys):
        return None
    groups: list[str | None] = []
    rows: list[int] = []
    tokens: list[int] = []
    fingerprints = set()
    fields = None
    for tags in custom:
        if not isinstance(tags, Mapping):
            return None
        record, group = tags.get(STORED), tags.get(GROUP)
        fingerprints.add(tags.get(SCHEMA))
        if not isinstance(record, str) or not isinstance(group, str):
            return None
        counts, sep, held = record.partition(";")
        try:
            mine = [int(n) for n in counts.split(",")]
        except ValueError:
            return None
        if not sep or not all(0 <= n < _MAX_TOKENS for n in mine):
            return None
        fields = held if fields is None else fields
        groups.append(group)
        rows.append(len(mine))
        tokens += mine
    (fingerprint, *others) = fingerprints
    if others or not isinstance(fingerprint, str) or fields is None:
        return None
    resolve_schemas(meta, keys)  # a process that never loaded it learns it from its holder
    sch = Schema.held(fingerprint)
    if sch is None or sch.sequence_field is None:
        return None
    named = set(fields.split(","))
    if not named <= set(sch.fields):
        return None
    return _Stored(sch, groups, rows, torch.tensor(tokens, dtype=torch.int64), named)


def _read_stored(meta: Any, keys: Sequence[str]) -> _Stored:
    """What the keys' text frames hold, read from TQ (keys whose tags do not record it)."""
    text = fetch_columns(meta, [TEXT], keys)[TEXT]
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
    seq = sch.sequence_field
    joined = text[0] if len(text) == 1 else concat(list(text))
    stored_seq = decode_selected(joined, {seq}, writable="view")[seq] if seq else None
    tokens = None if stored_seq is None else torch.diff(stored_seq.offsets())
    fields = {f.name for frame in text[:1] for f in frame.layout.fields}
    groups = [frame_group(t) for t in text]
    return _Stored(sch, groups, [t.num_rows for t in text], tokens, fields)


def _encoded(
    sch: Schema,
    column: str,
    batch: Mapping[str, Any],
    groups: Sequence[str | None],
    sizes: Sequence[int],
) -> list[Frame]:
    """The write-back's frame per key: checked and encoded once per run of keys of one group
    (every key of a per-sample group, or one per-group key), with that group's identity, then
    cut into one frame per key (of ``sizes`` rows) without decoding. Compact: each frame names
    the schema by fingerprint (its keys' text frames, or their group's first key's, embed
    it)."""
    out: list[Frame] = []
    # Checked once over all keys' rows (errors name the row among them), then cut per group.
    raw = checked_fields(batch, sch, None, required=False)
    start = 0
    i = 0
    while i < len(groups):
        group = groups[i]
        j = i
        while j < len(groups) and groups[j] == group:
            j += 1
        run = list(sizes[i:j])
        stop = start + sum(run)
        plan = _raw_rows(raw, start, stop)
        if plan is None:
            rows = {n: group_rows(n, v, start, stop) for n, v in batch.items()}
            plan = checked_fields(rows, sch, None, required=False)
        codec = column_codec(sch, column, None, (), group, compact=True)
        (whole,) = encode_columns({column: [codec]}, {column: [plan]}, as_objects=True)[column]
        out += [whole] if len(run) == 1 else split(whole, run)
        start, i = stop, j
    return out


def _raw_rows(raw: Raw, start: int, stop: int) -> Raw | None:
    """Rows ``start:stop`` of checked fields, as :func:`checked_fields` gives them for those
    rows (views of the same tensors): a jagged per-token field's values and offsets, a dense
    scalar's rows, a list of rows, a padded tensor's row windows. None for any other form (the
    caller checks the rows' values again)."""
    out: Raw = []
    for name, kind, first, second in raw:
        if kind == "jagged" and isinstance(second, torch.Tensor):
            lo, hi = int(second[start]), int(second[stop])
            out.append((name, kind, first[lo:hi], second[start : stop + 1] - lo))
        elif kind in ("dense", "rows") and second is None:
            out.append((name, kind, first[start:stop], None))
        elif kind == "windows":
            starts, lengths, dim = second
            out.append(
                (name, kind, first[start:stop], (starts[start:stop], lengths[start:stop], dim))
            )
        else:
            return None
    return out


def _check_written(
    sch: Schema,
    fields: Mapping[str, Any],
    held: Sequence[str],
    stored: set[str],
    replace: bool,
) -> list[str]:
    """The written fields in schema order, each one the stored groups may take (``stored``:
    the fields their text column holds)."""
    written = {n for c in held for n in written_fields(c)}
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
            together = [c for c in held if name in written_fields(c)]
            problem = (
                f"was written back in {together} with other fields: replace them together "
                f"(one write_back of {written_fields(together[0])})"
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
    rows = value_rows(value)
    if rows != total:
        raise with_field(
            BatchError(
                f"write_back: field {name!r} has {rows} rows, the stored groups of the keys "
                f"hold {total}"
            ),
            name,
        )
    if tier_items(field.tier) != "tokens" or lengths is None:
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
        if value.device.type == "cpu":
            # Each row's first lengths[r] cells as a view the codec copies once: no cut here.
            return RowWindows(value, [0] * total, lengths.tolist())
        mask = torch.arange(value.shape[1], device=value.device) < lengths.to(value.device)[:, None]
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
