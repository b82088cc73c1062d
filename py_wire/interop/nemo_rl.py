"""NeMo-RL: a ``BatchedDataDict`` to a frame and back.

``to_frame(batch, "nemo_rl/qwen2_5_vl")`` encodes NeMo-RL's train data as it is: padded
``[B, L]`` per-token tensors cut by ``input_lengths``, ``PackedTensor`` values (with their
dedup CSR: a GRPO group's images are stored once), dense per-sample tensors. A key the schema
lacks raises (never dropped). ``from_frame(frame)`` gives a dict in NeMo-RL's shapes: per-token
fields padded ``[B, L]`` (the schema's pad values, ``L`` the source's padded width, or the
longest row rounded up to ``pad_to_multiple_of``, or ``pad_to_seqlen``), ``advantages``
broadcast into the padding as NeMo-RL's ``advantages.expand(mask.shape)`` leaves them (each
row's value, read from its first token), ``input_lengths``, and packed fields as NeMo-RL's own
``PackedTensor`` class when ``nemo_rl`` is importable (built over the frame's views, with its
dedup CSR when rows share segments), py_wire's otherwise. ``iter_micro_batches(frame, n)``
gives ``BatchedDataDict.make_microbatch_iterator(n)``'s micro-batches, in the same shapes
(``per_micro_batch_width=True``: each narrowed to its own longest row, as NeMo-RL's dynamic
batching does). ``get(keys, partition_id, stage=...)`` and ``get_by_meta(meta, ...)`` are
NeMo-RL's TransferQueue fetch (its ``materialize``) over groups or samples that
:func:`py_wire.interop.transfer_queue.put` stored: padded to the longest row fetched (or
``pad_to_seqlen``), in NeMo-RL's classes; ``put`` is the producer's side. NeMo-RL's
``PackedTensor`` is read here and only here (:func:`from_nemo_packed`, :func:`from_nemo`):
the core takes py_wire's :class:`~py_wire.PackedTensor`.
"""

from __future__ import annotations

import itertools
import json
import uuid
import warnings
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import (
    BatchError,
    Frame,
    FrameError,
    PackedTensor,
    Schema,
    WireError,
    decode,
    encode,
    load_schema,
)
from py_wire.adapters import (
    ID_LEN,
    MAX_PAD_MULTIPLE,
    Groups,
    Writable,
    as_frame,
    batch_mapping,
    fill_padding_with_first_token,
    flag,
    names,
    optional_count,
    padded_cells_backed,
    tier_items,
    with_context,
)
from py_wire.adapters import items as items_arg
from py_wire.interop import transfer_queue as ptq
from py_wire.trainer import MicroBatches

__all__ = [
    "batched_data_dict_class",
    "from_frame",
    "from_nemo",
    "from_nemo_packed",
    "get",
    "get_by_meta",
    "iter_micro_batches",
    "nemo_packed_class",
    "put",
    "to_frame",
]


def batched_data_dict_class() -> type | None:
    """NeMo-RL's ``BatchedDataDict`` class, or None when ``nemo_rl`` is not importable."""
    try:
        from nemo_rl.distributed.batched_data_dict import (  # type: ignore[import-not-found]
            BatchedDataDict,
        )
    except ImportError:
        return None
    return BatchedDataDict  # type: ignore[no-any-return]  # untyped without nemo_rl installed


def nemo_packed_class() -> type | None:
    """NeMo-RL's ``PackedTensor`` class, or None when ``nemo_rl`` is not importable."""
    try:
        from nemo_rl.data.multimodal_utils import (  # type: ignore[import-not-found]
            PackedTensor as NemoPacked,
        )
    except ImportError:
        return None
    return NemoPacked  # type: ignore[no-any-return]  # untyped without nemo_rl installed


#: Frame metadata: the padded width of the source's per-token tensors, restored by from_frame.
PADDED_WIDTH_KEY = "nemo_rl.padded_width"

#: Frame metadata: a shard's micro-batch plan, the attributes NeMo-RL's
#: ``shard_by_batch_size`` sets for its micro-batch iterators (dynamic batching, sequence
#: packing), as JSON with the row count it describes; restored by from_frame.
PLAN_KEY = "nemo_rl.micro_batch_plan"

#: The ``BatchedDataDict`` attributes of a micro-batch plan.
PLAN_ATTRIBUTES = ("micro_batch_indices", "micro_batch_lengths", "elem_counts_per_gb")


def to_frame(
    batched_data_dict: Mapping[str, Any], schema: Schema | str | Path, stage: str | None = None
) -> Frame:
    """Encode a ``BatchedDataDict`` (any mapping) with no edits to it. The padded width of its
    ``[B, L]`` per-token tensors (``L``, often a multiple NeMo-RL chose) goes into the frame's
    metadata, so that :func:`from_frame` gives back ``[B, L]``, not ``[B, longest row]``, and
    so does the micro-batch plan ``shard_by_batch_size`` left on a shard (``PLAN_KEY``)."""
    schema = load_schema(schema)
    batch = from_nemo(batched_data_dict)
    width = _padded_width(batch, schema)
    metadata = {} if width is None else {PADDED_WIDTH_KEY: str(width)}
    plan = _plan_of(batched_data_dict)
    if plan is not None:
        metadata[PLAN_KEY] = plan
    return encode(batch, schema, stage=stage, metadata=metadata or None)


def _plan_of(batched_data_dict: Any) -> str | None:
    """The micro-batch plan ``shard_by_batch_size`` left on a shard, as JSON (None: none)."""
    plan = {a: getattr(batched_data_dict, a, None) for a in PLAN_ATTRIBUTES}
    if all(v is None for v in plan.values()):
        return None
    try:
        rows = len(batched_data_dict.get(next(iter(batched_data_dict)))) if batched_data_dict else 0
        return json.dumps({"rows": rows, **plan})
    except (TypeError, ValueError) as err:
        raise with_context(
            BatchError(
                f"the batch's micro-batch plan ({', '.join(PLAN_ATTRIBUTES)}) is not "
                f"lists of ints: {err}"
            ),
            field="micro_batch_indices",
        ) from None


def _restore_plan(out: Any, frame: Frame) -> None:
    """The micro-batch plan :func:`to_frame` recorded, set on NeMo-RL's ``BatchedDataDict``
    again when it describes this frame's rows (a frame whose rows were taken or joined after
    ``to_frame`` has lost the shard's plan: a warning says so)."""
    text = frame.metadata.get(PLAN_KEY)
    if text is None or type(out) is dict:  # no BatchedDataDict to hold a plan
        return
    plan = json.loads(text)
    if not isinstance(plan, dict) or plan.get("rows") != frame.num_rows:
        warnings.warn(
            f"the frame's micro-batch plan ({PLAN_KEY}) describes {plan.get('rows')!r:.20} rows, "
            f"the frame holds {frame.num_rows} (rows taken after to_frame?): not restored",
            stacklevel=3,
        )
        return
    for attribute in PLAN_ATTRIBUTES:
        setattr(out, attribute, plan.get(attribute))


def _padded_width(batch: Mapping[str, Any], schema: Schema) -> int | None:
    """``L`` of the first padded ``[B, L, ...]`` per-token tensor, if any."""
    for name, field in schema.fields.items():
        value = batch.get(name)
        if tier_items(field.tier) != "tokens" or not isinstance(value, torch.Tensor):
            continue
        if not value.is_nested and value.dim() >= 2:
            return int(value.shape[1])
    return None


#: Each row's token count in every ``nemo_rl/*`` schema (its ``lengths_field``; NeMo-RL's name).
LENGTHS_KEY = "input_lengths"

#: The per-token field NeMo-RL fills on padding with each row's value (GRPO's advantage
#: estimators return ``advantages.unsqueeze(-1).expand(mask.shape)``), not with a pad value.
BROADCAST_FIELDS = ("advantages",)


def from_frame(
    frame: Any,
    stage: str | None = None,
    *,
    pad_to_multiple_of: int | None = None,
    pad_to_seqlen: int | None = None,
    writable: Writable = "auto",
) -> Any:
    """The frame's fields as NeMo-RL holds them (see the module docstring): NeMo-RL's
    ``BatchedDataDict`` where ``nemo_rl`` is importable, a dict otherwise. Padded per-token
    fields are new tensors; packed and scalar fields are views, under :func:`py_wire.decode`'s
    ``writable`` policy (the default copies a read-only source, such as a Ray object, once).

    The padded width is the source's (recorded by :func:`to_frame`, kept by frame operations:
    a shard keeps the batch's width, as ``shard_by_batch_size`` does), else the longest row;
    ``pad_to_multiple_of`` rounds the longest row up instead; ``pad_to_seqlen`` pads every row
    to exactly that width (a :class:`WireError` when a row is longer). Valid and padded cells
    are NeMo-RL's: the schema's pad values, ``advantages`` broadcast (see
    :data:`BROADCAST_FIELDS`)."""
    frame = as_frame(frame)
    out = decode(
        frame,
        stage=stage,
        layout="padded",
        pad_to_multiple_of=_batch_width(frame, pad_to_multiple_of, pad_to_seqlen),
        writable=writable,
    )
    _broadcast_into_padding(out, _row_lengths(frame))
    batch = _as_nemo_batch(out)
    _restore_plan(batch, frame)
    return batch


def put(
    batched_data_dict: Mapping[str, Any],
    schema: Schema | str | Path,
    keys: Sequence[str],
    partition_id: str,
    **options: Any,
) -> Any:
    """NeMo-RL's producer side of TransferQueue: :func:`from_nemo`, then
    :func:`py_wire.interop.transfer_queue.put` with ``options`` (``group_size``, ``tags``,
    ``stage``)."""
    return ptq.put(from_nemo(batched_data_dict), schema, keys, partition_id, **options)


def get(
    keys: Any,
    partition_id: str,
    *,
    stage: str | None = None,
    fields: Any = None,
    pad_to_multiple_of: int | None = None,
    pad_to_seqlen: int | None = None,
    writable: Writable = "auto",
) -> Any:
    """NeMo-RL's fetch from TransferQueue in one call: the rows of ``keys`` stored by
    :func:`py_wire.interop.transfer_queue.put` (and written back), as NeMo-RL's ``materialize``
    gives them: per-token fields padded to the longest row fetched (``pad_to_seqlen``: exactly
    that width, as the workers' ``_fetch`` asks; ``pad_to_multiple_of``: the longest rounded
    up), NeMo-RL's pad values and ``advantages`` broadcast into the padding, packed fields as
    NeMo-RL's ``PackedTensor`` and the whole a ``BatchedDataDict`` where ``nemo_rl`` is
    importable (a dict of py_wire's otherwise). The media column is read only when the stage
    or ``fields`` want media."""
    multiple = _fetch_width(pad_to_multiple_of, pad_to_seqlen)
    wanted = None if fields is None else names("fields", fields)
    extra: list[str] = []
    if (
        wanted is not None
        and LENGTHS_KEY not in wanted
        and any(f in wanted for f in BROADCAST_FIELDS)  # broadcast by each row's length
    ):
        extra = [LENGTHS_KEY]
    out = ptq.get(
        keys,
        partition_id,
        stage=stage,
        fields=None if wanted is None else wanted + extra,
        layout="padded",
        pad_to_multiple_of=multiple,
        writable=writable,
    )
    return _nemo_fetch(out, extra, pad_to_seqlen)


def get_by_meta(
    meta: Any,
    *,
    stage: str | None = None,
    fields: Any = None,
    pad_to_multiple_of: int | None = None,
    pad_to_seqlen: int | None = None,
    writable: Writable = "auto",
) -> Any:
    """:func:`get` for the samples of a meta: NeMo-RL's ``KVBatchMeta`` (``sample_ids``,
    ``partition_id``), or TQ's ``KVBatchMeta`` / ``BatchMeta`` as its samplers hand out."""
    keys, partition_id = ptq.meta_keys(meta)
    return get(
        keys,
        partition_id,
        stage=stage,
        fields=fields,
        pad_to_multiple_of=pad_to_multiple_of,
        pad_to_seqlen=pad_to_seqlen,
        writable=writable,
    )


def _fetch_width(pad_to_multiple_of: int | None, pad_to_seqlen: int | None) -> int | None:
    pad_to_seqlen = optional_count(
        "pad_to_seqlen", pad_to_seqlen, minimum=1, maximum=MAX_PAD_MULTIPLE
    )
    if pad_to_seqlen is not None and pad_to_multiple_of is not None:
        raise WireError("pass pad_to_seqlen or pad_to_multiple_of, not both")
    return pad_to_seqlen if pad_to_seqlen is not None else pad_to_multiple_of


def _nemo_fetch(out: dict[str, Any], extra: list[str], pad_to_seqlen: int | None) -> Any:
    """A padded fetch made NeMo-RL's: the width checked against ``pad_to_seqlen``,
    ``advantages`` broadcast by the lengths field, the fields fetched only for that dropped."""
    value = out.get(LENGTHS_KEY)
    lengths = value.to(torch.int64) if isinstance(value, torch.Tensor) else None
    longest = int(lengths.max()) if lengths is not None and lengths.numel() else 0
    if pad_to_seqlen is not None:
        _check_fits(pad_to_seqlen, longest)
    if lengths is not None:
        _broadcast_into_padding(out, lengths)
    for name in extra:
        out.pop(name, None)
    return _as_nemo_batch(out)


def _as_nemo_batch(out: dict[str, Any]) -> Any:
    """Packed fields as NeMo-RL's ``PackedTensor``, the whole as its ``BatchedDataDict``, where
    ``nemo_rl`` is importable; ``out`` as it is otherwise."""
    nemo = nemo_packed_class()
    for name, value in out.items():
        if isinstance(value, PackedTensor) and nemo is not None:
            out[name] = _as_nemo(value, nemo)
        elif isinstance(value, list):  # a field with an encoding: one object a row
            out[name] = _object_array(value)
    cls = batched_data_dict_class()
    return out if cls is None else cls(out)


def _object_array(values: list[Any]) -> np.ndarray:
    """``values`` as NeMo-RL's data plane holds object columns (``message_log``, ``content``):
    ``np.ndarray(dtype=object)``, one entry a row, each the very object decoded (filled one by
    one: ``np.asarray`` would turn rows of equal-length lists into a 2-d array)."""
    out = np.empty(len(values), dtype=object)
    for i, value in enumerate(values):
        out[i] = value
    return out


def iter_micro_batches(
    frame: Any,
    groups: Groups,
    stage: str | None = None,
    *,
    per_micro_batch_width: bool = False,
    pad_to_multiple_of: int | None = None,
    pad_to_seqlen: int | None = None,
    writable: Writable = "auto",
) -> Iterator[Any]:
    """NeMo-RL's micro-batches of the frame: ``BatchedDataDict.make_microbatch_iterator(n)``
    for ``groups=n`` (or row groups, as :func:`py_wire.trainer.iter_micro_batches` takes),
    each a dict as :func:`from_frame` gives for those rows: by default every micro-batch is
    ``[rows, L]`` with the batch's ``L`` (bit for bit NeMo-RL's ``slice`` of
    ``from_frame``'s batch). ``per_micro_batch_width=True`` narrows each micro-batch to its
    own longest row (rounded up to ``pad_to_multiple_of``), as NeMo-RL's dynamic batching
    (``make_microbatch_iterator_with_dynamic_shapes``) does: less compute per step on batches
    whose lengths vary. The frame is decoded once; each micro-batch holds its own bytes."""
    flag("per_micro_batch_width", per_micro_batch_width)
    frame = as_frame(frame)
    width = _batch_width(frame, pad_to_multiple_of, pad_to_seqlen)
    options: dict[str, Any] = {"stage": stage, "layout": "padded", "writable": writable}
    if width is not None:
        options["pad_to_multiple_of"] = width
    nemo = nemo_packed_class()
    batches = MicroBatches(
        frame,
        groups,
        options,
        narrow=per_micro_batch_width,
        narrow_multiple=1 if pad_to_multiple_of is None else pad_to_multiple_of,
        # NeMo-RL's PackedTensor built once over the batch (each segment a tensor of its own
        # bytes); each micro-batch is its own slice of it, as make_microbatch_iterator's.
        packed_as=None if nemo is None else lambda value: _as_nemo(value, nemo),
    )
    _broadcast_into_padding(batches.decoded, _row_lengths(frame))
    for mb in batches:
        yield _as_nemo_batch(mb)


def _batch_width(
    frame: Frame, pad_to_multiple_of: int | None, pad_to_seqlen: int | None
) -> int | None:
    """The ``pad_to_multiple_of`` that gives NeMo-RL's padded width: ``pad_to_seqlen``, else
    the multiple asked for, else the recorded width (None: the longest row)."""
    width = _fetch_width(pad_to_multiple_of, pad_to_seqlen)
    if pad_to_seqlen is None:
        return width if width is not None else _recorded_width(frame)
    assert width is not None
    _check_fits(width, _longest_row(frame))
    return width


def _check_fits(pad_to_seqlen: int, longest: int) -> None:
    if longest > pad_to_seqlen:
        raise WireError(f"pad_to_seqlen={pad_to_seqlen}: the longest row has {longest} tokens")


def _row_lengths(frame: Frame) -> torch.Tensor | None:
    """Each row's tokens, from the frame's sequence offsets (None: no sequence field)."""
    seq = frame.layout.seq_offsets
    if seq is None:
        return None
    offsets = np.frombuffer(memoryview(frame), np.int64, seq.nbytes // 8, seq.offset)
    return torch.from_numpy(np.diff(offsets))


def _broadcast_into_padding(out: dict[str, Any], row_lengths: torch.Tensor | None) -> None:
    """Each :data:`BROADCAST_FIELDS` field's padded cells set to its row's first value, in
    place (the tensors are the padded layout's own copies). A row without tokens keeps 0."""
    if row_lengths is None:
        return
    for name in BROADCAST_FIELDS:
        value = out.get(name)
        if not isinstance(value, torch.Tensor) or value.dim() != 2 or value.shape[1] == 0:
            continue
        if value.device.type == "cpu" and value.is_contiguous():
            # The codec writes the padding cells only, in place: no pass over the valid ones.
            fill_padding_with_first_token(value, row_lengths)
            continue
        lengths = row_lengths.to(value.device)
        # One elementwise pass over the cells, in place (where reads each cell before it writes).
        padding = torch.arange(value.shape[1], device=value.device) >= lengths[:, None]
        padding &= (lengths > 0)[:, None]
        torch.where(padding, value[:, :1], value, out=value)


def _recorded_width(frame: Frame) -> int | None:
    """The width to_frame recorded, when it still holds every row (else the longest row)."""
    recorded = frame.metadata.get(PADDED_WIDTH_KEY)
    if recorded is None or not recorded.isdigit():
        return None
    width = int(recorded)
    seq = frame.layout.seq_offsets
    if width < 1 or width > MAX_PAD_MULTIPLE or seq is None:
        return None
    longest = _longest_row(frame)
    if longest > width:
        return None
    # A recorded width is hostile input: it may not size more cells than the frame backs.
    if not padded_cells_backed(frame.num_rows * width, len(frame)):
        raise with_context(
            FrameError(
                f"frame metadata {PADDED_WIDTH_KEY!r} is {width}: padding {frame.num_rows} rows "
                f"to it makes {frame.num_rows * width} cells, more than the frame's "
                f"{len(frame)} bytes justify (damaged or hostile metadata?)"
            ),
            field=PADDED_WIDTH_KEY,
            found=width,
        )
    # Every row fits the recorded width, so rounding up to a multiple of it gives exactly it.
    return width


def _longest_row(frame: Frame) -> int:
    seq = frame.layout.seq_offsets
    if seq is None:
        return 0
    offsets = np.frombuffer(memoryview(frame), np.int64, seq.nbytes // 8, seq.offset)
    return int(np.diff(offsets).max()) if offsets.size > 1 else 0


def _as_nemo(value: PackedTensor, nemo: type) -> Any:
    return nemo(**_nemo_state(value))


def _nemo_state(value: PackedTensor) -> dict[str, Any]:
    """The constructor arguments of NeMo-RL's ``PackedTensor`` holding ``value``'s rows (views,
    no copy): its legacy form (one tensor or ``None`` per row) when every row has at most one
    segment, none is shared and none has an identity, else its CSR form (``tensors`` the
    physical segments, ``_row_offsets`` over ``_segment_indices``). Segments with an identity
    (``value.segment_ids``: what the frame stores, NeMo-RL's provenance when it was encoded)
    keep it as their ``_segment_provenance``, so NeMo-RL's gather of two decoded shards or
    fetches stores a shared segment once; rows that share segments without one get a new id
    per segment (deduplication on)."""
    segments, offsets, refs = value.csr()
    ids = value.segment_ids
    counts = [b - a for a, b in itertools.pairwise(offsets)]
    shared = len(segments) < len(refs)
    state: dict[str, Any] = {"dim_to_pack": value.dim_to_pack}
    if ids is None and not shared and all(c <= 1 for c in counts):
        state["tensors"] = [
            segments[refs[a]] if b > a else None for a, b in itertools.pairwise(offsets)
        ]
        return state
    state.update(tensors=segments, _row_offsets=offsets, _segment_indices=refs)
    if ids is not None:
        state["_segment_provenance"] = [uuid.uuid4().bytes if i is None else i for i in ids]
    elif shared:
        state["_segment_provenance"] = [uuid.uuid4().bytes for _ in segments]
    return state


def from_nemo_packed(value: Any, name: str = "value") -> PackedTensor:
    """NeMo-RL's ``PackedTensor`` (or any object with its attributes) as py_wire's, over the
    same tensors (no copy). Without its dedup tables each entry of ``tensors`` is a row
    (``None``: no media); with ``_row_offsets`` and ``_segment_indices`` (both set),
    ``tensors`` are physical segments and logical row ``r`` is
    ``[tensors[i] for i in _segment_indices[_row_offsets[r]:_row_offsets[r + 1]]]`` (a ``None``
    physical entry is no media). ``len(value)`` must agree. Errors name ``name``."""
    if not (hasattr(value, "tensors") and hasattr(value, "dim_to_pack")):
        raise TypeError(
            f"{name}: not a NeMo-RL PackedTensor (no tensors and dim_to_pack): "
            f"{type(value).__name__}"
        )
    tensors = value.tensors
    if isinstance(tensors, torch.Tensor):
        tensors = [tensors]
    tensors = items_arg(f"{name}.tensors", tensors)
    offsets = getattr(value, "_row_offsets", None)
    indices = getattr(value, "_segment_indices", None)
    provenance = _provenance(value, len(tensors), name)
    if (offsets is None) != (indices is None):
        raise BatchError(
            f"{name}: has only one of _row_offsets and _segment_indices; both or neither"
        )
    try:
        rows = len(value)
    except TypeError:
        rows = None
    try:
        if offsets is None:
            if rows is not None and rows != len(tensors):
                raise BatchError(
                    f"{name}: len() is {rows} but it holds {len(tensors)} rows in .tensors"
                )
            if provenance is None:
                return PackedTensor(tensors, value.dim_to_pack)
            present = [i for i, t in enumerate(tensors) if t is not None]
            offs, refs, at = [0], [], 0
            for t in tensors:
                at += t is not None
                refs.extend([] if t is None else [at - 1])
                offs.append(len(refs))
            return PackedTensor.from_csr(
                [tensors[i] for i in present],
                offs,
                refs,
                value.dim_to_pack,
                [provenance[i] for i in present],
            )
        if rows is None:
            raise BatchError(f"{name}: a packed value with _row_offsets must define len()")
        physical = [t for t in tensors if t is not None]
        where: list[int | None] = []
        k = 0
        for t in tensors:
            where.append(None if t is None else k)
            k += t is not None
        offs = [int(o) for o in items_arg(f"{name}._row_offsets", offsets)]
        idx = [int(i) for i in items_arg(f"{name}._segment_indices", indices)]
        if len(offs) - 1 != rows:
            raise BatchError(
                f"{name}: len() is {rows} but its _row_offsets describe {len(offs) - 1} rows"
            )
        bad = [i for i in idx if not 0 <= i < len(tensors)]
        if bad:
            raise BatchError(
                f"{name}: _segment_indices names segment {bad[0]} of {len(tensors)} tensors"
            )
        out_offsets, refs = [0], list[int]()
        for r, (lo, hi) in enumerate(itertools.pairwise(offs)):
            if not 0 <= lo <= hi <= len(idx):
                raise BatchError(
                    f"{name}: row {r}: _row_offsets [{lo}, {hi}] decrease or pass the "
                    f"{len(idx)} segment indices"
                )
            refs.extend(w for i in idx[lo:hi] if (w := where[i]) is not None)
            out_offsets.append(len(refs))
        if offs[0] != 0 or offs[-1] != len(idx):
            raise BatchError(
                f"{name}: _row_offsets must run from 0 to the {len(idx)} segment indices, "
                f"got {offs[0]}..{offs[-1]}"
            )
        physical_ids = None
        if provenance is not None:
            physical_ids = [p for t, p in zip(tensors, provenance, strict=True) if t is not None]
        return PackedTensor.from_csr(physical, out_offsets, refs, value.dim_to_pack, physical_ids)
    except WireError as e:
        raise BatchError(f"{name}: {e}") from None


def _provenance(value: Any, count: int, name: str) -> list[bytes] | None:
    """NeMo-RL's ``_segment_provenance`` (one id per entry of ``tensors``) as segment ids: each
    must be 16 bytes (``uuid4().bytes``, what NeMo-RL mints), so it travels in the frame as it
    is and comes back from ``to_nemo`` unchanged."""
    provenance = getattr(value, "_segment_provenance", None)
    if provenance is None:
        return None
    ids = items_arg(f"{name}._segment_provenance", provenance)
    if len(ids) != count:
        raise BatchError(f"{name}: _segment_provenance has {len(ids)} entries for {count} tensors")
    for i, p in enumerate(ids):
        if not isinstance(p, bytes) or len(p) != ID_LEN:
            found = f"{len(p)} bytes" if isinstance(p, bytes) else type(p).__name__
            raise BatchError(
                f"{name}: _segment_provenance[{i}] is {found}; py_wire carries NeMo-RL's "
                f"{ID_LEN}-byte provenance (uuid4().bytes)"
            )
    return list(ids)


def from_nemo(batched_data_dict: Mapping[str, Any]) -> dict[str, Any]:
    """A ``BatchedDataDict`` (any mapping) with NeMo-RL's ``PackedTensor`` values as py_wire's
    (same tensors, no copy), for :func:`py_wire.encode` and
    :func:`py_wire.interop.transfer_queue.put`; other values as they are."""
    batch = batch_mapping("batched_data_dict", batched_data_dict)
    return {
        k: from_nemo_packed(v, f"field {k!r}")
        if not isinstance(v, PackedTensor) and hasattr(v, "tensors") and hasattr(v, "dim_to_pack")
        else v
        for k, v in batch.items()
    }
