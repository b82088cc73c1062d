"""Streaming calls without Ray or TransferQueue, for tests of what the calls check before
they reach either: every call into Ray or TQ raises :class:`ReachedBackend` instead."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any, NoReturn

import pytest

from py_wire.streaming import RayBuffer, StreamConfig


class ReachedBackend(Exception):
    """Every argument passed the checks and the call went on to Ray or TQ."""


def _reached(*args: Any, **kwargs: Any) -> NoReturn:
    raise ReachedBackend(args[:1])


class _Backend:
    """An actor handle or TQ module whose every attribute is the backend being reached."""

    def __getattr__(self, name: str) -> Any:
        raise ReachedBackend(name)


@contextlib.contextmanager
def offline() -> Iterator[None]:
    """``ray.put``, ``ray.get``, ``ray.remote`` and TQ's module raise :class:`ReachedBackend`."""
    import ray

    with pytest.MonkeyPatch.context() as patch:
        for name in ("put", "get", "remote"):
            patch.setattr(ray, name, _reached)
        patch.setattr("py_wire.streaming.tq._tq", _Backend)
        yield


def offline_ray_buffer(config: StreamConfig) -> RayBuffer:
    """A :class:`RayBuffer` whose actor is never started (use within :func:`offline`)."""
    buffer = RayBuffer.__new__(RayBuffer)
    buffer.config = config
    buffer.actor = _Backend()
    buffer._options = {}
    buffer._placed = False
    buffer._ready = None
    return buffer
