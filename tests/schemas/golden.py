"""Golden frames (``tests/golden/``): one frame of each bundled schema, written by
``scripts/make_golden.py`` and read on every run by ``test_golden.py``. ``MANIFEST.json`` holds,
per frame, the schema it was written under and a digest of each decoded field, so that a later
reader must give back exactly what 1.0 wrote, whatever changed in between."""

from __future__ import annotations

import gzip
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

GOLDEN = Path(__file__).resolve().parents[1] / "golden"
MANIFEST = GOLDEN / "MANIFEST.json"
#: Rows per golden frame: enough for media, text-only rows and shared segments, small on disk.
ROWS = 3


def file_name(schema_name: str) -> str:
    return schema_name.replace("/", "__") + ".safetensors.gz"


def read(name: str) -> bytearray:
    """A golden frame's bytes (stored gzipped: their media tensors hold a repeating pattern)."""
    return bytearray(gzip.decompress((GOLDEN / name).read_bytes()))


def _feed(h: Any, value: Any) -> None:
    if value is None:
        h.update(b"N")
    elif isinstance(value, torch.Tensor):
        t = value.contiguous()
        h.update(f"T{t.dtype}{list(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(value, list):
        h.update(f"L{len(value)}".encode())
        for v in value:
            _feed(h, v)
    elif isinstance(value, str):
        # A row of a utf8 field, digested as the one uint8 segment the frame stores it in
        # (as decode returned it before fields with an encoding decoded to str).
        _feed(h, [torch.tensor(list(value.encode()), dtype=torch.uint8)])
    else:
        raise TypeError(f"cannot digest {type(value).__name__}")


def digests(decoded: Mapping[str, Any]) -> dict[str, str]:
    """Per field, the SHA-256 of what ``decode(..., layout="list")`` returned: every row's
    tensors (dtype, shape, bytes) or ``None``; a ``utf8`` row as its one segment of bytes."""
    out = {}
    for name, value in decoded.items():
        h = hashlib.sha256()
        _feed(h, value)
        out[name] = h.hexdigest()
    return out
