"""The per-token tier: one tensor a row, as long as the row's sequence; decoded as a jagged
``torch.nested`` tensor (``layout="padded"``: ``[B, L, ...]``; ``"list"``: row tensors)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from py_wire._dtypes import DTYPES
from py_wire._jagged import jagged
from py_wire._native import BatchError, FieldLayout
from py_wire._tiers.codec import FieldDecoding, InputKind, Items, owned
from py_wire._typing import as_jagged

if TYPE_CHECKING:  # for types only: py_wire._schema imports this package (names.py)
    from py_wire._schema import FieldDef


class PerToken:
    """One tensor a row whose first dim is the row's sequence length."""

    items: Items = "tokens"

    def input_kind(self, name: str, field: FieldDef, value: Any, lengths: Any) -> InputKind:
        if isinstance(value, list | tuple):
            return "rows", value if type(value) is list else list(value), None
        if isinstance(value, torch.Tensor) and value.is_nested:
            if value.layout != torch.jagged or as_jagged(value).lengths() is not None:
                # Strided nested tensors, and jagged ones with holes (narrowed rows), are not
                # one flat run of values: hand over the rows themselves.
                return "rows", list(value.unbind()), None
            if getattr(value, "_ragged_idx", 1) != 1:
                raise BatchError(f"field {name!r}: the nested tensor's ragged dim must be dim 1")
            return "jagged", value.values(), as_jagged(value).offsets()
        if isinstance(value, torch.Tensor | np.ndarray):
            if lengths is None:
                raise BatchError(
                    f"field {name!r}: a padded per-token tensor needs per-row lengths; add the "
                    "schema's lengths field to the batch or pass a list of rows"
                )
            return "padded", value, lengths
        raise BatchError(
            f"field {name!r} is per-token: pass a list of per-row tensors, a jagged nested tensor "
            f"or a padded tensor with lengths, not {type(value).__name__}"
        )

    def decoded(self, dec: FieldDecoding, f: FieldLayout, cast: torch.dtype | None) -> Any:
        layout = dec.layout
        if layout == "padded" and cast is None and dec.window is None and not dec.torch_padding:
            # The padding copy reads the frame's bytes directly: no tensor over them first.
            tokens = dec.host_tokens(f.values)
            if tokens is not None:
                return dec.pad(f.name, tokens, DTYPES[f.values.dtype], f.values.shape[1:])
        values = dec.values(f.values)
        offsets = dec.seq_offsets
        assert offsets is not None
        if dec.window is not None:
            values = dec.window.per_token(values)
        if layout == "list":
            values = owned(values, cast, dec.clone)
            return [dec.own_exact(r) for r in torch.split(values, torch.diff(offsets).tolist())]
        if layout == "padded":
            values = owned(values, cast, clone=False)  # padding copies anyway
            return dec.pad(f.name, values, values.dtype, list(values.shape[1:]))
        return jagged(dec.own(owned(values, cast, dec.clone)), dec.jagged_offsets())
