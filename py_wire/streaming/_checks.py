"""The arguments of every public streaming call, checked before anything else happens: before
a slot is reserved, a group leased or TQ called. py_wire's one rule (:mod:`py_wire._args`): a
value of the wrong type is a ``TypeError`` naming the argument, a value of the right type that
cannot be used a :class:`StreamError` (a :class:`py_wire.WireError`) naming it and the value.

Versions, counts and indexes are non-negative ints: a Python int or anything with
``__index__`` (a numpy or torch integer scalar, read as its int); never a bool, a float (``1.7``
is no version), a str or bytes (``"3"``), nor a tensor of more than one element. Durations and
byte budgets are positive and finite: a ``nan`` budget or an ``inf`` lease would switch the
rule they carry off."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from typing import Any

from py_wire import Frame
from py_wire.adapters import MAX_COUNT, integer, items
from py_wire.streaming._errors import StreamError

#: The most data-parallel ranks one step is shared among (a step's list per rank is built
#: before anything is handed out).
MAX_RANKS = 1 << 16
#: The most groups one ``TQStream.put`` stores.
MAX_GROUPS_PER_PUT = 1 << 16


def _error(message: str) -> Exception:
    return StreamError(message)


def whole(name: str, value: object, *, minimum: int = 0, maximum: int = MAX_COUNT) -> int:
    """An int in ``[minimum, maximum]``."""
    n = integer(name, value)
    if not minimum <= n <= maximum:
        raise _error(f"{name} must be between {minimum} and {maximum}, got {n}")
    return n


def version(name: str, value: object) -> int:
    """A policy version: a non-negative int."""
    return whole(name, value)


def optional_version(name: str, value: object) -> int | None:
    return None if value is None else version(name, value)


def _real(name: str, value: object, unit: str) -> float:
    """A real number (an int or float, numpy's included) as a float; an int past float's
    range is ``inf``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a {unit}, not {type(value).__name__} {value!r:.80}")
    try:
        return float(value)
    except OverflowError:
        return math.inf


def seconds(name: str, value: object) -> float:
    """A duration: a finite positive real number."""
    as_float = _real(name, value, "number of seconds")
    if not (math.isfinite(as_float) and as_float > 0):
        raise _error(f"{name} must be a finite number of seconds > 0, got {value!r}")
    return as_float


def optional_seconds(name: str, value: object) -> float | None:
    return None if value is None else seconds(name, value)


def text(name: str, value: object) -> str:
    """A key or name: a non-empty str."""
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__} {value!r:.80}")
    if not value:
        raise _error(f"{name} must not be empty")
    return value


def frame(name: str, value: object) -> Frame:
    if not isinstance(value, Frame):
        raise TypeError(f"{name} must be a py_wire.Frame, not {type(value).__name__}")
    return value


def listed(
    name: str, value: object, each: Callable[[str, Any], Any], *, minimum: int = 0
) -> list[Any]:
    """A sequence argument of at least ``minimum`` items, each checked by ``each`` (named
    ``name[i]``)."""
    out = items(name, value, limit=MAX_GROUPS_PER_PUT)
    if len(out) < minimum:
        raise _error(f"{name} must hold at least {minimum} items, got {len(out)}")
    return [each(f"{name}[{i}]", item) for i, item in enumerate(out)]


def ranks(name: str, value: object) -> int:
    """A data-parallel size: an int in ``[1, MAX_RANKS]``."""
    return whole(name, value, minimum=1, maximum=MAX_RANKS)


#: The most of a resource Ray can count: it holds quantities as int64 units of 0.0001.
MAX_AMOUNT = float(2**63 // 10_000 - 1)


def amount(name: str, value: object) -> float:
    """A quantity of a Ray resource: a finite real number in ``[0, MAX_AMOUNT]``."""
    as_float = _real(name, value, "number")
    if not (math.isfinite(as_float) and 0 <= as_float <= MAX_AMOUNT):
        raise _error(f"{name} must be a finite number in [0, {MAX_AMOUNT:g}], got {value!r}")
    return as_float


#: Resources Ray refuses in ``resources`` (each is an argument of its own).
BUILTIN_RESOURCES = ("CPU", "GPU", "memory", "object_store_memory")


def resources(name: str, value: object) -> dict[str, float]:
    """Ray custom resources: a mapping of non-empty resource names to amounts."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{name} must be a dict of resource amounts, not {type(value).__name__}")
    out: dict[str, float] = {}
    for key, amount_of in value.items():
        key = text(f"{name} key", key)
        if key in BUILTIN_RESOURCES:
            raise _error(
                f"{name} names {key!r}, which Ray takes as its own argument "
                f"(num_cpus, num_gpus, memory) or refuses, not as a custom resource"
            )
        out[key] = amount(f"{name}[{key!r}]", amount_of)
    return out


#: Ray's scheduling strategies given by name.
STRATEGY_NAMES = ("DEFAULT", "SPREAD")


def scheduling_strategy(name: str, value: object) -> Any:
    """A Ray actor scheduling strategy: one of :data:`STRATEGY_NAMES`, or an object of
    ``ray.util.scheduling_strategies`` (node affinity, placement group, node labels)."""
    if isinstance(value, str):
        if value not in STRATEGY_NAMES:
            raise _error(
                f"{name} must be one of {STRATEGY_NAMES} or a strategy object, got {value!r}"
            )
        return value
    from ray.util import scheduling_strategies as strategies

    kinds = tuple(
        kind
        for kind_name in (
            "NodeAffinitySchedulingStrategy",
            "PlacementGroupSchedulingStrategy",
            "NodeLabelSchedulingStrategy",
        )
        if isinstance(kind := getattr(strategies, kind_name, None), type)
    )
    if not isinstance(value, kinds):
        raise TypeError(
            f"{name} must be {' or '.join(repr(n) for n in STRATEGY_NAMES)} or one of "
            f"{', '.join(k.__name__ for k in kinds)}, not {type(value).__name__}"
        )
    return value


def config_fields(values: dict[str, object]) -> dict[str, Any]:
    """:class:`StreamConfig`'s fields, checked, as plain ints, floats and str."""
    policy = values["policy"]
    if not isinstance(policy, str):
        raise TypeError(f"policy must be 'pace' or 'drop', not {type(policy).__name__}")
    if policy not in ("pace", "drop"):
        raise _error(f"policy must be 'pace' or 'drop', not {policy!r}")
    max_bytes = values["max_bytes"]
    return {
        "max_staleness": whole("max_staleness", values["max_staleness"]),
        "batch_groups": whole("batch_groups", values["batch_groups"], minimum=1),
        "policy": policy,
        "max_bytes": None if max_bytes is None else whole("max_bytes", max_bytes, minimum=1),
        **{
            name: seconds(name, values[name])
            for name in ("lease_s", "reservation_s", "admission_timeout_s")
        },
    }
