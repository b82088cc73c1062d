"""``decode``: views into a frame, per tier, without copying payload bytes.

The codec validated every offset and shape when the frame was wrapped; building the views here
is O(fields) torch calls, independent of rows and bytes.
"""

from __future__ import annotations

import logging
import math
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from py_wire import _native
from py_wire import _tiers as tiers
from py_wire._args import fill_value, flag, optional_count
from py_wire._device import host_shadow
from py_wire._dtypes import DTYPES
from py_wire._errors import with_context
from py_wire._evolution import (
    SchemaConflictWarning,
    SchemaEvolutionWarning,
    check_readable,
)
from py_wire._native import (
    ContractError,
    FieldLayout,
    Frame,
    FrameError,
    FrameLayout,
    SchemaError,
    TensorLoc,
)
from py_wire._packed import PackedTensor
from py_wire._padding import ATTENTION_MASK, padded_width
from py_wire._padding import attention_mask as make_attention_mask
from py_wire._rows import RowWindow
from py_wire._schema import Schema, hold_schema, load_schema
from py_wire._source import as_frame
from py_wire._storage import _NUMPY_NATIVE, StorageSlicer

Layout = Literal["nested", "padded", "list"]
Writable = Literal["auto", "view", "copy"]

#: The largest pad_to_multiple_of: padding sequences to a multiple of more than a million
#: tokens is a mistake, and would allocate [B, k x 2**20] before saying so.
MAX_PAD_MULTIPLE = 1 << 20
WRITABLE_POLICIES: tuple[Writable, ...] = ("auto", "view", "copy")


def writable_policy(writable: object) -> Writable:
    """``writable`` checked: one of :data:`WRITABLE_POLICIES`."""
    if not isinstance(writable, str) or writable not in WRITABLE_POLICIES:
        raise _native.WireError(
            f"writable must be one of {', '.join(map(repr, WRITABLE_POLICIES))}, not {writable!r}"
        )
    return writable


class FrameViews:
    """The frame's tensors over its memory (one uint8 base tensor), each with a storage of
    exactly its own bytes (that keeps the frame, and so its owner, alive); field values over
    ``payload`` instead when the frame's bytes lie elsewhere (a device buffer that ``frame``,
    its host shadow, validated).

    ``private=True`` makes every tensor it hands out (index tables too) a copy, so that nothing
    returned can reach a source that must not be written. :meth:`own` gives a view (a row
    window's slice) a storage of exactly its own bytes (see :mod:`py_wire._storage`)."""

    def __init__(
        self, frame: Frame, payload: torch.Tensor | None = None, private: bool = False
    ) -> None:
        self.frame = frame
        self.layout: FrameLayout = frame.layout
        self.private = private
        if frame.readonly_buffer:
            with warnings.catch_warnings():
                # Read-only inputs (bytes, read-only mmaps) give views torch cannot mark
                # read-only; decode's ``writable`` policy decides what may be returned over them.
                warnings.simplefilter("ignore", UserWarning)
                self.base = torch.frombuffer(frame, dtype=torch.uint8)
        else:
            self.base = torch.frombuffer(frame, dtype=torch.uint8)
        self.payload = self.base if payload is None else payload
        # The frame's bytes as numpy: each tensor is cut from it with a storage of exactly its
        # own bytes, in one step (no view of the whole frame to cut again).
        self.array = self.base.numpy()
        self.own = StorageSlicer(self.base)
        self.fields = {f.name: f for f in self.layout.fields}

    @cached_property
    def seq_offsets(self) -> torch.Tensor | None:
        """The sequence offsets table (None: no per-token fields), built on first use: a padded
        decode pads from the frame's own table, in the codec."""
        seq = self.layout.seq_offsets
        return self.view(seq) if seq is not None else None

    def view(self, loc: TensorLoc) -> torch.Tensor:
        """An index table (host memory)."""
        t = _exact(self.array, loc)
        return t.clone() if self.private else t

    def host_tokens(self, loc: TensorLoc) -> np.ndarray | None:
        """A per-token field's values in host memory as ``[tokens, token bytes]`` uint8 (numpy
        has no bfloat16), for the codec to read without a tensor built first; None when the
        payload lies elsewhere or holds nothing."""
        if self.payload is not self.base or loc.nbytes == 0:
            return None
        part = self.array[loc.offset : loc.offset + loc.nbytes]
        return part.reshape(loc.shape[0], loc.nbytes // loc.shape[0])

    def values(self, loc: TensorLoc) -> torch.Tensor:
        """A field's values (where the payload lies), not yet copied by ``private``."""
        if self.payload is self.base:
            return _exact(self.array, loc)
        return _view(self.payload, loc)


def _view(base: torch.Tensor, loc: TensorLoc) -> torch.Tensor:
    flat = base[loc.offset : loc.offset + loc.nbytes]
    return flat.view(DTYPES[loc.dtype]).view(loc.shape)


def _exact(array: np.ndarray, loc: TensorLoc) -> torch.Tensor:
    """The tensor at ``loc`` over ``array``'s memory, with a storage of exactly its bytes."""
    dtype, shape = DTYPES[loc.dtype], loc.shape
    if loc.nbytes == 0:
        return torch.empty(shape, dtype=dtype)
    host = _HOST_DTYPES.get(dtype)
    if host is not None:  # numpy shapes it: one torch call
        return torch.from_numpy(
            array[loc.offset : loc.offset + loc.nbytes].view(host).reshape(shape)
        )
    t = torch.from_numpy(array[loc.offset : loc.offset + loc.nbytes])
    if dtype is not torch.uint8:
        t = t.view(dtype)
    return t if len(shape) == 1 else t.view(shape)


def _source_frame(
    data: Any, policy: Writable, partial: bool
) -> tuple[Frame, bool, torch.Tensor | None]:
    """The frame to decode from, whether each returned tensor must be copied, and the device
    payload (a frame in device memory). Under ``"auto"`` a read-only source whose owner pins it
    (a Ray object) is mapped again copy-on-write, holding the object: zero copies, and a write
    reaches only this process's page. Elsewhere a private frame is a copy:
    of the whole frame, or (``partial``: a row window, a stage, padding, casts) of each returned
    tensor only."""
    if isinstance(data, torch.Tensor) and data.device.type != "cpu":
        # A frame in device memory: validated on the host from its header and index tables,
        # decoded as views of the device buffer (the payload is never copied to the host).
        payload = data.clone() if policy == "copy" else data
        return host_shadow(payload), False, payload
    frame = as_frame(data)
    if policy == "view" or (policy == "auto" and not frame.readonly_buffer):
        return frame, False, None
    if policy == "auto":
        mapped = frame.copy_on_write()
        if mapped is not None:
            return mapped, False, None
    if partial:
        return frame, True, None
    return frame.copy(), False, None


def decode(
    data: Any,
    schema: Schema | str | Path | None = None,
    *,
    stage: str | None = None,
    layout: Layout | None = None,
    source_dtype: bool = False,
    rows: range | slice | None = None,
    pad_to_multiple_of: int | None = None,
    pad_values: Mapping[str, float | int | bool] | None = None,
    attention_mask: bool = False,
    writable: Writable = "auto",
    verify: bool = False,
) -> dict[str, Any]:
    """Decode a frame into views, per tier: packed → :class:`PackedTensor`, per-token → jagged
    ``torch.nested`` tensor (``layout="padded"``: ``[B, L, ...]`` padded with the field's pad
    value, lengths under the schema's lengths field; ``layout="list"``: lists of row tensors),
    scalar → dense ``[B, ...]`` tensor. ``stage`` keeps only that stage's fields; a packed field
    of that stage which the frame lacks comes back as rows without segments.
    Fields with a wire dtype decode as stored; ``source_dtype=True`` casts them back to the
    schema's declared dtype (a copy of those fields only).

    No payload byte is copied (except by ``layout="padded"``, ``source_dtype`` and the
    ``writable`` policy below); every view keeps its memory alive. Each returned tensor (each
    field's values and offsets, each packed segment, each row of ``layout="list"``) has a
    storage of exactly its own bytes, so slicing, sharding, pickling, ``torch.save`` or
    ``ray.put`` of decoded data carries only the bytes it references, never the whole frame.

    ``rows=range(a, b)`` (or a step-1 slice) decodes only those rows, as views, at O(fields)
    cost: per-token values narrowed by the sequence offsets (offsets rebased), scalars sliced,
    packed fields as a PackedTensor over those rows. Reversed or strided selections raise
    :class:`WireError` (use :func:`py_wire.take_rows`). ``pad_to_multiple_of`` rounds the padded
    length up (``layout="padded"``); ``pad_values={"input_ids": tokenizer.pad_token_id}``
    overrides the schema's pad values; ``attention_mask=True`` adds ``"attention_mask"``, a
    ``[B, L]`` bool tensor (True on real tokens; ``L`` as the padded layout's).

    ``data`` may be a CUDA (any device) uint8 tensor holding a frame, as
    :func:`py_wire.distributed.recv` returns under NCCL: its header and index tables (a few
    bytes per row) are copied to the host and validated, and every field comes back as views
    of that device buffer; the payload never leaves the device.

    ``writable`` decides whether an in-place write to a decoded tensor can reach the source
    (torch has no read-only tensors, so a view cannot refuse a write):

    - ``"auto"`` (default): views into ``data`` when its buffer is writable (a ``bytearray``, a
      numpy array, a frame py_wire made, :func:`py_wire.load`'s copy-on-write mapping, a frame
      received by :mod:`py_wire.distributed`). A read-only Ray object-store buffer (its owner
      keeps it pinned and unchanged while held: :attr:`Frame.pinned_by`) is mapped again,
      copy-on-write (:meth:`Frame.copy_on_write`), holding the object: still zero-copy, and a
      write changes only this process's page. Any other read-only buffer (``bytes``, a
      read-only ``mmap`` of a file or ``/dev/shm`` whose owner may rewrite or truncate it,
      shared memory) is copied once into a private, pooled, 64-byte-aligned buffer (with
      ``rows=``, ``stage=``, ``source_dtype=True`` or ``layout="padded"``, only the returned
      tensors are copied).
    - ``"view"``: always views into ``data``, zero-copy; you promise not to write to them (a
      write would change a shared Ray object or another reader's bytes, or crash on a
      read-only mapping).
    - ``"copy"``: always a private copy, as ``"auto"`` does for ``bytes``.

    ``schema`` (a :class:`Schema`, bundled name or path), when given, must be the frame's or
    another version of it that reads the frame (``Schema.diff``: only optional fields or stages
    added or removed); then ``decode`` returns the fields that ``schema`` declares, and the
    frame's others are reported (:class:`SchemaEvolutionWarning`, not silently dropped). Any
    other schema is a :class:`SchemaError` naming the field and both versions. It is held for
    this process before the frame is read: a compact frame (``encode(..., compact=True)``)
    that names it by fingerprint can then be decoded. A compact frame whose schema the process
    does not hold is a :class:`FrameError` naming the fingerprint.

    ``verify=True`` checks the frame's payload checksums first (see ``encode(...,
    checksum=True)``; O(bytes)): :class:`FrameError` names the field whose bytes changed, or
    says the frame carries none. For a device frame the bytes are copied to the host for the
    check.
    """
    policy = writable_policy(writable)
    flag("verify", verify)
    _check_layout(layout)
    # Held before the frame is read: a compact frame naming it is then readable.
    wanted = load_schema(schema) if schema is not None else None
    partial = rows is not None or stage is not None
    frame, clone, payload = _source_frame(data, policy, partial)
    if verify:
        _verify(frame, payload)
    frame_schema, reader = _schema_of(frame, wanted, stage, payload)
    # A reader's other version of the frame's schema: its fields (of ``stage``) only.
    if stage is not None:
        keep: set[str] | None = set((reader or frame_schema).fields_for(stage))
    else:
        keep = set(reader.fields) if reader is not None else None
    return decode_fields(
        frame,
        frame_schema,
        keep,
        fill_missing=stage is not None,
        clone=clone,
        payload=payload,
        layout=layout,
        source_dtype=source_dtype,
        rows=rows,
        pad_to_multiple_of=pad_to_multiple_of,
        pad_values=pad_values,
        attention_mask=attention_mask,
    )


def decode_fields(
    frame: Frame,
    frame_schema: Schema,
    keep: set[str] | None,
    *,
    fill_missing: bool,
    clone: bool,
    payload: torch.Tensor | None = None,
    layout: Layout | None = None,
    source_dtype: bool = False,
    rows: range | slice | None = None,
    pad_to_multiple_of: int | None = None,
    pad_values: Mapping[str, float | int | bool] | None = None,
    attention_mask: bool = False,
    torch_padding: bool = False,
) -> dict[str, Any]:
    """``decode``'s body, on a frame already chosen by the ``writable`` policy: the fields in
    ``keep`` (None: all) of ``frame`` (its values over ``payload`` where given: a copy of the
    frame's bytes on a device). ``torch_padding``: ``layout="padded"`` pads with torch ops where
    the values lie (:func:`padded_by_scatter`), as it does for a device payload, also on the
    host: the device path, run and checked on a CPU-only machine. ``fill_missing``: a packed
    field of ``keep`` that the frame lacks comes back as rows without segments (never for rows
    whose tokens hold that field's placeholder runs: a :class:`ContractError` instead);
    otherwise it is left out (a reader that merges several frames of one batch fills after
    merging)."""
    pad_multiple, pads = _check_trainer_options(
        frame_schema, layout, pad_to_multiple_of, pad_values, attention_mask, source_dtype
    )
    options = _Options(layout, source_dtype, pad_multiple, pads, clone, torch_padding)
    views = FrameViews(frame, payload, private=clone)
    selection = _Selection.of(views, keep, rows)
    fields = _FieldDecoder(views, frame_schema, selection, options)
    host = views.payload is views.base and not torch_padding
    if layout == "padded" and selection.window is None and host:
        fields.pad_all([n for n, f in views.fields.items() if selection.keeps(n)])
    out = {name: fields.value(f) for name, f in views.fields.items() if selection.keeps(name)}
    if selection.keep is not None and fill_missing:
        tokens = _sequence_tokens(views, frame_schema, selection)
        add_missing_fields(out, frame_schema, selection.keep, selection.num_rows, layout, tokens)
    if layout == "padded" and fields.seq_lengths is not None:
        _add_lengths(out, frame_schema, selection, fields.seq_lengths, fields.device)
    if attention_mask:
        out[ATTENTION_MASK] = _attention_mask(selection, pad_multiple, fields.device)
    return out


def decode_selected(
    data: Any, keep: set[str] | None, *, writable: Writable = "auto", **options: Any
) -> dict[str, Any]:
    """The fields in ``keep`` (None: all) of one frame, as :func:`decode` returns them under
    the same ``writable`` policy and ``options`` (its trainer keywords and ``rows``), without
    filling in absent fields: for readers that merge several frames of one batch
    (:mod:`py_wire.interop.transfer_queue`) and fill after merging (:func:`add_missing_fields`)."""
    policy = writable_policy(writable)
    _check_layout(options.get("layout"))
    partial = options.get("rows") is not None or keep is not None
    frame, clone, payload = _source_frame(data, policy, partial)
    return decode_fields(
        frame,
        checked_schema(frame),
        keep,
        fill_missing=False,
        clone=clone,
        payload=payload,
        **options,
    )


def _check_layout(layout: object) -> None:
    if layout is not None and (
        not isinstance(layout, str) or layout not in ("nested", "padded", "list")
    ):
        raise _native.WireError(f"layout must be 'nested', 'padded' or 'list', not {layout!r}")


def _verify(frame: Frame, payload: torch.Tensor | None) -> None:
    """``verify=True``: the frame's payload checksums, on the host (a device frame's bytes are
    copied there for the check)."""
    if not frame.has_checksum:
        raise FrameError(
            "verify=True, but the frame carries no checksums (encode it with checksum=True)"
        )
    host = frame if payload is None else Frame.from_buffer(payload.cpu().numpy())
    host.verify()


def _schema_of(
    frame: Frame, wanted: Schema | None, stage: str | None, payload: torch.Tensor | None
) -> tuple[Schema, Schema | None]:
    """The frame's schema, and the reader's when it is another version of it. A caller's
    schema must be the frame's, or one that reads it by the evolution rule
    (:mod:`py_wire._evolution`: ``SchemaError`` naming the field and both versions
    otherwise), and the frame must keep the reader's contracts (of ``stage``) that its own
    schema lacks (``ContractError``); the frame's fields it does not declare are reported
    (:class:`SchemaEvolutionWarning`) and left out, and so is a reader's schema of the frame's
    name and version that is not the frame's (:class:`SchemaConflictWarning`)."""
    frame_schema = checked_schema(frame)
    if wanted is None or wanted.fingerprint == frame_schema.fingerprint:
        return frame_schema, None
    _check_reader(frame, payload, wanted, frame_schema, stage, stacklevel=4)
    extra = tuple(f.name for f in frame.layout.fields if f.name not in wanted.fields)
    if extra:
        warnings.warn(
            SchemaEvolutionWarning(
                f"the frame was written under schema {frame_schema.name!r} "
                f"v{frame_schema.version}, which adds fields {list(extra)} to the reader's "
                f"v{wanted.version}: left out (decode without a schema returns them)",
                extra,
                wanted.version,
                frame_schema.version,
            ),
            stacklevel=3,
        )
    return frame_schema, wanted


def _check_reader(
    frame: Frame,
    payload: torch.Tensor | None,
    reader: Schema,
    frame_schema: Schema,
    stage: str | None,
    stacklevel: int,
) -> None:
    """What a reader's schema other than the frame's asks of it: the same name
    (:class:`SchemaError`), a version that reads the frame (``check_readable``), the reader's
    contracts the frame's schema lacks (``ContractError``), and a
    :class:`SchemaConflictWarning` for a reader's schema of the frame's name and version that
    is not the frame's. ``stacklevel``: of the warning, to the caller's line."""
    if reader.name != frame_schema.name:
        raise SchemaError(
            f"frame was encoded with schema {frame_schema.name!r} v{frame_schema.version} "
            f"({frame_schema.fingerprint}), not {reader.name!r} v{reader.version} "
            f"({reader.fingerprint})"
        )
    check_readable(reader, frame_schema)
    _check_reader_contracts(frame, payload, reader, frame_schema, stage)
    if reader.version == frame_schema.version:
        warnings.warn(
            SchemaConflictWarning(
                f"schema {reader.name!r} v{reader.version} (the reader's, {reader.fingerprint}) "
                f"is not the schema of that name and version the frame was written under "
                f"({frame_schema.fingerprint}): one was changed without a new version; the "
                "frame is read as another version of it",
                reader.name,
                reader.version,
                reader.fingerprint,
                frame_schema.fingerprint,
            ),
            stacklevel=stacklevel,
        )


def _frame_from_buffer(data: Any, schema: Schema | str | Path | None = None) -> Frame:
    """``Frame.from_buffer``: wraps any C-contiguous buffer (bytes, bytearray, memoryview,
    mmap, numpy uint8 array) without copying, after validating it (a base not aligned to 16
    bytes is copied once). The frame is read by its own length: bytes after its end are not
    part of it. ``schema`` (a ``Schema``, bundled name or path) is held for this process first,
    so that a compact frame naming it can be read; when it is not the frame's schema, the frame
    is read under it as ``decode(frame, schema=)`` reads one: another version that reads the
    frame (else a :class:`SchemaError`), the reader's contracts the frame's schema lacks
    checked here (a :class:`ContractError` naming the row), and a
    :class:`SchemaConflictWarning` for a schema of the frame's name and version that is not
    the frame's. So every reader of the frame (``decode``, ``trainer.iter_micro_batches``, the
    adapters' ``from_frame``) reads bytes checked against the schema it was given."""
    reader = hold_schema(schema) if schema is not None else None
    frame = _native.Frame._wrap(data)
    if reader is not None:
        frame_schema = checked_schema(frame)
        if reader.fingerprint != frame_schema.fingerprint:
            _check_reader(frame, None, reader, frame_schema, None, stacklevel=3)
    return frame


def _check_reader_contracts(
    frame: Frame,
    payload: torch.Tensor | None,
    reader: Schema,
    frame_schema: Schema,
    stage: str | None,
) -> None:
    """A reader's contracts that the frame's schema lacks were never checked on the frame (its
    encode did not know them): check them now, in the codec, in one pass over the tokens
    (:class:`ContractError` naming the row). A frame in device memory is copied to the host
    for the check (``payload``)."""
    contracts = reader.unchecked_contracts(frame_schema, stage)
    if not contracts:
        return
    codec = _native.Codec(
        list(reader._specs.values()), contracts, reader.sequence_field, reader.lengths_field, {}
    )
    host = frame if payload is None else Frame.from_buffer(payload.cpu().numpy())
    _native.check_contracts(host, codec)


@dataclass(frozen=True)
class _Options:
    """``decode``'s checked options, as building each field's value reads them. ``clone``:
    every returned tensor must be a copy (see :func:`_source_frame`)."""

    layout: Layout | None
    source_dtype: bool
    pad_to_multiple_of: int | None
    pad_values: dict[str, Any]
    clone: bool
    #: Pad with torch ops where the values lie (as for a device frame) even on the host.
    torch_padding: bool = False


@dataclass(frozen=True)
class _Selection:
    """What ``decode`` returns of the frame: a stage's fields (``keep``; ``None``: all) over a
    row window (``None``: all rows), with that window's sequence offsets and row count."""

    keep: set[str] | None
    window: RowWindow | None
    views: FrameViews
    num_rows: int

    @staticmethod
    def of(views: FrameViews, keep: set[str] | None, rows: range | slice | None) -> _Selection:
        frame = views.frame
        window = None if rows is None else RowWindow(views.seq_offsets, frame.num_rows, rows)
        if window is None:
            return _Selection(keep, None, views, frame.num_rows)
        return _Selection(keep, window, views, window.num_rows)

    @property
    def seq_offsets(self) -> torch.Tensor | None:
        """The selected rows' sequence offsets (the window's, rebased)."""
        if self.window is not None:
            return self.window.seq_offsets
        return self.views.seq_offsets

    def keeps(self, name: str) -> bool:
        return self.keep is None or name in self.keep


class _FieldDecoder:
    """Builds each field's returned value, per tier, over ``views``. Per-token fields share
    what it computes once: the padded layout's lengths and the jagged layout's offsets."""

    def __init__(
        self, views: FrameViews, schema: Schema, selection: _Selection, options: _Options
    ) -> None:
        self.views = views
        self.schema = schema
        self.window = selection.window
        self.selection = selection
        self.options = options
        self.device = views.payload.device
        self.seq_lengths: torch.Tensor | None = None
        self.width = 0
        # Whole fields are cut from the frame with storages of exactly their bytes already
        # (FrameViews.values), as are casts and copies: only a row window's slices need cutting.
        self._own = views.own if self.window is not None else _as_is
        self._jagged_offsets: torch.Tensor | None = None
        self.layout = options.layout
        self.clone = options.clone
        self.torch_padding = options.torch_padding
        #: Per-token fields padded by :meth:`pad_all`, by name.
        self.padded: dict[str, torch.Tensor] = {}
        #: Each token's cell in the padded layout, where the values lie (torch padding).
        self.cells: torch.Tensor | None = None

    @property
    def seq_offsets(self) -> torch.Tensor | None:
        return self.selection.seq_offsets

    def pad_all(self, names: list[str]) -> None:
        """The per-token fields among ``names`` (those decoded as stored) padded in one codec
        call, into one new buffer: one pass over the frame's tokens with the GIL released, each
        field then a tensor over exactly its own block, and the rows' lengths from it too."""
        fields = self.views.fields
        pads = self.options.pad_values
        # repr and type tell -0.0 from 0.0 and True from 1 (equal, and so one key, otherwise).
        key = (
            self.schema.fingerprint,
            tuple(names),
            tuple((k, repr(v), type(v)) for k, v in pads.items()),
        )
        plan = _PAD_PLANS.get(key)
        if plan is None:
            plan = _pad_plan(self.schema, fields, names, pads, self.options.source_dtype)
            if len(_PAD_PLANS) < 1024:
                _PAD_PLANS[key] = plan
        if not plan[0]:
            return
        buf, width, lengths_at, blocks = _native.pad_fields(
            self.views.frame, plan[0], self.options.pad_to_multiple_of
        )
        array = np.frombuffer(memoryview(buf), np.uint8)
        rows = self.views.frame.num_rows
        self.seq_lengths = _block(array, lengths_at, (rows,), _LENGTHS)
        self.width = width
        padded = self.padded
        for (name, dtype, token_shape), at in zip(plan[1], blocks, strict=True):
            padded[name] = _block(array, at, (rows, width, *token_shape), dtype)

    def value(self, f: FieldLayout) -> Any:
        padded = self.padded.get(f.name)
        if padded is not None:
            return padded
        cast = DTYPES[f.dtype] if self.options.source_dtype and f.stored_dtype != f.dtype else None
        return tiers.of(f.tier).decoded(self, f, cast)

    # What a tier reads of the decode (``py_wire._tiers.FieldDecoding``).

    def own(self, t: torch.Tensor) -> torch.Tensor:
        return self._own(t)

    def own_exact(self, t: torch.Tensor) -> torch.Tensor:
        return self.views.own(t)

    def values(self, loc: TensorLoc) -> torch.Tensor:
        return self.views.values(loc)

    def table(self, loc: TensorLoc) -> torch.Tensor:
        return self.views.view(loc)

    def host_tokens(self, loc: TensorLoc) -> np.ndarray | None:
        return self.views.host_tokens(loc)

    def encoding(self, name: str) -> Literal["utf8", "json"] | None:
        return self.schema.fields[name].encoding

    def jagged_offsets(self) -> torch.Tensor:
        if self._jagged_offsets is None:
            # One offsets tensor for every field: they share one ragged dim.
            assert self.seq_offsets is not None
            self._jagged_offsets = self.own(self.seq_offsets)
            if self.device.type != "cpu":
                self._jagged_offsets = self._jagged_offsets.to(self.device)
        return self._jagged_offsets

    def pad(
        self,
        name: str,
        values: torch.Tensor | np.ndarray,
        dtype: torch.dtype,
        token_shape: list[int],
    ) -> torch.Tensor:
        """``values`` (a tensor, or the frame's ``[tokens, token bytes]``) padded to the batch's
        width: ``[rows, width, *token_shape]`` of ``dtype``."""
        offsets = self.seq_offsets
        assert offsets is not None
        if self.seq_lengths is None:
            self.seq_lengths = torch.diff(offsets)
            self.width = padded_width(self.seq_lengths, self.options.pad_to_multiple_of)
        pad = self.options.pad_values.get(name, self.schema.fields[name].pad_value)
        if isinstance(values, torch.Tensor) and (
            values.device.type != "cpu" or self.options.torch_padding
        ):
            if self.cells is None or self.cells.device != values.device:
                self.cells = padded_cells(offsets.to(values.device), self.width)
            return padded_by_scatter(values, self.cells, len(self.seq_lengths), self.width, pad)
        if isinstance(values, torch.Tensor):
            return _padded(values, offsets, self.seq_lengths, pad, self.width)
        out = _new_host_tensor((self.seq_lengths.shape[0], self.width, *token_shape), dtype)
        _native.pad_rows(values, offsets, out, _pad_bytes(pad, dtype))
        return out


def _sequence_tokens(
    views: FrameViews, schema: Schema, selection: _Selection
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The selected rows' sequence-field values and offsets (host memory), or None when the
    frame holds no sequence field."""
    seq = schema.sequence_field
    f = views.fields.get(seq) if seq is not None else None
    if f is None or selection.seq_offsets is None:
        return None
    values = views.values(f.values)
    if selection.window is not None:
        values = selection.window.per_token(values)
    return values.cpu(), selection.seq_offsets.cpu()


def add_missing_fields(
    out: dict[str, Any],
    schema: Schema,
    keep: set[str],
    num_rows: int,
    layout: Layout | None,
    tokens: tuple[torch.Tensor, torch.Tensor] | None,
) -> None:
    """A kept packed field that no frame held is a column no row had media for: present it as
    rows without segments, so a consumer sees "no media", never a missing key. Never for rows
    whose tokens (``tokens``: the sequence field's values and offsets) hold the placeholder
    runs of a contract naming the field: that would be image-blind training, so it is a
    :class:`ContractError` naming the field and the first such row."""
    missing = [n for n in schema.fields if n in keep and n not in out]
    media = {c.media_field for c in schema.contracts}
    for name in sorted(missing, key=lambda n: n not in media):  # a media field named first
        if tiers.items(schema.fields[name].tier) == "segments":
            _check_no_placeholders(schema, name, tokens)
    for name in missing:
        field = schema.fields[name]
        if tiers.items(field.tier) != "segments":
            continue
        if field.encoding is not None:
            out[name] = [None] * num_rows
            continue
        empty = PackedTensor._no_segments(
            num_rows, len(field.shape), DTYPES[field.stored_dtype], field.pack_dim
        )
        out[name] = empty.rows() if layout == "list" else empty


def _check_no_placeholders(
    schema: Schema, name: str, tokens: tuple[torch.Tensor, torch.Tensor] | None
) -> None:
    for c in schema.contracts:
        if name not in (c.media_field, c.grid_field, c.sizes_field, c.count_field):
            continue
        if tokens is None:
            raise with_context(
                ContractError(
                    f"field {name!r} (contract {c.name!r}) is absent and so are the tokens that "
                    "would show no row needs it: refusing to make up empty media"
                ),
                field=name,
            )
        values, offsets = tokens
        flat = values.flatten(1)[:, 0] if values.dim() > 1 else values
        hits = torch.nonzero(flat == c.token_id)
        if hits.numel():
            first = int(hits[0, 0])
            row = int(torch.searchsorted(offsets, torch.tensor(first), right=True)) - 1
            raise with_context(
                ContractError(
                    f"field {name!r} is absent, but row {row} holds placeholder tokens "
                    f"{c.token_id} of contract {c.name!r}: refusing to decode it as a row "
                    "without media (the frame was encoded without this field, e.g. for a "
                    "stage that does not carry it)"
                ),
                field=name,
                row=row,
            )


def _add_lengths(
    out: dict[str, Any],
    schema: Schema,
    selection: _Selection,
    seq_lengths: torch.Tensor,
    device: torch.device,
) -> None:
    """The padded layout's row lengths: under ``"lengths"``, or the schema's lengths field."""
    key = schema.lengths_field
    if key is None:
        out.setdefault("lengths", seq_lengths.to(device))
    elif key not in out and selection.keeps(key):
        # Absent from the frame: derive it, in the dtype the schema declares.
        out[key] = seq_lengths.to(device, DTYPES[schema.fields[key].dtype])


def _attention_mask(
    selection: _Selection, pad_to_multiple_of: int | None, device: torch.device
) -> torch.Tensor:
    seq_offsets = selection.seq_offsets
    if seq_offsets is None:
        raise _native.WireError("attention_mask needs per-token fields; this frame has none")
    lengths = torch.diff(seq_offsets)
    return make_attention_mask(lengths, padded_width(lengths, pad_to_multiple_of)).to(device)


def _check_trainer_options(
    schema: Schema,
    layout: Layout | None,
    pad_to_multiple_of: int | None,
    pad_values: Mapping[str, Any] | None,
    attention_mask: bool,
    source_dtype: bool,
) -> tuple[int | None, dict[str, Any]]:
    """The checked ``pad_to_multiple_of`` and ``pad_values`` (each value one the padded
    tensor's dtype holds exactly: no ``nan`` or ``1.5`` into an int64 field)."""
    flag("attention_mask", attention_mask)
    flag("source_dtype", source_dtype)
    pad_to_multiple_of = optional_count(
        "pad_to_multiple_of", pad_to_multiple_of, minimum=1, maximum=MAX_PAD_MULTIPLE
    )
    if pad_to_multiple_of is not None and layout != "padded" and not attention_mask:
        raise _native.WireError("pad_to_multiple_of applies to layout='padded' or attention_mask")
    if pad_values is not None and not isinstance(pad_values, Mapping):
        raise TypeError(f"pad_values must be a mapping, not {type(pad_values).__name__}")
    pads: dict[str, Any] = {}
    for key, value in (pad_values or {}).items():
        field = schema.fields.get(key) if isinstance(key, str) else None
        if field is None or tiers.of(field.tier).items != "tokens":
            raise _native.WireError(
                f"pad_values: {key!r} is not a per-token field of schema {schema.name!r}"
            )
        dtype = DTYPES[field.dtype if source_dtype else field.stored_dtype]
        pads[key] = fill_value(f"pad_values[{key!r}]", value, dtype)
    if attention_mask and ATTENTION_MASK in schema.fields:
        raise _native.WireError(
            f"schema {schema.name!r} has a field named {ATTENTION_MASK!r}; attention_mask=True "
            "would shadow it"
        )
    return pad_to_multiple_of, pads


def checked_schema(frame: Frame) -> Schema:
    """The schema a frame carries: every reader of a frame (decode, frame ops, contract checks)
    starts here. O(fields). The codec's reader checked, when the frame was wrapped, that an
    embedded schema matches its fingerprint and is canonical (``frame::schema_text``), and
    derived the field table and sequence field from it, as it derives a compact frame's from
    the schema this process holds under its fingerprint. The
    frame keeps the Schema it built (``Frame.schema``)."""
    schema: Schema = frame.schema
    return schema


def check_contracts(frame: Frame, stage: str | None = None) -> None:
    """Re-check the frame's schema contracts (``encode`` already did; use this on frames you
    receive from elsewhere). With ``stage``, as ``encode(stage=)`` checks them: contracts
    whose media field that stage does not carry are skipped. Raises :class:`ContractError`."""
    frame = as_frame(frame)
    _native.check_contracts(frame, checked_schema(frame)._codec_for(stage))


def _drop_fx_notice(record: logging.LogRecord) -> bool:
    return "is_fx_tracing" not in record.getMessage()


# torch 2.15 logs an unrelated fx-tracing notice on the first jagged construction; drop that one
# message (a filter, not a level change: changing levels clears logging's caches on every call).
logging.getLogger("torch.fx._symbolic_trace").addFilter(_drop_fx_notice)


def padded_cells(offsets: torch.Tensor, width: int) -> torch.Tensor:
    """Each token's cell in a ``[rows, width]`` padded layout (``offsets``: the rows' int64
    token offsets, on the device the cells are wanted on): token ``t`` of row ``r`` goes to
    ``r * width + (t - offsets[r])``. Torch ops on that device, no host sync (the token count
    is read from ``offsets`` once, before)."""
    rows = offsets.shape[0] - 1
    lengths = offsets[1:] - offsets[:-1]
    shift = torch.arange(rows, device=offsets.device) * width - offsets[:-1]
    tokens = int(offsets[-1]) if rows else 0
    per_token = torch.repeat_interleave(shift, lengths, output_size=tokens)
    return torch.arange(tokens, device=offsets.device) + per_token


def padded_by_scatter(
    values: torch.Tensor, cells: torch.Tensor, rows: int, width: int, pad: float | int | bool
) -> torch.Tensor:
    """What the codec's ``pad_rows`` writes, by torch where ``values`` lie: a ``[rows, width,
    ...]`` tensor filled with ``pad`` (the element ``_pad_bytes`` gives, bit for bit), then
    every token copied to its cell (:func:`padded_cells`) in one ``index_copy_``."""
    token_shape = values.shape[1:]
    out = torch.empty((rows * width, *token_shape), dtype=values.dtype, device=values.device)
    out.fill_(_pad_element(pad, values.dtype, values.device))
    out.index_copy_(0, cells, values)
    return out.view(rows, width, *token_shape)


def _padded_by_torch(
    values: torch.Tensor, lengths: torch.Tensor, pad: float | int | bool, width: int
) -> torch.Tensor:
    """:func:`padded_by_scatter` of rows of ``lengths`` tokens."""
    offsets = torch.zeros(lengths.shape[0] + 1, dtype=torch.int64, device=values.device)
    torch.cumsum(lengths.to(values.device), 0, out=offsets[1:])
    return padded_by_scatter(values, padded_cells(offsets, width), lengths.shape[0], width, pad)


def _pad_element(pad: float | int | bool, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``pad`` as a 0-d tensor of ``dtype`` on ``device``, the bytes :func:`_pad_bytes` gives."""
    element = torch.frombuffer(bytearray(_pad_bytes(pad, dtype)), dtype=torch.uint8)
    return element.view(dtype).reshape(()).to(device)


#: What :meth:`_FieldDecoder.pad_all` asks of the codec and builds, per schema, fields and pad
#: values: ``([(name, pad bytes)], [(name, (dtype, numpy dtype or None), token shape)])``.
_PAD_PLANS: dict[tuple[Any, ...], tuple[list[tuple[str, bytes]], list[Any]]] = {}
_LENGTHS = (torch.int64, np.dtype(np.int64))
#: numpy's dtype for each torch dtype numpy holds as it is.
_HOST_DTYPES = {d: torch.empty(0, dtype=d).numpy().dtype for d in _NUMPY_NATIVE}


def _pad_plan(
    schema: Schema,
    fields: dict[str, FieldLayout],
    names: list[str],
    pads: dict[str, Any],
    source_dtype: bool,
) -> tuple[list[tuple[str, bytes]], list[Any]]:
    asks: list[tuple[str, bytes]] = []
    builds: list[Any] = []
    for name in names:
        f = fields[name]
        if tiers.of(f.tier).items != "tokens" or (source_dtype and f.stored_dtype != f.dtype):
            continue
        dtype = DTYPES[f.values.dtype]
        asks.append((name, _pad_bytes(pads.get(name, schema.fields[name].pad_value), dtype)))
        builds.append((name, (dtype, _HOST_DTYPES.get(dtype)), tuple(f.values.shape[1:])))
    return asks, builds


def _block(
    array: np.ndarray, at: int, shape: tuple[int, ...], dtype: tuple[torch.dtype, np.dtype | None]
) -> torch.Tensor:
    """``shape`` of ``dtype`` (torch's, and numpy's where it has one) at byte ``at`` of
    ``array``, over exactly those bytes."""
    torch_dtype, host = dtype
    nbytes = math.prod(shape) * torch_dtype.itemsize
    if nbytes == 0:
        return torch.empty(shape, dtype=torch_dtype)
    part = array[at : at + nbytes]
    if host is not None:  # numpy shapes it: one torch call
        return torch.from_numpy(part.view(host).reshape(shape))
    return torch.from_numpy(part).view(torch_dtype).view(shape)


def _as_is(t: torch.Tensor) -> torch.Tensor:
    return t


_PAD_BYTES: dict[tuple[str, type, torch.dtype], bytes] = {}


def _pad_bytes(pad: float | int | bool, dtype: torch.dtype) -> bytes:
    """``pad`` as one element of ``dtype``, in bytes (cached: ``repr`` tells -0.0 from 0.0)."""
    key = (repr(pad), type(pad), dtype)
    cached = _PAD_BYTES.get(key)
    if cached is None:
        t = torch.tensor(pad).to(dtype).reshape(1)
        cached = t.view(torch.uint8).numpy().tobytes()
        if len(_PAD_BYTES) < 4096:
            _PAD_BYTES[key] = cached
    return cached


#: Padded outputs from this size up come from the frame pool (``ReceiveBuffer``): pages already
#: faulted in by an earlier frame or decode, where a fresh allocation this large pays a page
#: fault and a page clear per 4 KiB on first write (the pool's own threshold).
POOLED_OUTPUT_MIN = 256 << 10


def _new_host_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised host tensor with a storage of exactly its bytes, for a copy that writes
    every byte (the padded layout's)."""
    nbytes = math.prod(shape) * dtype.itemsize
    if nbytes < POOLED_OUTPUT_MIN:
        return torch.empty(shape, dtype=dtype)
    pooled = torch.frombuffer(_native.ReceiveBuffer(nbytes), dtype=torch.uint8, count=nbytes)
    return pooled.view(dtype).view(shape)


def _padded(
    values: torch.Tensor,
    offsets: torch.Tensor,
    lengths: torch.Tensor,
    pad: float | int | bool,
    width: int | None = None,
) -> torch.Tensor:
    rows = lengths.shape[0]
    if width is None:
        width = int(lengths.max()) if rows else 0
    if values.device.type != "cpu":
        return _padded_by_torch(values, lengths, pad, width)  # pad_rows reads host memory
    out = _new_host_tensor((rows, width, *values.shape[1:]), values.dtype)
    pad_bytes = _pad_bytes(pad, values.dtype)
    _native.pad_rows(values, offsets, out, pad_bytes)
    return out
