"""One implementation per tier of what Python decides by a field's tier, behind one protocol
(:class:`~py_wire._tiers.codec.TierCodec`), chosen in one place (:func:`of`), as the codec's
``rust_codec/src/tier/`` does for the bytes: which input kind a value is handed to the codec
as (``encode``), and the value ``decode`` builds over the frame's views. The tier names a
schema may use are in ``names.py`` (``Tier``, which the schema views read)."""

from __future__ import annotations

from py_wire._tiers.codec import FieldDecoding, Items, TierCodec
from py_wire._tiers.packed import Packed
from py_wire._tiers.per_token import PerToken
from py_wire._tiers.scalar import Scalar

__all__ = ["FieldDecoding", "Items", "TierCodec", "items", "of"]

_TIERS: dict[str, TierCodec] = {"packed": Packed(), "per_token": PerToken(), "scalar": Scalar()}


def of(tier: str) -> TierCodec:
    """The implementation of ``tier`` (a schema's tier name: the schema checked it)."""
    return _TIERS[tier]


def items(tier: str) -> Items:
    """What one item along the values' dim 0 of a field of ``tier`` is (a schema's tier name):
    ``"rows"`` (one value a row, decoded as one dense tensor), ``"tokens"`` (a row's tokens,
    cut by the sequence offsets) or ``"segments"`` (a row's 0..k segments, decoded as a
    ``PackedTensor``). Code that acts by a field's tier asks this, never the tier's name."""
    return _TIERS[tier].items
