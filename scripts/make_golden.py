"""Write the golden frames: ``python scripts/make_golden.py`` (from the repository root).

One embedded frame (with checksums) of each bundled schema that has a generator, gzipped, into
``tests/golden/``: the generator's batch, its media tensors (anything of 4,096 elements or more)
refilled with a repeating pattern so that the files compress to a few kB (shapes, placeholder
runs and shared segments are the generator's); and ``tests/golden/MANIFEST.json`` with each
frame's schema and a digest of each decoded field. 1.0 wrote the current ones; rewrite them
only for a new major version. ``tests/schemas/test_golden.py`` reads them on every run, also
through the schema bundled now (the evolution rule: a 1.x may only add optional fields or
stages)."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import py_wire
from py_wire.synth.registry import GENERATORS, generate
from tests.schemas.golden import GOLDEN, MANIFEST, ROWS, digests, file_name

#: Tensors at least this large are refilled with a pattern (media: pixels, audio features).
REFILL = 4096


def refilled(value: Any, seen: dict[int, torch.Tensor]) -> Any:
    """``value`` with every large tensor replaced by a pattern of its dtype and shape; a tensor
    met twice (rows sharing one segment) is replaced by the same new tensor."""
    if isinstance(value, torch.Tensor) and not value.is_nested and value.numel() >= REFILL:
        if id(value) not in seen:
            pattern = torch.arange(value.numel()) % 61
            seen[id(value)] = pattern.to(value.dtype).reshape(value.shape)
        return seen[id(value)]
    if isinstance(value, list | tuple):
        return type(value)(refilled(v, seen) for v in value)
    return value


def main() -> None:
    GOLDEN.mkdir(exist_ok=True)
    manifest = {}
    for name in sorted(GENERATORS):
        schema = py_wire.load_schema(name)
        seen: dict[int, torch.Tensor] = {}
        batch = {k: refilled(v, seen) for k, v in generate(name, ROWS, seed=7).items()}
        frame = py_wire.encode(batch, schema, checksum=True)
        (GOLDEN / file_name(name)).write_bytes(gzip.compress(bytes(frame), mtime=0))
        manifest[name] = {
            "file": file_name(name),
            "py_wire": py_wire.__version__,
            "version": schema.version,
            "fingerprint": schema.fingerprint,
            "num_rows": frame.num_rows,
            "nbytes": len(frame),
            "fields": digests(py_wire.decode(frame, layout="list")),
        }
        print(
            f"{name}: {len(frame):,} bytes, {(GOLDEN / file_name(name)).stat().st_size:,} gzipped"
        )
    MANIFEST.write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()
