"""What a process keeps for schemas it no longer references stays within the learnt budget
(``PY_WIRE_LEARNT_SCHEMA_BYTES``, 64 MiB by default): a schema the process builds, uses and
drops is let go like one learnt from a frame.

Each case runs in a fresh interpreter and measures its resident memory after
``gc.collect()`` and ``malloc_trim(0)``, before and after the cycles (never a timing). CI runs
the counts below; ``PY_WIRE_SCHEMA_MEMORY_PROFILE=long`` runs the issue's (100,000 small
schemas, 768 of 1 MB). Before schemas were released, 20,000 small ones grew a process by about
19 MiB (CI's bound: 8) and 100 of 1 MB by 96 MiB (the bound: the budget and 16 MiB).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LONG = os.environ.get("PY_WIRE_SCHEMA_MEMORY_PROFILE") == "long"
MIB = 1 << 20
BUDGET = 64 * MIB

#: The cycles of one case: build a schema with ``Schema.from_dict``, encode a batch with it
#: (which holds it for compact frames), drop both.
CYCLES = textwrap.dedent(
    """
    import ctypes, gc, json, sys
    import torch
    import py_wire

    libc = ctypes.CDLL("libc.so.6")

    def rss():
        gc.collect()
        libc.malloc_trim(0)
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def cycle(tag, i, description):
        schema = py_wire.Schema.from_dict({
            "name": f"{tag}_{i}",
            "fields": {"r": {"tier": "scalar", "dtype": "float32", "description": description}},
        })
        frame = py_wire.encode({"r": torch.ones(2)}, schema)
        assert py_wire.decode(frame)["r"].tolist() == [1.0, 1.0]

    count, size = int(sys.argv[1]), int(sys.argv[2])
    description = "d" * size
    for i in range(20):  # warm up: imports, pools, the first codecs
        cycle("warm", i, "")
    before = rss()
    for i in range(count):
        cycle("cycle", i, description)
    print(json.dumps({"before": before, "after": rss()}))
    """
)


def _growth(count: int, size: int) -> int:
    out = subprocess.run(
        [sys.executable, "-c", CYCLES, str(count), str(size)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1200,
        env={k: v for k, v in os.environ.items() if k != "PY_WIRE_LEARNT_SCHEMA_BYTES"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    return int(measured["after"]) - int(measured["before"])


def test_small_schemas_built_and_dropped_are_released() -> None:
    # The learnt bounds cap what released schemas keep (4,096 of them here): growth levels off.
    count, bound = (100_000, 16 * MIB) if LONG else (20_000, 8 * MIB)
    growth = _growth(count, 0)
    assert growth <= bound, f"{count} schemas built and dropped grew RSS by {growth / MIB:.1f} MiB"


def test_large_schemas_built_and_dropped_stay_within_the_budget() -> None:
    count = 768 if LONG else 100
    growth = _growth(count, 1_000_000)
    assert growth <= BUDGET + 16 * MIB, (
        f"{count} schemas of 1 MB built and dropped grew RSS by {growth / MIB:.1f} MiB "
        f"(budget {BUDGET / MIB:.0f} MiB)"
    )


@pytest.mark.parametrize("held", [True, False], ids=["held", "dropped"])
def test_a_schema_is_held_while_referenced(held: bool) -> None:
    import gc

    import torch

    import py_wire
    from py_wire import _native

    schema = py_wire.Schema.from_dict(
        {"name": f"referenced_{held}", "fields": {"r": {"tier": "scalar", "dtype": "float32"}}}
    )
    py_wire.load_schema(schema)
    frame = bytes(memoryview(py_wire.encode({"r": torch.ones(1)}, schema, compact=True)))
    fingerprint = schema.fingerprint
    if not held:
        del schema
        gc.collect()
    previous = _native.set_learnt_schema_budget(0)  # let go of everything not held
    try:
        assert (_native.held_schema(fingerprint) is not None) is held
    finally:
        _native.set_learnt_schema_budget(previous)
    if held:
        assert py_wire.decode(frame)["r"].tolist() == [1.0]
    else:
        with pytest.raises(py_wire.FrameError, match=fingerprint):
            py_wire.decode(frame)
