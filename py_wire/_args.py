"""One rule for the arguments of every public function: a value of the wrong type is a
``TypeError`` that names the argument; a value of the right type that cannot be used (negative,
out of range, not finite) is a :class:`WireError` that names it and the value. Checked here,
before any conversion (PyO3's integer conversion would otherwise answer first with an
``OverflowError``)."""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Mapping
from typing import Any

from py_wire._native import WireError

#: The largest count any argument takes: what fits an int64 (and so a usize) everywhere.
MAX_COUNT = 2**63 - 1


def flag(name: str, value: object) -> bool:
    """A keyword that must be a bool."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool, not {type(value).__name__} {value!r}")
    return value


def integer(name: str, value: object) -> int:
    """An int (anything with ``__index__``, not a bool)."""
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an int, not the bool {value!r}")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"{name} must be an int, not {type(value).__name__} {value!r}") from None


def count(name: str, value: object, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """An int in ``[minimum, maximum]``."""
    n = integer(name, value)
    if not minimum <= n <= maximum:
        raise WireError(f"{name} must be between {minimum} and {maximum}, got {n}")
    return n


def optional_count(
    name: str, value: object, *, minimum: int = 0, maximum: int = MAX_COUNT
) -> int | None:
    return None if value is None else count(name, value, minimum=minimum, maximum=maximum)


#: The most bytes of caller metadata a frame carries (keys and values together).
MAX_METADATA_BYTES = 1 << 16


def frame_metadata(value: object) -> dict[str, str] | None:
    """``encode(metadata=)``: string keys and values for the frame's safetensors
    ``__metadata__``, beside py_wire's own entries (keys starting ``py_wire.`` are reserved)."""
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"metadata must be a mapping of str to str, not {type(value).__name__}")
    out: dict[str, str] = {}
    size = 0
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise TypeError(
                f"metadata must map str to str, not {type(key).__name__} to "
                f"{type(item).__name__} ({key!r})"
            )
        if not key or key.startswith("py_wire.") or key == "__metadata__":
            raise WireError(f"metadata key {key!r} is reserved (py_wire.*) or empty")
        size += len(key.encode()) + len(item.encode())
        out[key] = item
    if size > MAX_METADATA_BYTES:
        raise WireError(f"metadata holds {size} bytes, more than {MAX_METADATA_BYTES}")
    return out


def fill_value(name: str, value: object, dtype: Any) -> int | float | bool:
    """A pad or fill value that the torch ``dtype`` represents exactly: a bool for bool, an
    integral value in range for integer dtypes, a real number for floating dtypes (``inf``
    allowed, ``nan`` only for floats)."""
    import torch

    if isinstance(value, bool):
        return value
    if isinstance(value, numbers.Integral):
        value = int(value)
    elif isinstance(value, numbers.Real):
        value = float(value)
    else:
        raise TypeError(f"{name} must be a number, not {type(value).__name__} {value!r}")
    if dtype == torch.bool:
        if value in (0, 1):
            return bool(value)
        raise WireError(f"{name}: {value!r} is not a bool, and the field is bool")
    if dtype.is_floating_point or dtype.is_complex:
        return value
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise WireError(f"{name}: {value!r} is not an integer, and the field is {dtype}")
        value = int(value)
    if not info.min <= value <= info.max:
        raise WireError(f"{name}: {value} is outside {dtype}'s range [{info.min}, {info.max}]")
    return value
