"""Reading groups back: the columns a fetch needs, checked to be one group's per key, merged
with their write-backs and decoded as :func:`py_wire.decode` decodes the whole batch."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import torch

from py_wire import BatchError, Frame, FrameError, Schema, concat, take_rows
from py_wire.adapters import (
    FrameViews,
    Writable,
    add_missing_fields,
    checked_fields,
    checked_schema,
    decode_selected,
    encode_with_codec,
    frame_fingerprint,
    hold_schema,
    holds_schema,
    names,
    plain_tensors,
    prefixed,
    tier_items,
    with_context,
)
from py_wire.interop.transfer_queue.columns import (
    COLUMN_KEY,
    COLUMNS,
    GROUP,
    MEDIA,
    MEDIA_HOLDER,
    MEDIA_ROW,
    SCHEMA,
    SCHEMA_HOLDER,
    TEXT,
    WRITE_BACK,
    WRITE_BACKS,
    column_codec,
    frame_group,
    is_ours,
    is_write_back,
    media_fields,
    stored_frames,
    wanted_fields,
    written_fields,
)
from py_wire.interop.transfer_queue.meta import (
    key_list,
    meta_keys,
    refuse_repeats,
    retrieve_meta,
    selected,
    tq_module,
    with_field,
)


def column_frames(value: Any, column: str, keys: Sequence[str]) -> list[Frame]:
    try:
        stored = stored_frames(value, column, keys)
    except FrameError as err:  # a compact frame of a schema not held: which keys, which column
        raise prefixed(err, f"keys {list(keys)[:4]}, TQ column {column!r}") from None
    frames = []
    for key, frame in zip(keys, stored, strict=True):
        tagged = frame.metadata.get(COLUMN_KEY)
        if tagged is None and is_write_back(column):
            # A write-back frame names no column: its fields do (older ones carry the key too).
            tagged = WRITE_BACK + ",".join(f.name for f in frame.layout.fields)
        if tagged != column:
            raise with_context(
                FrameError(
                    f"key {key!r}: the frame in TQ column {column!r} was encoded for column "
                    f"{tagged!r}"
                ),
                field=column,
                found=str(tagged),
            )
        frame.schema = checked_schema(frame)
        frames.append(frame)
    return frames


def fetch_columns(meta: Any, columns: Sequence[str], keys: Sequence[str]) -> dict[str, list[Frame]]:
    if not columns:
        return {}
    fingerprints = resolve_schemas(meta, keys)
    try:
        got = tq_module().get_client().get_data(selected(meta, columns))
    except Exception as err:
        # RayStore unpickles each Frame inside TQ's get: a compact frame whose schema this
        # process does not hold fails there (its keys' tags named another schema, or none).
        cause = _frame_error(err)
        if cause is None:
            raise
        where = f"keys {list(keys)[:4]}, TQ columns {list(columns)} (schemas by their tags: "
        raise prefixed(cause, f"{where}{sorted(fingerprints)})") from err
    return {c: column_frames(got[c], c, keys) for c in columns}


def _frame_error(err: BaseException) -> FrameError | None:
    """The FrameError ``err`` is or wraps (Ray wraps an error raised while unpickling)."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [err]
    while stack:
        e = stack.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, FrameError):
            return e
        stack += [e.__cause__, e.__context__, getattr(e, "cause", None)]
        stack.append(getattr(e, "client_exc", None))  # Ray's RaySystemError
    return None


#: Schemas learnt from the partition (``_learn_schema``), kept referenced so that the codec's
#: registry holds them while this process reads their compact frames; the least recently
#: learnt let go beyond this many.
_LEARNT: OrderedDict[str, Schema] = OrderedDict()
_MAX_LEARNT = 16


def resolve_schemas(meta: Any, keys: Sequence[str]) -> set[str]:
    """Make sure this process holds the schema of every key's frames before TQ hands them over:
    compact frames (write-backs, per-sample text rows) name it by fingerprint only. Each key's
    tags name the fingerprint (``SCHEMA``) and the key whose text frame embeds it
    (``SCHEMA_HOLDER``); a schema not held is read once from there and held. Returns the
    fingerprints the keys' tags name. A schema that cannot be read so is a
    :class:`~py_wire.FrameError` naming the key and the fingerprint."""
    custom = list(getattr(meta, "custom_meta", None) or ())
    wanted: dict[str, tuple[str, Any]] = {}
    for key, tags in zip(keys, custom, strict=False):
        fingerprint = tags.get(SCHEMA) if isinstance(tags, Mapping) else None
        if isinstance(fingerprint, str) and fingerprint not in wanted:
            wanted[fingerprint] = (key, tags.get(SCHEMA_HOLDER))
    for fingerprint, (key, holder) in wanted.items():
        if fingerprint in _LEARNT:
            _LEARNT.move_to_end(fingerprint)
        elif not holds_schema(fingerprint):
            partition_ids = getattr(meta, "partition_ids", None) or [None]
            _learn_schema(fingerprint, key, holder, partition_ids[0])
    return set(wanted)


def tagged_schema(meta: Any) -> Schema | None:
    """The schema every key of ``meta`` is tagged with (``SCHEMA``), when this process holds it
    (:func:`resolve_schemas` makes sure it does); None when the tags name none, or several."""
    custom = getattr(meta, "custom_meta", None) or ()
    named = {tags.get(SCHEMA) if isinstance(tags, Mapping) else None for tags in custom}
    if len(named) != 1:
        return None
    (fingerprint,) = named
    return Schema.held(fingerprint) if isinstance(fingerprint, str) else None


def _learn_schema(fingerprint: str, key: str, holder: Any, partition_id: Any) -> None:
    """Hold the schema ``fingerprint`` read from the embedded text frame of key ``holder``."""
    problem = None
    if not isinstance(holder, str) or not isinstance(partition_id, str):
        problem = f"its tags name no key that holds it ({SCHEMA_HOLDER}={holder!r:.60})"
    else:
        meta = (
            tq_module()
            .get_client()
            .kv_retrieve_meta(keys=[holder], partition_id=partition_id, create=False)
        )
        if meta.size != 1 or TEXT not in meta.field_names:
            problem = (
                f"key {holder!r}, which holds it, is no longer in partition {partition_id!r} "
                "(clear a group's keys together)"
            )
        else:
            got = tq_module().get_client().get_data(selected(meta, [TEXT]))
            (frame,) = stored_frames(got[TEXT], TEXT, [holder])
            if frame.compact or frame_fingerprint(frame) != fingerprint:
                problem = (
                    f"key {holder!r}'s text frame does not embed it (it holds "
                    f"{'a compact frame of ' if frame.compact else ''}schema "
                    f"{frame_fingerprint(frame)})"
                )
            else:
                _LEARNT[fingerprint] = hold_schema(checked_schema(frame))
                while len(_LEARNT) > _MAX_LEARNT:
                    _LEARNT.popitem(last=False)
    if problem is not None:
        raise with_context(
            FrameError(
                f"key {key!r}: its frames name their schema by fingerprint {fingerprint} only, "
                f"this process holds no schema with that fingerprint, and {problem}: load the "
                "schema with py_wire.load_schema to read them"
            ),
            kind="unknown_schema",
            field=SCHEMA,
            found=fingerprint,
        )


def get_frames(
    keys: Sequence[str] | str,
    partition_id: str,
    columns: Sequence[str] = COLUMNS,
) -> dict[str, list[Frame]]:
    """Per column of ``columns`` (stored columns or write-back columns), the frames of ``keys``
    in that order: views of the one buffer TQ's get returns (no further copy). A column the
    keys do not hold is a :class:`~py_wire.FrameError`."""
    keys = key_list(keys)
    columns = names("columns", columns)
    if not columns or not all(is_ours(c) for c in columns):
        raise with_field(
            BatchError(
                f"columns {columns!r} must be some of {list(COLUMNS)} or write-back columns "
                f"({WRITE_BACK}...)"
            ),
            "columns",
        )
    meta = retrieve_meta(keys, partition_id)
    absent = [c for c in columns if c not in meta.field_names]
    if absent:
        raise FrameError(f"TQ holds no column {absent[0]!r} for every one of keys {keys[:4]}")
    return fetch_columns(meta, columns, keys)


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
    text_groups = [frame_group(t) for t in text]
    for column, group in frames.items():
        for key, t, f, g in zip(keys, text, group, text_groups, strict=True):
            problem = None
            if checked_schema(f).fingerprint != sch.fingerprint:
                problem = f"schema {checked_schema(f).name!r} ({checked_schema(f).fingerprint})"
            elif checked_schema(t).fingerprint != sch.fingerprint:
                problem = f"schema {checked_schema(t).name!r}, another key's {sch.name!r}"
            elif f.num_rows != t.num_rows:
                problem = f"{f.num_rows} rows where its text column holds {t.num_rows}"
            elif f is not t and frame_group(f) != g:
                problem = f"group {frame_group(f)} where its text column holds group {g}"
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
        if column == TEXT or _same(text, _sequence(frame, seq, like=text)):
            continue
        for key, t, f in zip(keys, frames[TEXT], frames[column], strict=True):
            want = _sequence(t, seq)
            if not _same(want, _sequence(f, seq, like=want)):
                _not_one_group(key, column, f"a sequence field {seq!r} unlike its text column's")
        _not_one_group(str(list(keys)[:4]), column, f"a sequence field {seq!r} unlike the text's")


def _sequence(
    frame: Frame, seq: str, like: tuple[torch.Tensor, torch.Tensor] | None = None
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The frame's sequence offsets and the sequence field's values, as views (no decode). A
    write-back frame holds its rows' offsets but not the sequence field's tokens (they are the
    text column's; its group identity binds it to them): given ``like`` (the text column's),
    its offsets are compared with those and its tokens taken to be the text's."""
    views = FrameViews(frame)
    f = views.fields.get(seq)
    if f is None and like is not None:
        # Without per-token fields (a write-back of scalars) its rows were counted already.
        if views.seq_offsets is None or torch.equal(views.seq_offsets, like[0]):
            return like
        return None
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
    keys = key_list(keys)
    fields = None if fields is None else names("fields", fields)
    if TEXT not in frames:
        raise FrameError(f"frames holds no {TEXT!r} column for keys {keys[:4]}")
    _check_groups(frames, keys)
    sch = checked_schema(frames[TEXT][0])
    wanted = wanted_fields(sch, stage, fields)
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
                if source[name] == TEXT and is_write_back(column):
                    merged[name], source[name] = value, column
                    continue
                if column == TEXT and is_write_back(source[name]):
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
    ours = [c for c in held if is_ours(c)]
    if stage is None and fields is None:
        return ours
    if sch is None:
        if stage is not None:
            return [TEXT]
        wanted: set[str] | None = set(fields or ())
    else:
        wanted = wanted_fields(sch, stage, fields)
        if wanted is None:
            return ours
    assert wanted is not None
    out = [TEXT]
    if MEDIA in ours and sch is not None and wanted & set(media_fields(sch)):
        out.append(MEDIA)
    out += [c for c in ours if set(written_fields(c)) & wanted]
    return out


def _first_columns(
    meta: Any, keys: list[str], held: list[str], stage: str | None, fields: Sequence[str] | None
) -> list[str]:
    """The columns :func:`_read` fetches first: every one it needs when the keys' tags name a
    schema this process holds (or learns from the partition), else the text column, which names
    it. The tags are a hint: a schema they name that refuses ``stage`` or ``fields`` is the
    stored frames' to refuse, once read."""
    resolve_schemas(meta, keys)
    tagged = tagged_schema(meta)
    if tagged is not None:
        try:
            return _needed_columns(held, tagged, stage, fields)
        except BatchError:
            pass
    return _needed_columns(held, None, stage, fields)


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
    keys = key_list(keys)
    fields = None if fields is None else names("fields", fields)
    meta = retrieve_meta(keys, partition_id)
    held = list(meta.field_names)
    if TEXT not in held:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    if columns is not None:
        frames = get_frames(keys, partition_id, columns)
        asked = {f.name for c in frames for f in frames[c][0].layout.fields}
        if TEXT not in frames:  # read for the checks and the tokens
            frames = {**fetch_columns(meta, [TEXT], keys), **frames}
        out = decode_columns(
            frames, keys, stage=stage, fields=fields, writable=writable, **decode_options
        )
        return {
            k: v
            for k, v in out.items()
            if k in asked or k not in checked_schema(frames[TEXT][0]).fields
        }
    frames, media = _read(meta, keys, stage, fields, partition_id)
    if media is None:
        return decode_columns(
            frames, keys, stage=stage, fields=fields, writable=writable, **decode_options
        )
    _check_groups(frames, keys)
    joined = {**{c: [_joined(g)] for c, g in frames.items()}, MEDIA: [media]}
    return decode_columns(
        joined, [_label(keys)], stage=stage, fields=fields, writable=writable, **decode_options
    )


def _read(
    meta: Any, keys: list[str], stage: str | None, fields: Sequence[str] | None, partition_id: str
) -> tuple[dict[str, list[Frame]], Frame | None]:
    """The columns of ``keys`` a fetch for ``stage`` / ``fields`` reads: the text and write-back
    columns first, then the media column when the (now known) schema says a wanted field is
    media. Per-sample keys (tagged with their group's media key) read their groups' media
    frames once: those come back as one frame of the keys' rows, in order (else None).
    Write-backs that only some keys hold are merged per key (:func:`_merged_write_backs`)."""
    held = list(meta.field_names)
    partial = partial_write_backs(meta, keys, partition_id)
    # One fetch of every column wanted when the keys' tags name a schema this process holds
    # (the columns follow from it); else the text column first, which names it.
    frames = fetch_columns(meta, _first_columns(meta, keys, held, stage, fields), keys)
    sch = checked_schema(frames[TEXT][0])
    _check_tags(meta, keys, frames[TEXT])
    sources = _media_sources(meta, keys)
    wants_media = MEDIA in _needed_columns([*held, MEDIA], sch, stage, fields)
    needed = _needed_columns([*held, *partial], sch, stage, fields)
    media = None
    if sources is not None and media_fields(sch) and wants_media:
        needed = [c for c in needed if c != MEDIA]
    elif MEDIA not in held and media_fields(sch) and stage is None and fields is None:
        raise FrameError(
            f"TQ holds no {MEDIA!r} column for keys {keys[:4]}, though their schema has media"
        )
    # A column the tags' schema chose that the stored one does not need (stale tags): dropped.
    frames = {c: f for c, f in frames.items() if c in needed or c == TEXT}
    rest = [c for c in needed if c not in frames and c not in partial]
    frames.update(fetch_columns(meta, rest, keys))
    some = {c: _fetch_partial(c, partial[c], keys, partition_id) for c in needed if c in partial}
    frames = _merged_write_backs(frames, some, keys, sch, wanted_fields(sch, stage, fields))
    if sources is not None and media_fields(sch) and wants_media:
        media = _shared_media(keys, sources, frames[TEXT], partition_id)
    return frames, media


def partial_write_backs(meta: Any, keys: Sequence[str], partition_id: str) -> dict[str, list[int]]:
    """The write-back columns that some of ``keys`` hold but not all (TQ's metadata of many keys
    lists only the columns every one holds): each with the indexes of the keys holding it.
    Their names come from the keys' tags (``WRITE_BACKS``); which keys hold them, from TQ's
    production status."""
    held = set(meta.field_names)
    hinted = {
        c
        for tags in getattr(meta, "custom_meta", None) or ()
        for c in (tags.get(WRITE_BACKS) or ())
        if isinstance(c, str) and is_write_back(c) and c not in held
    }
    out: dict[str, list[int]] = {}
    if not hinted:
        return out
    client = tq_module().get_client()
    where = torch.as_tensor(list(meta.global_indexes), dtype=torch.long)
    for column in sorted(hinted):
        index, status = client.get_production_status(
            data_fields=[column], partition_id=partition_id
        )
        if index is None or status is None or len(index) == 0:
            continue
        index = torch.as_tensor(index, dtype=torch.long)
        status = torch.as_tensor(status).reshape(len(index), -1)
        pos = torch.searchsorted(index, where).clamp(max=len(index) - 1)
        holds = (index[pos] == where) & (status[pos, 0] == 1)
        rows = torch.nonzero(holds).flatten().tolist()
        if rows:
            out[column] = rows
    return out


def _fetch_partial(
    column: str, rows: Sequence[int], keys: Sequence[str], partition_id: str
) -> dict[int, Frame]:
    """The frames of ``column`` of the keys at ``rows`` (the ones holding it), by index."""
    some = [keys[i] for i in rows]
    meta = retrieve_meta(some, partition_id)
    if column not in meta.field_names:
        raise FrameError(
            f"keys {some[:4]} no longer hold TQ column {column!r} (cleared meanwhile?)"
        )
    return dict(zip(rows, fetch_columns(meta, [column], some)[column], strict=True))


def _merged_write_backs(
    frames: dict[str, list[Frame]],
    partial: Mapping[str, Mapping[int, Frame]],
    keys: Sequence[str],
    sch: Schema,
    wanted: set[str] | None,
) -> dict[str, list[Frame]]:
    """``frames`` with each key's write-backs as that key alone would read them. A write-back
    frame of an earlier put of the key (another group identity) is not the key's. When every
    key holds every (live) write-back column, the columns stay as they are; else the fields of
    the columns that differ are merged into one column whose frame per key holds each field's
    latest value for that key (its write-back, else what its text column stores). A wanted
    field that some keys hold and others do not is a :class:`~py_wire.FrameError` naming them
    (rows without segments for an optional packed field)."""
    text = frames[TEXT]
    groups = [frame_group(t) for t in text]
    written: dict[str, Mapping[int, Frame]] = {
        c: dict(enumerate(g)) for c, g in frames.items() if is_write_back(c)
    }
    written.update(partial)
    live = {
        c: {i: f for i, f in per.items() if frame_group(f) == groups[i]}
        for c, per in written.items()
    }
    uneven = {c for c, per in live.items() if per and len(per) != len(keys)}
    changed = True
    while changed:  # a full column sharing a field with an uneven one is merged with it
        spread = {n for c in uneven for n in written_fields(c)}
        more = {c for c in live if c not in uneven and live[c] and set(written_fields(c)) & spread}
        changed = bool(more)
        uneven |= more
    out = {c: g for c, g in frames.items() if not is_write_back(c)}
    out.update({c: frames[c] for c in live if c in frames and c not in uneven and live[c]})
    if not uneven:
        return out
    seq = sch.sequence_field
    names = [
        n
        for n in sch.fields
        if n != seq
        and any(n in written_fields(c) for c in uneven)
        and (wanted is None or n in wanted)
    ]
    if not names:
        return out
    merged = []
    for i, (key, t) in enumerate(zip(keys, text, strict=True)):
        stored = {f.name for f in t.layout.fields}
        values: dict[str, Any] = {}
        if seq is not None:
            values[seq] = decode_selected(t, {seq}, writable="view")[seq]
        for name in names:
            source = next(
                (live[c][i] for c in uneven if i in live[c] and name in written_fields(c)),
                t if name in stored else None,
            )
            if source is not None:
                values[name] = decode_selected(source, {name}, writable="view")[name]
            elif tier_items(sch.fields[name].tier) == "segments":
                values[name] = [None] * t.num_rows
            else:
                holders = [keys[j] for c in uneven for j in live[c] if name in written_fields(c)]
                raise with_context(
                    FrameError(
                        f"field {name!r} is written back for keys {holders[:4]} but key {key!r} "
                        "neither stores nor had it written back: fetch them apart, or write it "
                        "back to every key"
                    ),
                    field=name,
                )
        column = WRITE_BACK + ",".join(names)
        codec = column_codec(sch, column, None, (), groups[i])
        with plain_tensors():
            raw = checked_fields(values, sch, None, required=False)
            frame = encode_with_codec(codec, raw, None, None, None)
        frame.schema = sch
        merged.append(frame)
    out[WRITE_BACK + ",".join(names)] = merged
    return out


def _check_tags(meta: Any, keys: Sequence[str], text: Sequence[Frame]) -> None:
    """Each key's group identity tag (put's) is its text frame's: tags copied from another
    group's sample would read that group's media."""
    custom = list(getattr(meta, "custom_meta", None) or ())
    if len(custom) != len(keys):
        return
    for key, tags, t in zip(keys, custom, text, strict=True):
        tagged, stored = tags.get(GROUP), frame_group(t)
        if tagged is not None and stored is not None and tagged != stored:
            raise with_context(
                FrameError(
                    f"key {key!r}: its tags name group {tagged}, its text column holds a row of "
                    f"group {stored} (tags copied from another group's key?): refusing to read "
                    "another group's media or write-backs"
                ),
                field=GROUP,
            )


def _media_sources(meta: Any, keys: Sequence[str]) -> list[tuple[str, int | None]] | None:
    """Where each key's media are: per-sample keys name their group's media key and their row
    there (:func:`put`'s tags); a key stored per group holds its own (``(key, None)``: all its
    rows). None when no key is a per-sample one."""
    custom = list(getattr(meta, "custom_meta", None) or ())
    if len(custom) != len(keys) or not any(c.get(MEDIA_HOLDER) is not None for c in custom):
        return None
    out: list[tuple[str, int | None]] = []
    for key, tags in zip(keys, custom, strict=True):
        if tags.get(MEDIA_HOLDER) is None:
            out.append((key, None))
            continue
        holder, row = tags[MEDIA_HOLDER], tags.get(MEDIA_ROW)
        if not isinstance(holder, str) or isinstance(row, bool) or not isinstance(row, int):
            raise with_context(
                FrameError(
                    f"key {key!r}: tags {MEDIA_HOLDER}={holder!r:.60}, {MEDIA_ROW}={row!r:.60} "
                    "do not name a media key and row"
                ),
                field=MEDIA_HOLDER,
            )
        out.append((holder, row))
    return out


def _shared_media(
    keys: Sequence[str],
    sources: Sequence[tuple[str, int | None]],
    text: Sequence[Frame],
    partition_id: str,
) -> Frame:
    """The media of ``keys``' rows as one frame, in order: each media key's frame read once,
    the rows taken from them (a group's images stay one segment), each key's rows checked to
    be the ones its text column holds (schema, sequence field)."""
    holders = list(dict.fromkeys(h for h, _ in sources))
    try:
        meta = retrieve_meta(holders, partition_id)
    except BatchError as err:
        meta = None
        missing = str(err)
    else:
        missing = "" if MEDIA in meta.field_names else f"they hold no {MEDIA!r} column"
    if meta is None or missing:
        raise with_context(
            FrameError(
                f"keys {list(keys)[:4]}: their groups' media keys {holders[:4]} (each group's "
                f"first key, which holds its images: clear a group's keys together): {missing}"
            ),
            field=MEDIA,
        )
    media = fetch_columns(meta, [MEDIA], holders)[MEDIA]
    first: dict[str, tuple[int, Frame]] = {}
    start = 0
    for holder, frame in zip(holders, media, strict=True):
        first[holder] = (start, frame)
        start += frame.num_rows
    fingerprint = checked_schema(text[0]).fingerprint
    picks: list[int] = []
    for key, (holder, row), t in zip(keys, sources, text, strict=True):
        base, frame = first[holder]
        if checked_schema(frame).fingerprint != fingerprint:
            _not_one_group(key, MEDIA, f"schema {checked_schema(frame).name!r} at {holder!r}")
        if frame_group(frame) != frame_group(t):
            _not_one_group(
                key,
                MEDIA,
                f"group {frame_group(frame)}'s media at {holder!r}, its text column group "
                f"{frame_group(t)}'s row (the media key was put again or reused)",
            )
        rows = range(frame.num_rows) if row is None else range(row, row + t.num_rows)
        if rows.start < 0 or rows.stop > frame.num_rows or len(rows) != t.num_rows:
            _not_one_group(
                key, MEDIA, f"rows {rows.start}:{rows.stop} of {holder!r}'s {frame.num_rows}"
            )
        picks.extend(base + r for r in rows)
    joined = _joined(media)
    taken = joined if picks == list(range(joined.num_rows)) else take_rows(joined, picks)
    _check_media_rows(keys, text, taken, checked_schema(text[0]).sequence_field)
    return taken


def _check_media_rows(
    keys: Sequence[str], text: Sequence[Frame], media: Frame, seq: str | None
) -> None:
    """Each key's media rows carry its text rows' sequence field: compared once over all rows,
    then row by row to name the key that differs."""
    if seq is None:
        return
    joined = _joined(text)
    want, got = _sequence(joined, seq), _sequence(media, seq)
    if _same(want, got):
        return
    if want is None or got is None:
        _not_one_group(_label(keys), MEDIA, f"a sequence field {seq!r} unlike the text's")
    assert want is not None and got is not None
    row = 0
    for key, t in zip(keys, text, strict=True):
        for r in range(row, row + t.num_rows):
            lo, hi = int(want[0][r]), int(want[0][r + 1])
            glo, ghi = int(got[0][r]), int(got[0][r + 1])
            if not torch.equal(want[1][lo:hi], got[1][glo:ghi]):
                _not_one_group(key, MEDIA, f"a sequence field {seq!r} unlike its text column's")
        row += t.num_rows
    _not_one_group(_label(keys), MEDIA, f"a sequence field {seq!r} unlike the text's")


def _joined(frames: Sequence[Frame]) -> Frame:
    return frames[0] if len(frames) == 1 else concat(list(frames))


def _label(keys: Sequence[str]) -> str:
    """One name for the samples of ``keys`` decoded as one batch (in error messages)."""
    shown = ", ".join(map(repr, keys[:4]))
    return f"samples of keys [{shown}{', ...' if len(keys) > 4 else ''}]"


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
    refuse_repeats(samples, "samples")
    fields = None if fields is None else names("fields", fields)
    keys = list(dict.fromkeys(k for k, _ in samples))
    meta = retrieve_meta(keys, partition_id)
    if TEXT not in meta.field_names:
        raise FrameError(f"TQ holds no {TEXT!r} column for every one of keys {keys[:4]}")
    frames, media = _read(meta, keys, stage, fields, partition_id)
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
    taken = {c: [take_rows(_joined(g), picks)] for c, g in frames.items()}
    if media is not None:
        taken[MEDIA] = [take_rows(media, picks)]
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
