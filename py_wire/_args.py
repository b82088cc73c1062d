"""One rule for the arguments of every public function: a value of the wrong type is a
``TypeError`` that names the argument; a value of the right type that cannot be used (negative,
out of range, not finite) is a :class:`WireError` that names it and the value. Checked here,
before any conversion (PyO3's integer conversion would otherwise answer first with an
``OverflowError``)."""

from __future__ import annotations

import math
import numbers
import operator
from collections.abc import Callable, Mapping
from typing import Any

from py_wire._native import WireError, reserved_metadata_key

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
    except (TypeError, RuntimeError):  # RuntimeError: a tensor without values (torch's meta)
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
        if not key or key == "__metadata__" or reserved_metadata_key(key):
            raise WireError(
                f"metadata key {key!r} is reserved (py_wire.*, or a bit away from it) or empty"
            )
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
        return _float_fill(name, value, dtype)
    info = torch.iinfo(dtype)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise WireError(f"{name}: {value!r} is not an integer, and the field is {dtype}")
        value = int(value)
    if not info.min <= value <= info.max:
        raise WireError(f"{name}: {value} is outside {dtype}'s range [{info.min}, {info.max}]")
    return value


def _float_fill(name: str, value: int | float, dtype: Any) -> float:
    """A fill value for a floating ``dtype``: a float it holds (``inf`` and ``nan`` as given;
    a finite value that would round to ``inf``, such as ``1e39`` for float32, is refused)."""
    import torch

    try:
        as_float = float(value)
    except OverflowError:
        raise WireError(f"{name}: {value} is outside {dtype}'s range") from None
    if math.isfinite(as_float):
        real = torch.float32 if dtype == torch.complex64 else torch.float64
        real = real if dtype.is_complex else dtype
        if not math.isfinite(torch.tensor(as_float, dtype=torch.float64).to(real).item()):
            limit = torch.finfo(real).max
            raise WireError(
                f"{name}: {value!r} is outside {dtype}'s range [{-limit}, {limit}] (it would "
                "become inf)"
            )
    return as_float


def device(name: str, value: object) -> Any:
    """A ``device`` argument: a str, ``torch.device`` or device index, which torch parses,
    which exists here and which holds data; the ``torch.device``. ``"meta"`` (shapes and
    dtypes only) and any other device whose tensors have no storage are refused: a batch moved
    there would come back with no values, silently."""
    import torch

    if not isinstance(value, str | torch.device | int) or isinstance(value, bool):
        raise TypeError(
            f"{name} must be a str, torch.device or int, not {type(value).__name__} {value!r}"
        )
    try:
        parsed = torch.device(value)
    except (RuntimeError, ValueError, OverflowError) as e:
        raise WireError(f"{name}: {value!r} is not a torch device ({e})") from None
    try:
        probe = torch.empty(1, device=parsed)  # an unavailable device fails here, not mid-batch
    except (RuntimeError, AssertionError) as e:
        raise WireError(f"{name} {parsed} is not available here: {e}") from None
    if not _holds_data(probe):
        raise WireError(
            f"{name} {parsed} holds no data (a tensor there has shape and dtype, no values): "
            "move a batch to a device with memory"
        )
    return parsed


def _holds_data(tensor: Any) -> bool:
    """Whether a one-element ``tensor`` has storage with an address (a meta tensor has none)."""
    if tensor.is_meta:
        return False
    try:
        return bool(tensor.untyped_storage().data_ptr() != 0)
    except (RuntimeError, NotImplementedError):
        return False


def host_indices(name: str, value: Any) -> Any:
    """An index tensor's values on the host (a numpy array passes through): a
    :class:`WireError` naming ``name`` for a tensor whose values cannot be read (a meta tensor
    holds none; torch answers ``NotImplementedError``)."""
    if not hasattr(value, "is_meta"):
        return value
    if value.is_meta:
        raise WireError(f"{name}: a tensor on the meta device holds no values to index with")
    try:
        return value.detach().cpu()
    except (RuntimeError, NotImplementedError) as e:
        raise WireError(f"{name}: cannot read the index tensor's values: {e}") from None


#: What a padded output (rows x width cells, or segments padded to their max shape) may hold
#: beyond the input that justifies it: at least this many cells ...
MIN_PADDED_CELLS = 1 << 24
#: ... or this many per unit of input (a frame's byte, a segment's element).
PADDED_PER_BACKED = 64


def padded_cells_backed(cells: int, backed: int) -> bool:
    """Whether a padded output of ``cells`` cells is justified by ``backed`` units of input
    (see :data:`MIN_PADDED_CELLS`): a width or shape read from hostile input never sizes an
    allocation the input does not back."""
    return cells <= max(MIN_PADDED_CELLS, PADDED_PER_BACKED * backed)


#: The most items a sequence argument may hold (rows, segments, tensors, frames): 2**24. A list
#: of that many is 128 MiB of pointers before the items themselves; a batch of more rows than
#: that is split long before it reaches one call.
MAX_ITEMS = 1 << 24


def items(
    name: str,
    value: object,
    *,
    limit: int = MAX_ITEMS,
    each: Callable[[Any], Any] | None = None,
) -> list[Any]:
    """A sequence or iterable argument as a list, never presized from its ``len()`` (which any
    object may answer with 2**62): a ``TypeError`` naming ``name`` for a value that is not
    iterable (or is a str or bytes), a :class:`WireError` for more than ``limit`` items.
    ``each`` converts every item as it arrives, so the first bad item of a long (or endless)
    iterable is refused before the rest is drawn into memory."""
    iterable = hasattr(value, "__iter__") or hasattr(value, "__getitem__")
    if isinstance(value, str | bytes) or not iterable:
        raise TypeError(f"{name} must be a sequence, not {type(value).__name__} {value!r:.80}")
    try:
        claimed = len(value)  # type: ignore[arg-type]
    except TypeError:
        claimed = None
    except OverflowError:
        claimed = limit + 1
    if claimed is not None and claimed > limit:
        raise WireError(f"{name}: a sequence of {claimed} items (its len()) is more than {limit}")
    out: list[Any] = []
    try:
        iterator = iter(value)  # type: ignore[call-overload]
    except TypeError:
        raise TypeError(f"{name} must be a sequence, not {type(value).__name__}") from None
    for item in iterator:
        if len(out) == limit:
            raise WireError(f"{name}: more than {limit} items")
        out.append(item if each is None else each(item))
    return out


def names(what: str, value: object) -> list[str]:
    """A sequence of strings (keys, column or field names), each checked: a ``TypeError``
    naming ``what`` (and the index) for one str or bytes, or an item that is not a str."""
    if isinstance(value, str | bytes):
        raise TypeError(f"{what} must be a sequence of str, not one {type(value).__name__}")
    out = items(what, value)
    for i, name in enumerate(out):
        if not isinstance(name, str):
            raise TypeError(f"{what}[{i}] must be a str, not {type(name).__name__} {name!r:.60}")
    return out


def path(name: str, value: object) -> str:
    """A file path argument (a str or ``os.PathLike``) as a str; a ``TypeError`` naming
    ``name`` otherwise, and a :class:`WireError` for a path with a NUL byte."""
    import os

    if isinstance(value, bool) or not isinstance(value, str | os.PathLike):
        raise TypeError(
            f"{name} must be a str or os.PathLike, not {type(value).__name__} {value!r:.80}"
        )
    text = os.fspath(value)
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a str path, not {type(text).__name__} {text!r:.80}")
    if "\0" in text:
        raise WireError(f"{name}: {text!r:.80} holds a NUL byte")
    return text


def batch_mapping(name: str, value: object) -> Mapping[str, Any]:
    """A batch argument: a mapping of field names to values."""
    if not isinstance(value, Mapping):
        raise TypeError(
            f"{name} must be a mapping of field name to value, not {type(value).__name__}"
        )
    return value
