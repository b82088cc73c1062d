"""Typing helpers for what torch's stubs do not describe."""

from __future__ import annotations

from typing import Protocol, cast

import torch


class JaggedTensor(Protocol):
    """The methods a jagged ``torch.nested`` tensor adds to ``Tensor``. torch types every
    nested tensor as a plain ``Tensor``; ``offsets()`` and ``lengths()`` live only on its
    private jagged subclass (``torch.nested._internal.nested_tensor.NestedTensor``)."""

    def offsets(self) -> torch.Tensor: ...
    def lengths(self) -> torch.Tensor | None: ...


def as_jagged(t: torch.Tensor) -> JaggedTensor:
    """``t`` typed as a jagged nested tensor. Callers check ``t.is_nested`` and
    ``t.layout == torch.jagged`` first; this is a static cast only, nothing is checked here."""
    return cast(JaggedTensor, t)
