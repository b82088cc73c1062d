"""torch dtypes by the names schema files use (torch's own: ``"float32"``, ``"bfloat16"``)."""

from __future__ import annotations

import torch

from py_wire import _native

#: Every dtype a frame can carry, by its schema name.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "bool",
        "uint8",
        "int8",
        "int16",
        "uint16",
        "int32",
        "uint32",
        "int64",
        "uint64",
        "float16",
        "bfloat16",
        "float32",
        "float64",
        "float8_e4m3fn",
        "float8_e5m2",
        "complex64",
        "complex128",
    )
    if hasattr(torch, name)
}
NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

FLOATING = frozenset(n for n, d in DTYPES.items() if d.is_floating_point)
INTEGRAL = frozenset(n for n, d in DTYPES.items() if not d.is_floating_point and not d.is_complex)

_native.register_torch(torch.Tensor, [(dtype, name) for name, dtype in DTYPES.items()])


def name_of(dtype: torch.dtype) -> str:
    return NAMES[dtype]
