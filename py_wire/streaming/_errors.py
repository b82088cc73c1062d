"""The streaming buffers' errors (beneath :class:`~py_wire.WireError`)."""

from __future__ import annotations

from py_wire import WireError


class StreamError(WireError):
    """A fully-async buffer refused or could not finish an operation."""


class AdmissionTimeout(StreamError):
    """A producer waited longer than its timeout for a slot (the trainer is more than the
    staleness bound behind, or the buffer is over its byte budget)."""
