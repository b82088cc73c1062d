"""Jagged (``torch.jagged`` layout) nested tensors built straight from ``(values, offsets)``.

``torch.nested.nested_tensor_from_jagged`` goes through a dispatcher view op and an autograd
function: about ten times the cost of constructing torch's jagged ``NestedTensor`` class itself,
which is what that op ends in. A decoded field needs no autograd history (its values never
require grad), so :func:`jagged` constructs the class directly when this torch has it, and falls
back to the public function otherwise (or when the values require grad). Either way the result
is the same jagged tensor: ``values()`` and ``offsets()`` are the tensors passed in.
"""

from __future__ import annotations

from typing import Any

import torch

_NestedTensor: Any = None
try:  # torch's own class; private, so its absence (another torch) falls back to the public call
    from torch.nested._internal import nested_tensor as _nested

    _NestedTensor = _nested.NestedTensor
except ImportError:  # pragma: no cover - every torch py_wire supports has it
    pass

__all__ = ["jagged", "jagged_values"]


def jagged(values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """A jagged nested tensor of ``len(offsets) - 1`` rows: row ``i`` is
    ``values[offsets[i]:offsets[i + 1]]``. ``offsets`` is int64, on ``values``' device; fields
    that share one ``offsets`` tensor share one ragged dimension."""
    if _NestedTensor is not None and not values.requires_grad:
        nested: torch.Tensor = _NestedTensor(values, offsets)
        return nested
    return torch.nested.nested_tensor_from_jagged(values, offsets)


def jagged_values(nested: torch.Tensor) -> torch.Tensor:
    """``nested.values()`` itself, not a view of it (torch's ``values()`` dispatches an op that
    returns a new view each call: tens of microseconds, where the attribute is free)."""
    values = getattr(nested, "_values", None)
    return values if isinstance(values, torch.Tensor) else nested.values()
