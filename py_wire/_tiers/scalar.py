"""The scalar tier: one value of static shape a row, decoded as one dense ``[B, ...]``
tensor."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from py_wire._native import BatchError, FieldLayout
from py_wire._tiers.codec import FieldDecoding, InputKind, Items, owned

if TYPE_CHECKING:  # for types only: py_wire._schema imports this package (names.py)
    from py_wire._schema import FieldDef


class Scalar:
    """One value of static shape a row."""

    items: Items = "rows"

    def input_kind(self, name: str, field: FieldDef, value: Any, lengths: Any) -> InputKind:
        if isinstance(value, torch.Tensor | np.ndarray):
            return "dense", value, None
        raise BatchError(
            f"field {name!r} is a scalar field: pass a [B, ...] tensor or array, "
            f"not {type(value).__name__}"
        )

    def decoded(self, dec: FieldDecoding, f: FieldLayout, cast: torch.dtype | None) -> Any:
        values = dec.values(f.values)
        if dec.window is not None:
            values = dec.window.scalar(values)
        return dec.own(owned(values, cast, dec.clone))
