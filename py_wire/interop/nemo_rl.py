"""NeMo-RL: a ``BatchedDataDict`` to a frame and back.

``to_frame(batch, "nemo_rl/qwen2_5_vl")`` encodes NeMo-RL's train data as it is: padded
``[B, L]`` per-token tensors cut by ``input_lengths``, ``PackedTensor`` values (with their
dedup CSR: a GRPO group's images are stored once), dense per-sample tensors. A key the schema
lacks raises (never dropped). ``from_frame(frame)`` gives a dict in NeMo-RL's shapes: per-token
fields padded ``[B, L]`` (the schema's pad values, ``L`` the source's padded width, or the
longest row rounded up to ``pad_to_multiple_of``), ``input_lengths``, and packed fields as
NeMo-RL's own ``PackedTensor`` class when ``nemo_rl`` is importable (built over the frame's
views, with its dedup CSR when rows share segments), py_wire's otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire._args import batch_mapping, padded_cells_backed
from py_wire._decode import MAX_PAD_MULTIPLE, Writable, decode
from py_wire._encode import encode
from py_wire._errors import with_context
from py_wire._native import Frame, FrameError
from py_wire._packed import PackedTensor
from py_wire._schema import Schema, load_schema
from py_wire._source import as_frame


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


def to_frame(
    batched_data_dict: Mapping[str, Any], schema: Schema | str | Path, stage: str | None = None
) -> Frame:
    """Encode a ``BatchedDataDict`` (any mapping) with no edits to it. The padded width of its
    ``[B, L]`` per-token tensors (``L``, often a multiple NeMo-RL chose) goes into the frame's
    metadata, so that :func:`from_frame` gives back ``[B, L]``, not ``[B, longest row]``."""
    schema = load_schema(schema)
    batch = dict(batch_mapping("batched_data_dict", batched_data_dict))
    width = _padded_width(batch, schema)
    metadata = None if width is None else {PADDED_WIDTH_KEY: str(width)}
    return encode(batch, schema, stage=stage, metadata=metadata)


def _padded_width(batch: Mapping[str, Any], schema: Schema) -> int | None:
    """``L`` of the first padded ``[B, L, ...]`` per-token tensor, if any."""
    for name, field in schema.fields.items():
        value = batch.get(name)
        if field.tier != "per_token" or not isinstance(value, torch.Tensor):
            continue
        if not value.is_nested and value.dim() >= 2:
            return int(value.shape[1])
    return None


def from_frame(
    frame: Any,
    stage: str | None = None,
    *,
    pad_to_multiple_of: int | None = None,
    writable: Writable = "auto",
) -> dict[str, Any]:
    """The frame's fields as NeMo-RL holds them (see the module docstring). Wrap the result
    in ``BatchedDataDict(...)`` on the NeMo-RL side. Padded per-token fields are new tensors;
    packed and scalar fields are views, under :func:`py_wire.decode`'s ``writable`` policy
    (the default copies a read-only source, such as a Ray object, once).

    The padded width is the source's (recorded by :func:`to_frame`, kept by frame operations:
    a shard keeps the batch's width, as ``shard_by_batch_size`` does), else the longest row;
    ``pad_to_multiple_of`` rounds the longest row up instead."""
    frame = as_frame(frame)
    if pad_to_multiple_of is None:
        pad_to_multiple_of = _recorded_width(frame)
    out = decode(
        frame,
        stage=stage,
        layout="padded",
        pad_to_multiple_of=pad_to_multiple_of,
        writable=writable,
    )
    nemo = nemo_packed_class()
    for name, value in out.items():
        if isinstance(value, PackedTensor) and nemo is not None:
            out[name] = _as_nemo(value, nemo)
    return out


def _recorded_width(frame: Frame) -> int | None:
    """The width to_frame recorded, when it still holds every row (else the longest row)."""
    recorded = frame.metadata.get(PADDED_WIDTH_KEY)
    if recorded is None or not recorded.isdigit():
        return None
    width = int(recorded)
    seq = frame.layout.seq_offsets
    if width < 1 or width > MAX_PAD_MULTIPLE or seq is None:
        return None
    offsets = np.frombuffer(memoryview(frame), np.int64, seq.nbytes // 8, seq.offset)
    longest = int(np.diff(offsets).max()) if offsets.size > 1 else 0
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


def _as_nemo(value: PackedTensor, nemo: type) -> Any:
    return nemo(
        list(value.tensors),
        value.dim_to_pack,
        pad_to_max_shape=value.pad_to_max_shape,
        _row_offsets=value._row_offsets,
        _segment_indices=value._segment_indices,
        _segment_provenance=value._segment_provenance,
    )
