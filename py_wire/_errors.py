"""Structured context on py_wire exceptions raised from Python, as the codec sets it on the
ones it raises: ``kind``, ``field``, ``row``, ``segment``, ``item``, ``expected``, ``found``."""

from __future__ import annotations

from typing import Any, TypeVar

from py_wire._native import ERROR_CONTEXT, WireError

E = TypeVar("E", bound=WireError)


def with_context(error: E, *, kind: str | None = None, **context: Any) -> E:
    """``error`` with its structured attributes set (``kind`` defaults to the class's)."""
    unknown = set(context) - set(ERROR_CONTEXT)  # the codec's names (errors.rs CONTEXT)
    if unknown:
        raise TypeError(f"unknown error context {sorted(unknown)}")
    if kind is not None:
        error.kind = kind
    for name, value in context.items():
        setattr(error, name, value)
    return error


def prefixed(error: E, prefix: str) -> E:
    """A copy of ``error`` whose message starts with ``prefix`` (the argument it is about), with
    the same class and structured context."""
    out = type(error)(f"{prefix}: {error}")
    for name in ("kind", *ERROR_CONTEXT):
        if hasattr(error, name):
            setattr(out, name, getattr(error, name))
    return out
