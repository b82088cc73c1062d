"""The bridge to the codec's registry of schemas (``frame::compact``, the one record of what
this process holds): pinning the schemas this process loads, the budget of schemas learnt from
frames, and which schema a frame names."""

from __future__ import annotations

import json
import os
import threading
import weakref
from typing import TYPE_CHECKING, Protocol

from py_wire import _native
from py_wire._native import WireError
from py_wire._schema.constants import FINGERPRINT_KEY, SCHEMA_REF_KEY

if TYPE_CHECKING:
    from typing import Any

    from py_wire._native import Frame


class _Held(Protocol):
    """What the registry is handed of a schema view."""

    __dict__: dict[str, Any]

    @property
    def fingerprint(self) -> str: ...

    def model_dump(self) -> dict[str, Any]: ...


def _hold(schema: _Held) -> None:
    """Hold ``schema``, loaded by this process, in the codec's registry (``frame::compact``),
    the one record of what this process holds: compact frames naming its fingerprint can then
    be read. Each ``Schema`` object pins its schema there once (a schema the registry holds
    already, learnt or loaded, is pinned without its text) and gives the pin back when it is
    freed: a schema the process builds, uses and drops is then let go within the learnt
    bounds, as one learnt from a frame is. (Schemas learnt from frames are held by
    ``Schema.from_frame``.)"""
    if schema.__dict__.get(_PINNED):
        return
    with _PIN_LOCK:
        if schema.__dict__.get(_PINNED):
            return
        fingerprint = schema.fingerprint
        if not _native.pin_schema(fingerprint):
            _native.hold_schema(json.dumps(schema.model_dump()), False)
        weakref.finalize(schema, _native.unpin_schema, fingerprint)
        # In the instance's dict, as the cached properties are: the model is frozen.
        schema.__dict__[_PINNED] = True


#: Set on a ``Schema`` that holds a pin in the registry (see :func:`_hold`).
_PINNED = "_registry_pin"
_PIN_LOCK = threading.Lock()


def frame_fingerprint(frame: Frame) -> str | None:
    """The fingerprint of the schema ``frame`` was encoded with: embedded or compact."""
    meta = frame.metadata
    return meta.get(SCHEMA_REF_KEY) or meta.get(FINGERPRINT_KEY)


#: Schemas learnt from frames may keep this many bytes in the codec's registry (their JSON and
#: specs; ``frame::compact``), the least recently used let go beyond it.
LEARNT_SCHEMA_BYTES_ENV = "PY_WIRE_LEARNT_SCHEMA_BYTES"


def _learnt_budget_from_env() -> None:
    raw = os.environ.get(LEARNT_SCHEMA_BYTES_ENV)
    if raw is None:
        return
    try:
        budget = int(raw)
    except ValueError:
        budget = -1
    if budget < 0:
        raise WireError(
            f"{LEARNT_SCHEMA_BYTES_ENV}={raw[:80]!r} must be a number of bytes (an int >= 0)"
        )
    _native.set_learnt_schema_budget(budget)


_learnt_budget_from_env()
