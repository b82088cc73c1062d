"""The one cache of typed schema views, by fingerprint, each charged to its schema's entry in
the codec's schema memory budget (``frame::compact``) by its measured size."""

from __future__ import annotations

import sys
import threading
from typing import Any, Generic, TypeVar

from pydantic import BaseModel

from py_wire import _native

#: A typed view of a schema (``Schema``).
View = TypeVar("View", bound=BaseModel)


class _Views(Generic[View]):
    """Typed views of the schemas the codec holds (``frame::compact``, the one record of what
    this process holds), by fingerprint. A view is served only while the codec still holds its
    schema (asking it marks the schema used). Each view is charged to its schema's entry in the
    codec's one schema memory budget by its measured size (:func:`_view_bytes`, with the codecs
    it caches), so the codec lets go of the least recently used across its caches and these
    views together, and names the views it let go of (``released_schema_views``), which are
    dropped here. An embedded frame's view (its canonical text) and the held text's view (fields
    in declared order) are kept apart: the two list fields in another order."""

    def __init__(self) -> None:
        self._views: dict[tuple[str, bool], View] = {}
        self._lock = threading.Lock()

    def _drop_released(self) -> None:
        released = _native.released_schema_views()
        if released:
            with self._lock:
                for fingerprint in released:
                    for form in (True, False):
                        self._views.pop((fingerprint, form), None)

    def get(self, fingerprint: str, held: bool) -> View | None:
        """The view of the schema held under ``fingerprint`` (``held``: of its held text, else
        of an embedded frame's), or None."""
        self._drop_released()
        if not _native.holds_schema(fingerprint):
            with self._lock:
                for form in (True, False):
                    self._views.pop((fingerprint, form), None)
            return None
        with self._lock:
            return self._views.get((fingerprint, held))

    def put(self, fingerprint: str, held: bool, view: View) -> None:
        """Keep ``view``, charged to its schema's entry in the codec (not kept when the codec
        does not hold the schema, or lets it go for the view's cost)."""
        if _native.charge_schema_view(fingerprint, held, _view_bytes(view)):
            with self._lock:
                self._views[(fingerprint, held)] = view
        self._drop_released()

    def recharge(self, fingerprint: str, view: object) -> None:
        """``view`` grew (it cached a codec): charge what it costs now, if it is kept here."""
        for held in (True, False):
            key = (fingerprint, held)
            kept = self._views.get(key) is view
            if kept and not _native.charge_schema_view(fingerprint, held, _view_bytes(view)):
                with self._lock:
                    self._views.pop(key, None)
        self._drop_released()

    def __len__(self) -> int:
        return len(self._views)


#: Objects every view shares (not charged to any one).
_SHARED = (type(None), bool, type, type(Ellipsis))


def _view_bytes(view: object) -> int:
    """What ``view`` keeps in memory: the sizes (``sys.getsizeof``, which counts the object
    header and the garbage collector's) of every object reachable from it (its fields, their
    values and the facts it cached), each once, and the bytes of each codec it caches
    (``Codec.nbytes``). Shared objects (None, bools, classes) are not charged; strings and
    small ints that other objects share are (an overestimate, never an under-count)."""
    seen: set[int] = set()
    total = 0
    stack: list[Any] = [view]
    while stack:
        obj = stack.pop()
        if isinstance(obj, _SHARED) or id(obj) in seen:
            continue
        seen.add(id(obj))
        if isinstance(obj, _native.Codec):
            total += sys.getsizeof(obj) + obj.nbytes
            continue
        total += sys.getsizeof(obj)
        if isinstance(obj, BaseModel):
            stack.append(obj.__dict__)
            stack.append(obj.__pydantic_fields_set__)
            if obj.__pydantic_extra__ is not None:
                stack.append(obj.__pydantic_extra__)
            if obj.__pydantic_private__ is not None:
                stack.append(obj.__pydantic_private__)
        elif isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, list | tuple | set | frozenset):
            stack.extend(obj)
    return total


#: The one cache of typed schema views.
_VIEWS: _Views[Any] = _Views()
