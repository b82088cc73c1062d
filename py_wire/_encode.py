"""``encode``: match a batch's values to the schema's fields and hand them to the codec.

Work here is O(fields): per-row and per-byte work happens in Rust, with the GIL released.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import _native
from py_wire import _tiers as tiers
from py_wire._args import batch_mapping, count, flag, frame_metadata, items, optional_count
from py_wire._dtypes import DTYPES
from py_wire._errors import with_context
from py_wire._native import BatchError, Frame, WireError
from py_wire._packed import PackedTensor
from py_wire._rowvalues import encode_rows
from py_wire._schema import FieldDef, Schema, load_schema
from py_wire._tiers.codec import RowWindows


def encode(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    *,
    stage: str | None = None,
    threads: int | None = None,
    out: Any = None,
    checksum: bool = False,
    metadata: Mapping[str, str] | None = None,
    compact: bool = False,
) -> Frame:
    """Encode ``batch`` (field name → value) into one frame.

    Packed fields take a :class:`PackedTensor`, ``list[Tensor | None]`` or
    ``list[list[Tensor]]`` (NeMo-RL's ``PackedTensor`` goes through
    :func:`py_wire.interop.nemo_rl.to_frame`). Fields with an ``encoding`` take one value per
    row: a ``str`` (``"utf8"``; ``None`` for none) or a JSON value (``"json"``). Per-token
    fields take a list of per-row tensors, a jagged nested tensor, or a padded ``[B, L, ...]``
    tensor plus the schema's lengths field. Scalars take a ``[B, ...]`` tensor. numpy arrays
    work wherever tensors do. Every ``required`` field must be present; with ``stage``,
    exactly the required fields that stage needs (``schema.required_for(stage)``): an optional
    field is never demanded, and fields outside the stage may be present (they are encoded) or
    absent.

    ``threads`` caps the copy threads (an int from 1 to 1024; default: ``PY_WIRE_THREADS`` or
    the core count; a thread is used per 8 MiB of payload).
    ``out`` is a writable buffer to encode into instead of a fresh allocation (reuse it across
    steps to skip page faults); the frame then borrows ``out`` and is valid until ``out`` is
    written again. No input may overlap ``out`` (a view decoded from it, say): that raises
    :class:`BatchError`.
    ``checksum=True`` stores an xxh3-64 digest of each field's bytes (and of the header and the
    shared tables) in the header's ``py_wire.checksum`` entry, computed in a second pass over
    the written frame (about a fifth of the copy's cost); ``Frame.verify()`` and
    ``decode(verify=True)`` check it, and ``load`` and ``py_wire.distributed`` check it by
    default when a frame carries one.
    ``metadata`` adds string entries to the frame's safetensors ``__metadata__`` (keys starting
    ``py_wire.`` are reserved; at most 64 KiB): what a producer wants a consumer to know that
    is not a field, such as the padded width an adapter restores. Frame operations keep it.
    ``compact=True`` writes a compact frame: its header names the schema by fingerprint
    (``py_wire.schema_ref``) instead of embedding it (a 1-row ``text_grpo`` header is 37%
    of the embedded one). Its reader must hold the
    schema (:func:`load_schema` holds every schema it returns; ``decode(..., schema=)`` and
    ``Frame.from_buffer(..., schema=)`` too), else reading it is a :class:`FrameError` naming
    the fingerprint. For streams, data planes and replay buffers whose readers know the
    schema; files (:func:`save`) and one-off frames stay embedded. Frame operations keep a
    compact frame compact. See docs/compact-frames.md.

    Inputs in flight: encode copies the inputs with the GIL released, so other threads run
    meanwhile. Once it has read an input it holds what owns the input's bytes (a tensor's
    untyped storage, a buffer export for numpy) until the copy ends, so dropping the input,
    ``t.set_()`` or shrinking ``t.resize_()`` after that cannot free what it copies. torch
    itself does not make a tensor safe to ``set_()`` or ``resize_()`` in one thread while
    another reads it (``clone()`` or encode): that can crash with or without py_wire, so do
    not reset an input from another thread while encode runs. Per-token rows of up to 4 KiB
    given as lists of plain CPU tensors are instead copied while their metadata is read, with
    the GIL held from reading a row's data pointer to the end of its copy, after checking that
    the row lies inside its storage.
    Writing to an input while it is encoded gives torn data (each row holds bytes that were in
    memory at some moment of the copy); growing an input's storage in place (``t.resize_()``
    past its capacity, ``t.untyped_storage().resize_()``) frees the old allocation under the
    reader and is not allowed. Tensors are read as they are: no torch function mode (or subclass
    ``__torch_function__``) answers for their dtype, shape or data pointer.
    """
    schema = load_schema(schema)
    optional_count("threads", threads, minimum=1, maximum=MAX_THREADS)
    flag("checksum", checksum)
    flag("compact", compact)
    extra = frame_metadata(metadata)
    fields = checked_fields(batch, schema, stage)
    with plain_tensors():
        frame = _native.encode(
            schema._codec_for(stage, extra, compact), fields, threads, None, out, checksum=checksum
        )
    frame.schema = schema
    return frame


def encode_parts(
    batch: Mapping[str, Any],
    schema: Schema | str | Path,
    *,
    stage: str | None = None,
    min_borrow: int = 0,
    checksum: bool = False,
    compact: bool = False,
) -> list[Any]:
    """Encode ``batch`` as a list of buffers for scatter/gather I/O (``socket.sendmsg``,
    ``writev``): read-only buffers over the caller's own tensors for every payload (no copy),
    and ``bytes`` for the header, index tensors and padding. Written one after another they are
    byte-identical to ``encode``'s frame. Only payloads that need work are copied into the
    ``bytes`` parts: wire-dtype casts and non-contiguous inputs. ``min_borrow`` gathers
    payloads under that many bytes too (fewer, larger buffers for many tiny rows).

    The parts hold what owns the inputs' bytes (torch storages, buffer exports) until the last
    part is dropped: deleting an input, ``t.set_()`` or shrinking ``t.resize_()`` once
    ``encode_parts`` returned leaves the parts valid. Writing to an input before the parts are
    sent changes what is sent (the header no longer matches a cast or a contract check made at
    encode); growing an input's storage in place (``t.resize_()`` past its capacity,
    ``untyped_storage().resize_()``) frees the bytes the parts read and is not allowed.
    ``checksum=True`` gives the header ``encode(..., checksum=True)`` writes (the digests are
    computed over the parts); ``compact=True`` the compact header ``encode(..., compact=True)``
    writes.
    """
    schema = load_schema(schema)
    count("min_borrow", min_borrow)
    flag("checksum", checksum)
    flag("compact", compact)
    fields = checked_fields(batch, schema, stage)
    codec = schema._codec_for(stage, None, compact)
    with plain_tensors():
        return _native.encode_parts(codec, fields, min_borrow, checksum=checksum)


#: The most copy threads ``encode`` accepts.
MAX_THREADS = 1024

#: The codec reads tensors as they are: inside this context no torch function mode (or a
#: subclass's ``__torch_function__``) answers for ``data_ptr()``, ``shape`` or ``dtype``.
plain_tensors = torch._C.DisableTorchFunction


def checked_fields(
    batch: Mapping[str, Any], schema: Schema, stage: str | None, *, required: bool = True
) -> list[tuple[str, str, Any, Any]]:
    batch = batch_mapping("batch", batch)
    unknown = [k for k in batch if k not in schema.fields]
    if unknown:
        raise with_context(
            BatchError(
                f"fields {unknown} are not in schema {schema.name!r} (declare them; py_wire "
                f"never drops a field silently). Schema fields: {list(schema.fields)}"
            ),
            field=str(unknown[0]),
            kind="unknown_field",
        )
    needed = schema.required_for(stage) if required else []
    missing = [name for name in needed if batch.get(name) is None]
    if missing:
        why = (
            f"stage {stage!r} needs {needed}"
            if stage is not None
            else f"required with no stage given: {needed}"
        )
        raise BatchError(f"schema {schema.name!r}: missing fields {missing} ({why})")
    lengths = batch.get(schema.lengths_field) if schema.lengths_field else None
    fields = []
    for name, field in schema.fields.items():
        value = batch.get(name)
        if value is None:
            continue
        if field.encoding is not None and not isinstance(value, PackedTensor):
            value = encode_rows(name, items(f"field {name!r}", value), field.encoding)
        if field.accept:
            value = _widen(value, field)
        kind, first, second = tiers.of(field.tier).input_kind(name, field, value, lengths)
        fields.append((name, kind, first, second))
    return fields


def _widen(value: Any, field: FieldDef) -> Any:
    """``value`` with every tensor of a dtype the field ``accept``s cast to the field's dtype
    (a copy of this field's affected tensors, made here in Python with ``.to()``; shared
    segments stay shared). Other dtypes pass through untouched for the codec to judge."""
    target = DTYPES[field.dtype]
    accepted = {DTYPES[d] for d in field.accept}
    done: dict[int, Any] = {}

    def one(t: Any) -> Any:
        if isinstance(t, np.ndarray) and t.dtype != object:
            t = torch.from_numpy(t)
        if not isinstance(t, torch.Tensor) or t.dtype not in accepted:
            return t
        if id(t) not in done:
            done[id(t)] = t.to(target)
        return done[id(t)]

    def rows(items: Any) -> list[Any]:
        return [
            r if r is None else [one(x) for x in r] if isinstance(r, list | tuple) else one(r)
            for r in items
        ]

    if isinstance(value, torch.Tensor | np.ndarray):
        return one(value)
    if isinstance(value, list | tuple):
        return rows(value)
    if isinstance(value, PackedTensor):
        return value._map(one)
    if isinstance(value, RowWindows):
        return dataclasses.replace(value, tensor=one(value.tensor))
    return value


def mask_windows(
    mask: Any, skips: Any = (0,), padded: Any = ()
) -> tuple[list[tuple[list[int], list[int]]], list[tuple[int, int] | None]] | None:
    """The rows of padded ``[B, W, ...]`` tensors that a ``[B, W]`` ``mask`` (an integer or
    bool tensor) cuts, as windows, found in one codec pass: for each column offset of
    ``skips``, ``(starts, lengths)`` of each row's run of marked cells within columns
    ``skip..W``, counted from ``skip`` (a :class:`RowWindows` of a ``[B, W - skip, ...]``
    tensor takes them as they are); and for each ``(tensor, i)`` of ``padded`` (``tensor``
    ``[B, W - skips[i], ...]``), the ``(row, column)`` of the one value every cell outside
    its windows holds under torch's ``==`` (its padding), or None when they differ or no cell
    lies outside. None as a whole when a row's marked cells are not one run (a mask with
    holes) or the mask is a float tensor: cut such a mask with torch instead."""
    if not isinstance(mask, torch.Tensor):
        raise TypeError(f"mask must be a torch.Tensor, not {type(mask).__name__}")
    offsets = [count(f"skips[{i}]", s) for i, s in enumerate(items("skips", skips))]
    pairs = []
    for i, entry in enumerate(items("padded", padded)):
        if not (
            isinstance(entry, tuple) and len(entry) == 2 and isinstance(entry[0], torch.Tensor)
        ):
            raise TypeError(
                f"padded[{i}] must be a (tensor, skip index) pair, not {type(entry).__name__}"
            )
        last = len(offsets) - 1
        pairs.append((entry[0], count(f"padded[{i}] skip index", entry[1], maximum=last)))
    with plain_tensors():
        return _native.mask_windows(mask, offsets, pairs)


def placeholder_runs(input_ids: Any, token_id: int) -> list[list[int]]:
    """Per row, the lengths of the runs of ``token_id``, in order: read back how many
    placeholder tokens the generation engine left for each image, to re-process media to match.

    ``input_ids``: a list of 1-D int64 tensors or arrays, a jagged nested tensor, or one 1-D
    tensor (a single row).
    """
    if isinstance(input_ids, torch.Tensor):
        input_ids = list(input_ids.unbind()) if input_ids.is_nested else [input_ids]
    token_id = count("token_id", token_id, minimum=-(2**63), maximum=2**63 - 1)
    rows = items("input_ids", input_ids)
    try:
        return _native.placeholder_runs(rows, token_id)
    except WireError as e:
        raise type(e)(f"input_ids: {e}") from None
