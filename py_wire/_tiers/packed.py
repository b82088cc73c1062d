"""The packed tier: 0..k segments a row, decoded as a :class:`PackedTensor` over the frame's
values and index tables (a field with a per-row ``encoding``: its rows' Python values)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from py_wire._native import BatchError, FieldLayout
from py_wire._packed import PackedTensor, _FrameRows
from py_wire._rowvalues import decode_rows
from py_wire._tiers.codec import FieldDecoding, InputKind, Items, owned

if TYPE_CHECKING:  # for types only: py_wire._schema imports this package (names.py)
    from py_wire._schema import FieldDef

#: A packed field's CSR index tables, as ``FieldLayout`` names them.
CSR_TABLES = ("seg_shapes", "seg_offsets", "row_offsets", "row_segments")


class Packed:
    """0..k segments a row; rows may share segments."""

    items: Items = "segments"

    def input_kind(self, name: str, field: FieldDef, value: Any, lengths: Any) -> InputKind:
        if isinstance(value, PackedTensor):
            _check_pack_dim(name, field, value.dim_to_pack)
            csr = value._csr()
            ids = value._segment_id_bytes()
            if csr is not None:  # decoded: hand over its tables, O(1) here
                return "csr", csr[0], (*csr[1:], ids)
            segments, offsets, refs = value.csr()
            return "shared", segments, (offsets, refs, len(value), ids)
        if isinstance(value, list | tuple):
            return "rows", list(value), None
        if hasattr(value, "tensors") and hasattr(value, "dim_to_pack"):
            raise BatchError(
                f"field {name!r}: a {type(value).__name__} with .tensors (NeMo-RL's "
                "PackedTensor) is not py_wire's: convert the batch with "
                "py_wire.interop.nemo_rl.from_nemo(batch), or encode it with "
                "py_wire.interop.nemo_rl.to_frame"
            )
        raise BatchError(
            f"field {name!r} is packed: pass a PackedTensor or a list with one entry per row "
            f"(a tensor, None, or a list of tensors), not {type(value).__name__}"
        )

    def decoded(self, dec: FieldDecoding, f: FieldLayout, cast: torch.dtype | None) -> Any:
        values = dec.values(f.values)
        tables = {k: dec.table(getattr(f, k)) for k in CSR_TABLES}
        if f.seg_ids is not None:
            tables["seg_ids"] = dec.table(f.seg_ids)
        in_order = f.in_order
        if dec.window is not None:
            values, tables, in_order = dec.window.packed(values, tables, in_order)
        values = dec.own(owned(values, cast, dec.clone))
        packed = PackedTensor._from_frame(_FrameRows(values, tables, in_order), f.pack_dim)
        encoding = dec.encoding(f.name)
        if encoding is not None:
            return decode_rows(f.name, packed, encoding)
        return packed.rows() if dec.layout == "list" else packed


def _check_pack_dim(name: str, field: FieldDef, dim: int) -> None:
    rank = len(field.shape)
    if dim % rank != field.pack_dim:
        raise BatchError(
            f"field {name!r}: PackedTensor packs along dim {dim} but the schema says "
            f"pack_dim = {field.pack_dim}"
        )
