"""torch dtypes by the names schema files use (torch's own: ``"float32"``, ``"bfloat16"``)."""

from __future__ import annotations

from typing import Literal, get_args

import torch

from py_wire import _native

#: dtype names a schema may use (torch's names).
DTypeName = Literal[
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
]
#: Every dtype a frame can carry, by its schema name.
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name) for name in get_args(DTypeName) if hasattr(torch, name)
}
NAMES: dict[torch.dtype, str] = {dtype: name for name, dtype in DTYPES.items()}

_native.register_torch(
    torch.Tensor,
    [(dtype, name) for name, dtype in DTYPES.items()],
    strided=torch.strided,
    mode_enabled=torch._C._is_torch_function_mode_enabled,
)
