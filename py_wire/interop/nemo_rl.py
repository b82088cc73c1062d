"""NeMo-RL: a ``BatchedDataDict`` to a frame and back.

``to_frame(batch, "nemo_rl/qwen2_5_vl")`` encodes NeMo-RL's train data as it is: padded
``[B, L]`` per-token tensors cut by ``input_lengths``, ``PackedTensor`` values (with their
dedup CSR: a GRPO group's images are stored once), dense per-sample tensors. A key the schema
lacks raises (never dropped). ``from_frame(frame)`` gives a dict in NeMo-RL's shapes: per-token
fields padded ``[B, L]`` (the schema's pad values, ``L`` the longest row, or a multiple of
``pad_to_multiple_of``), ``input_lengths``, and packed fields as NeMo-RL's own ``PackedTensor``
class when ``nemo_rl`` is importable (built over the frame's views, with its dedup CSR when
rows share segments), py_wire's otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from py_wire._decode import Writable, decode
from py_wire._encode import encode
from py_wire._native import Frame
from py_wire._packed import PackedTensor
from py_wire._schema import Schema


def nemo_packed_class() -> type | None:
    """NeMo-RL's ``PackedTensor`` class, or None when ``nemo_rl`` is not importable."""
    try:
        from nemo_rl.data.multimodal_utils import (  # type: ignore[import-not-found]
            PackedTensor as NemoPacked,
        )
    except ImportError:
        return None
    return NemoPacked  # type: ignore[no-any-return]  # untyped without nemo_rl installed


def to_frame(
    batched_data_dict: Mapping[str, Any], schema: Schema | str | Path, stage: str | None = None
) -> Frame:
    """Encode a ``BatchedDataDict`` (any mapping) with no edits to it."""
    return encode(dict(batched_data_dict), schema, stage=stage)


def from_frame(
    frame: Any,
    stage: str | None = None,
    *,
    pad_to_multiple_of: int = 1,
    writable: Writable = "auto",
) -> dict[str, Any]:
    """The frame's fields as NeMo-RL holds them (see the module docstring). Wrap the result
    in ``BatchedDataDict(...)`` on the NeMo-RL side. Padded per-token fields are new tensors;
    packed and scalar fields are views, under :func:`py_wire.decode`'s ``writable`` policy
    (the default copies a read-only source, such as a Ray object, once)."""
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


def _as_nemo(value: PackedTensor, nemo: type) -> Any:
    return nemo(
        list(value.tensors),
        value.dim_to_pack,
        pad_to_max_shape=value.pad_to_max_shape,
        _row_offsets=value._row_offsets,
        _segment_indices=value._segment_indices,
        _segment_provenance=value._segment_provenance,
    )
