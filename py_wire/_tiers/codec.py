"""The seam every tier implements (:class:`TierCodec`), and what a tier's decoded value is
built from (:class:`FieldDecoding`: ``decode``'s views, options and row window, and what the
per-token fields of one decode share)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, Protocol

import numpy as np
import torch

from py_wire._native import FieldLayout, TensorLoc
from py_wire._rows import RowWindow

if TYPE_CHECKING:  # for types only: py_wire._schema imports this package (names.py)
    from py_wire._schema import FieldDef

#: What the codec is handed for one field: ``(kind, first, second)``, as ``_native.encode``
#: reads it (``"rows"``, ``"jagged"``, ``"padded"``, ``"dense"``, ``"csr"``, ``"shared"``).
InputKind = tuple[str, Any, Any]


class FieldDecoding(Protocol):
    """What one ``decode`` call offers a tier building a field's value."""

    @property
    def layout(self) -> Literal["nested", "padded", "list"] | None:
        """``decode(layout=)``: ``"nested"`` (None), ``"padded"`` or ``"list"``."""
        ...

    @property
    def clone(self) -> bool:
        """Every returned tensor must be a copy (a private frame's partial decode)."""
        ...

    @property
    def torch_padding(self) -> bool:
        """Pad with torch ops where the values lie, as for a device frame, even on the host."""
        ...

    @property
    def window(self) -> RowWindow | None:
        """The rows decoded (None: all)."""
        ...

    @property
    def seq_offsets(self) -> torch.Tensor | None:
        """The decoded rows' token offsets (None: no per-token fields)."""
        ...

    def own(self, t: torch.Tensor) -> torch.Tensor:
        """A row window's view with a storage of exactly its bytes (other values as they are:
        whole fields, casts and copies have one already)."""
        ...

    def own_exact(self, t: torch.Tensor) -> torch.Tensor:
        """Any view with a storage of exactly its bytes."""
        ...

    def values(self, loc: TensorLoc) -> torch.Tensor:
        """A field's values, where the payload lies."""
        ...

    def table(self, loc: TensorLoc) -> torch.Tensor:
        """An index table, in host memory."""
        ...

    def host_tokens(self, loc: TensorLoc) -> np.ndarray | None:
        """A per-token field's values as host ``[tokens, token bytes]`` uint8, or None."""
        ...

    def pad(
        self,
        name: str,
        values: torch.Tensor | np.ndarray,
        dtype: torch.dtype,
        token_shape: list[int],
    ) -> torch.Tensor:
        """Per-token ``values`` padded to the batch's width (``[rows, width, *token_shape]``)."""
        ...

    def jagged_offsets(self) -> torch.Tensor:
        """The jagged layout's offsets: one tensor for every per-token field of the decode."""
        ...

    def encoding(self, name: str) -> Literal["utf8", "json"] | None:
        """Field ``name``'s per-row encoding, if it has one."""
        ...


#: What one item along a field's values dim 0 is (the codec's ``tier::Items``): a row, a
#: row's token, or a segment of the field's own index tables.
Items = Literal["rows", "tokens", "segments"]


class TierCodec(Protocol):
    """Everything Python decides by a field's tier, one implementation per tier."""

    #: What one item along the values' dim 0 is (the tier's row fact).
    items: Items

    def input_kind(self, name: str, field: FieldDef, value: Any, lengths: Any) -> InputKind:
        """How ``value`` of field ``name`` is handed to the codec (``lengths``: the batch's
        lengths field, for a padded per-token tensor); a :class:`BatchError` for a value this
        tier does not take."""
        ...

    def decoded(self, dec: FieldDecoding, f: FieldLayout, cast: torch.dtype | None) -> Any:
        """The value ``decode`` returns for field ``f`` (cast to ``cast`` where given)."""
        ...


def owned(values: torch.Tensor, cast: torch.dtype | None, clone: bool) -> torch.Tensor:
    """``values`` cast to ``cast`` (a copy), else cloned when ``clone``, else as they are."""
    if cast is not None:
        return values.to(cast)
    return values.clone() if clone else values
