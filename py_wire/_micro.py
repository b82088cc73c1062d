"""Micro-batches of one decoded frame: the frame is decoded once, then each micro-batch is every
field cut to its rows at O(fields) cost, over the same memory (no payload copy), each tensor a
storage of exactly its own bytes."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import torch

from py_wire import _tiers as tiers
from py_wire._args import flag
from py_wire._decode import checked_schema, decode, decode_fields
from py_wire._jagged import jagged, jagged_values
from py_wire._native import Frame, WireError
from py_wire._ops import take_rows
from py_wire._packed import PackedTensor
from py_wire._padding import ATTENTION_MASK, round_up
from py_wire._rows import row_index_error, row_range
from py_wire._source import as_frame
from py_wire._staging import Stager, checked_device, checked_pin_memory, staged
from py_wire._storage import RowCutter

Groups = int | Sequence[range | Sequence[int] | Any]

#: A padded micro-batch narrower than the batch stays a view of its rows (which pickles with
#: the rows' full width) while the batch is at most this many times wider; past that it is a
#: copy of its own cells. Either way it carries <= 1.2x its own bytes, never another row's.
NARROW_VIEW = 1.2


def iter_micro_batches(
    data: Any,
    groups: Groups,
    *,
    device: str | torch.device | None = None,
    pin_memory: bool = False,
    pad_on_device: bool = False,
    **decode_options: Any,
) -> MicroBatches:
    """Micro-batches of the frame ``data``, each a dict like :func:`py_wire.decode`'s.

    ``groups`` is a row count (fixed-size micro-batches in row order, the last one shorter
    when the rows do not divide: NeMo-RL's ``make_microbatch_iterator``, verl's
    ``DataProto.split``), or a list of row groups: ranges, lists of row indices (such as
    :func:`py_wire.trainer.micro_batches` returns for a token budget) or
    :class:`py_wire.trainer.Bin` from :func:`py_wire.trainer.pack_sequences`.
    ``decode_options`` are :func:`py_wire.decode`'s (``layout``, ``stage``,
    ``pad_to_multiple_of``, ``attention_mask``, ``writable``, ...).

    The frame is decoded once, here (the whole batch is :attr:`MicroBatches.decoded`);
    iterating then narrows every field to each group's rows: views, O(fields) per
    micro-batch, no payload copy. With ``layout="padded"`` each micro-batch's per-token fields
    and attention mask are narrowed to its own longest row (rounded up to
    ``pad_to_multiple_of``), as NeMo-RL's dynamic batching does. A group of rows in any other
    order than contiguous and ascending is gathered (:func:`py_wire.take_rows`: a copy of
    those rows only) and decoded with the same options.

    ``device="cuda"`` hands out each micro-batch on that device, staged while the trainer
    computes: the micro-batch is packed into one host buffer (page-locked with
    ``pin_memory=True``, which needs CUDA), copied in one ``non_blocking`` transfer on a side
    stream, and its tensors are views of one device buffer; the next micro-batch's copy is
    issued before the current one is handed out, and the consumer's stream waits on the copy's
    event, never the host (see :mod:`py_wire._staging`).

    ``pad_on_device=True`` (with ``device=`` and ``layout="padded"``) moves the jagged bytes
    instead: the frame is copied to ``device`` once (page-locked first with ``pin_memory=True``;
    fewer bytes than the padded batch whenever rows differ in length) and its per-token fields
    are padded there, by torch (one fill and one ``index_copy_`` a field, bit for bit what the
    host's padding writes); micro-batches are then views of those device tensors.
    ``device="cpu"`` runs the same torch ops on the host.
    """
    return MicroBatches(
        data,
        groups,
        decode_options,
        device=device,
        pin_memory=pin_memory,
        pad_on_device=pad_on_device,
    )


class MicroBatches:
    """The micro-batches :func:`iter_micro_batches` returns: iterable (again and again), with
    ``len()`` and the whole decoded batch as :attr:`decoded`.

    Each micro-batch is built from its own rows' bytes: dense fields and jagged values are cut
    with :class:`py_wire._storage.RowCutter` (a tensor over exactly those rows' bytes), jagged
    fields are rebuilt from those values and the rows' own offsets, packed fields keep only the
    rows' segments. So a micro-batch pickles, saves or moves as its own bytes, never the frame.
    """

    def __init__(
        self,
        data: Any,
        groups: Groups,
        options: dict[str, Any],
        *,
        narrow: bool = True,
        narrow_multiple: int | None = None,
        device: str | torch.device | None = None,
        pin_memory: bool = False,
        packed_as: Callable[[PackedTensor], Any] | None = None,
        pad_on_device: bool = False,
    ) -> None:
        """``packed_as`` (NeMo-RL's interop) converts each packed field of the whole batch once,
        to a value whose ``slice(list(range(a, b)))`` gives rows ``a..b`` (NeMo-RL's own
        ``PackedTensor``, as ``BatchedDataDict.slice`` calls it): micro-batches then slice
        that, not py_wire's field."""
        if "rows" in options:
            raise WireError("iter_micro_batches: pass row groups as `groups`, not rows=")
        self._stager: Stager | None = None
        self._on_device: tuple[torch.device, bool] | None = None
        if flag("pad_on_device", pad_on_device):
            if device is None or options.get("layout") != "padded":
                raise WireError(
                    "pad_on_device=True pads on a device: pass device= and layout='padded'"
                )
            self._on_device = (checked_device(device), checked_pin_memory(pin_memory))
        elif device is not None:
            self._stager = Stager(device, pin_memory)
        elif flag("pin_memory", pin_memory):
            raise WireError("pin_memory=True stages micro-batches for a device: pass device=")
        frame = as_frame(data)
        self._plan = _plan(groups, frame.num_rows)
        #: Fixed-size row groups from row 0 (``groups=n``): cut in one pass per field.
        self._size = groups if isinstance(groups, int) else None
        self._frame = frame
        self._options = options
        #: The whole batch, decoded once with the given options.
        self.decoded: dict[str, Any] = self._decode(frame)
        schema = checked_schema(frame)
        self._padded = options.get("layout") == "padded"
        # Each micro-batch's width: its longest row rounded up to this multiple (the batch's own
        # pad_to_multiple_of unless the caller pads the batch to a width of its own).
        self._multiple = (
            options.get("pad_to_multiple_of") if narrow_multiple is None else narrow_multiple
        )
        self._narrow = narrow
        per_token = {n for n, f in schema.fields.items() if tiers.items(f.tier) == "tokens"}
        self._offsets: list[int] | None = None
        self._lengths: list[int] | None = None
        self._offsets_tensor: torch.Tensor | None = None
        seq = frame.layout.seq_offsets
        if seq is not None:
            table = np.frombuffer(memoryview(frame), np.int64, seq.nbytes // 8, seq.offset)
            self._offsets = table.tolist()
            self._lengths = np.diff(table).tolist()
            self._offsets_tensor = torch.tensor(table)
        # What each micro-batch does per field, decided once: the loop in _window is then one
        # cut (and, for jagged fields, one constructor call) per field.
        self._fields: list[tuple[str, str, Any]] = []
        for name, value in self.decoded.items():
            if isinstance(value, PackedTensor) and packed_as is not None:
                self.decoded[name] = converted = packed_as(value)
                self._fields.append((name, "converted", converted))
            elif isinstance(value, PackedTensor):
                self._fields.append((name, "packed", value))
            elif isinstance(value, torch.Tensor) and value.is_nested:
                self._fields.append((name, "nested", RowCutter(jagged_values(value))))
            elif isinstance(value, torch.Tensor) and value.dim() > 0:
                narrowed = name == ATTENTION_MASK or (self._padded and name in per_token)
                kind = "narrowed" if narrowed and narrow and value.dim() > 1 else "rows"
                self._fields.append((name, kind, (value, RowCutter(value))))
            elif isinstance(value, list):
                self._fields.append((name, "list", value))
            else:
                self._fields.append((name, "whole", value))
        for _, kind, value in self._fields:
            if kind == "packed" and value._frame is not None:
                value._frame._tables()  # Python tables once, shared by every row range

    def _decode(self, frame: Frame) -> dict[str, Any]:
        if self._on_device is None:
            return decode(frame, **self._options)
        return padded_on_device(frame, *self._on_device, self._options)

    def __len__(self) -> int:
        return len(self._plan)

    def __iter__(self) -> Iterator[dict[str, Any]]:
        if self._stager is None:
            return self._host_batches()
        return staged(self._host_batches(), self._stager)

    def _host_batches(self) -> Iterator[dict[str, Any]]:
        columns = self._columns()
        names = [name for name, _, _ in self._fields]
        if len(columns) == len(names):  # every field cut in one pass: no Python loop per cell
            for values in zip(*(columns[name] for name in names), strict=True):
                yield dict(zip(names, values, strict=True))
            return
        for i, group in enumerate(self._plan):
            if isinstance(group, list):
                yield self._decode(take_rows(self._frame, group))
            else:
                yield self._window(group.start, group.stop, i, columns)

    def _widths(self) -> list[int] | None:
        """Each row range's narrowed width (its longest row, rounded up), None when micro-batches
        keep the batch's width; a list-of-rows group gets 0 (it is decoded on its own)."""
        lengths = self._lengths
        if lengths is None or not self._narrow:
            return None
        if not (self._padded or ATTENTION_MASK in self.decoded):
            return None
        return [
            round_up(max(lengths[g.start : g.stop], default=0), self._multiple)
            if isinstance(g, range)
            else 0
            for g in self._plan
        ]

    def _columns(self) -> dict[str, list[Any]]:
        """Each field's value in every micro-batch, for the fields that can be cut for all row
        ranges in one pass (every group a row range): dense rows (and padded fields no
        micro-batch narrows) through :meth:`RowCutter.ranges`, lists and whole values. Jagged,
        packed and narrowed fields are left to :meth:`_window`."""
        plan = self._plan
        if not plan or any(isinstance(g, list) for g in plan):
            return {}
        bounds = [(g.start, g.stop) for g in plan if isinstance(g, range)]
        widths = self._widths()
        columns: dict[str, list[Any]] = {}
        for name, kind, value in self._fields:
            if kind == "narrowed":
                tensor, cutter = value
                if widths is not None and min(widths) < tensor.shape[1]:
                    continue
                columns[name] = cutter.ranges(bounds, self._size)
            elif kind == "rows":
                columns[name] = value[1].ranges(bounds, self._size)
            elif kind == "list":
                columns[name] = [value[a:b] for a, b in bounds]
            elif kind == "whole":
                columns[name] = [value] * len(bounds)
        return columns

    def _window(
        self, a: int, b: int, index: int = -1, columns: dict[str, list[Any]] | None = None
    ) -> dict[str, Any]:
        width = None
        lengths = self._lengths
        if (
            lengths is not None
            and self._narrow
            and (self._padded or ATTENTION_MASK in self.decoded)
        ):
            width = round_up(max(lengths[a:b], default=0), self._multiple)
        jagged_offsets = None
        t0 = t1 = 0
        out: dict[str, Any] = {}
        for name, kind, value in self._fields:
            column = columns.get(name) if columns else None
            if column is not None:
                out[name] = column[index]
            elif kind == "rows":
                out[name] = value[1](a, b)
            elif kind == "nested":
                if jagged_offsets is None:
                    offsets = self._offsets_tensor
                    assert offsets is not None and self._offsets is not None
                    t0, t1 = self._offsets[a], self._offsets[b]
                    # One offsets tensor per micro-batch (its own bytes): its fields share one
                    # ragged dim.
                    jagged_offsets = offsets[a : b + 1] - t0
                values = value(t0, t1)
                if jagged_offsets.device != values.device:
                    jagged_offsets = jagged_offsets.to(values.device)
                out[name] = jagged(values, jagged_offsets)
            elif kind == "narrowed":
                tensor, cutter = value
                if width is None or width >= tensor.shape[1]:
                    out[name] = cutter(a, b)
                elif width * NARROW_VIEW >= tensor.shape[1]:
                    # A view of the rows' own bytes: at most NARROW_VIEW x its cells
                    out[name] = cutter(a, b)[:, :width]
                else:  # much narrower than the batch: a copy of exactly its cells (not
                    # contiguous(): a one-row slice already is, and would keep the whole field)
                    out[name] = tensor[a:b, :width].clone(memory_format=torch.contiguous_format)
            elif kind == "packed":
                out[name] = value.slice(slice(a, b))
            elif kind == "converted":
                out[name] = value.slice(list(range(a, b)))
            elif kind == "list":
                out[name] = value[a:b]
            else:
                out[name] = value
        return out


def padded_on_device(
    frame: Frame, device: torch.device, pin_memory: bool, options: dict[str, Any]
) -> dict[str, Any]:
    """``decode(frame, layout="padded", **options)`` with the padding done on ``device``: the
    frame's bytes copied there once (from page-locked memory with ``pin_memory``), decoded as
    views of that copy (validated on the host, where the frame is), each per-token field padded
    by torch where it lies (:func:`py_wire._decode.padded_by_scatter`)."""
    unknown = set(options) - _ON_DEVICE_OPTIONS
    if unknown:
        raise WireError(
            f"pad_on_device=True takes the decode options {sorted(_ON_DEVICE_OPTIONS)}, "
            f"not {sorted(unknown)}"
        )
    with warnings.catch_warnings():
        # A read-only source is only read here: copied to the device.
        warnings.simplefilter("ignore", UserWarning)
        host = torch.frombuffer(frame, dtype=torch.uint8)
    if pin_memory:
        host = host.pin_memory()
    payload = host.to(device, non_blocking=pin_memory)
    schema = checked_schema(frame)
    stage = options.get("stage")
    keep = None if stage is None else set(schema.fields_for(stage))
    opts = {k: v for k, v in options.items() if k != "stage"}
    return decode_fields(
        frame,
        schema,
        keep,
        fill_missing=keep is not None,
        clone=False,
        payload=payload,
        torch_padding=True,
        **opts,
    )


#: The decode options :func:`padded_on_device` takes (``writable`` is moot: the device copy is
#: its own).
_ON_DEVICE_OPTIONS = {
    "layout",
    "stage",
    "source_dtype",
    "pad_to_multiple_of",
    "pad_values",
    "attention_mask",
    "writable",
}


def _plan(groups: Groups, num_rows: int) -> list[range | list[int]]:
    """Each group as a row range (contiguous, ascending) or a list of rows to gather."""
    if isinstance(groups, bool):
        raise TypeError(f"groups must be a row count or a list of row groups, not {groups!r}")
    if isinstance(groups, int):
        if groups < 1:
            raise WireError(f"groups: a micro-batch needs at least one row, got {groups}")
        return [range(a, min(a + groups, num_rows)) for a in range(0, num_rows, groups)]
    if isinstance(groups, str | bytes) or not isinstance(groups, Sequence):
        raise TypeError(
            f"groups must be a row count or a list of row groups, not {type(groups).__name__}"
        )
    plan: list[range | list[int]] = []
    for i, group in enumerate(groups):
        rows = getattr(group, "rows", group)  # a Bin
        if isinstance(rows, range | slice):
            plan.append(row_range(rows, num_rows, f"groups[{i}]"))
            continue
        if isinstance(rows, torch.Tensor):
            rows = rows.tolist()
        if isinstance(rows, str | bytes) or not isinstance(rows, Sequence):
            raise TypeError(f"groups[{i}] must be rows, not {type(rows).__name__}")
        picked = [_row(r, num_rows, i) for r in rows]
        if picked and picked == list(range(picked[0], picked[0] + len(picked))):
            plan.append(range(picked[0], picked[0] + len(picked)))
        else:
            plan.append(picked)
    return plan


def _row(r: Any, num_rows: int, group: int) -> int:
    if isinstance(r, bool) or not isinstance(r, int):
        raise TypeError(f"groups[{group}]: a row must be an int, not {r!r}")
    if not -num_rows <= r < num_rows:
        raise row_index_error(f"groups[{group}]", r, num_rows)
    return r % num_rows
