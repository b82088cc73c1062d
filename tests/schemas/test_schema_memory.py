"""What a process keeps for schemas it no longer references (the codec's registry, the texts
its frame reader checked, Python's typed views and the codecs they cache) stays within one
budget (``PY_WIRE_LEARNT_SCHEMA_BYTES``, 64 MiB by default; docs/compact-frames.md): a schema
the process builds, uses and drops is let go like one learnt from a frame, and a receiver of
ever new schemas levels off within the budget whatever their shape.

Each case runs in a fresh interpreter and measures its resident memory after
``gc.collect()`` and ``malloc_trim(0)``, before and after the cycles (never a timing). CI runs
the counts below, the receivers under a small budget (set by the variable); and
``PY_WIRE_SCHEMA_MEMORY_PROFILE=long`` runs the issue's (100,000 small schemas, 768 of 1 MB,
receivers at the default budget). Before schemas were released, 20,000 small ones grew a
process by about 19 MiB (CI's bound: 8) and 100 of 1 MB by 96 MiB (the bound: the budget and
16 MiB); before the one budget a receiver of 1 MB schemas levelled at 125 MiB and one of
4,096-field schemas at 350 MiB.
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

#: What each case's interpreter starts with: its imports, and ``rss()``: its resident memory
#: after ``gc.collect()`` and ``malloc_trim(0)``.
PRELUDE = textwrap.dedent(
    """
    import ctypes, gc, hashlib, json, sys
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
    """
)

#: The cycles of one case: build a schema with ``Schema.from_dict``, encode a batch with it
#: (which holds it for compact frames), drop both.
CYCLES = PRELUDE + textwrap.dedent(
    """
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


#: A receiver of frames whose schemas it has never seen: each frame is a peer's, a template
#: frame with its schema's name (and so its fingerprint) changed, so that this process only
#: receives (decodes, reads ``frame.schema``, checks the contracts), as a trainer fed by many
#: producers does. argv: count, fields, description bytes.
RECEIVER = PRELUDE + textwrap.dedent(
    """
    count, fields, size = (int(a) for a in sys.argv[1:4])
    schema = py_wire.Schema.from_dict({
        "name": "peer_000000",
        "fields": {
            f"f{j}": {"tier": "scalar", "dtype": "float32", "description": "d" * size}
            for j in range(fields)
        },
    })
    template = bytes(memoryview(py_wire.encode({n: torch.ones(1) for n in schema.fields}, schema)))
    canonical, old = schema.canonical_json, schema.fingerprint.removeprefix("sha256:")
    del schema

    def peer_frame(i):
        name = f"peer_{i:06d}"
        new = hashlib.sha256(canonical.replace("peer_000000", name, 1).encode()).hexdigest()
        return template.replace(b"peer_000000", name.encode(), 1).replace(
            old.encode(), new.encode(), 1
        )

    def receive(i):
        frame = py_wire.Frame.from_buffer(peer_frame(i))
        assert frame.schema.name == f"peer_{i:06d}"
        py_wire.check_contracts(frame)
        assert py_wire.decode(frame)["f0"].tolist() == [1.0]

    for i in range(1, 3):  # warm up: imports, pools
        receive(10**5 + i)
    # Start empty: what the warm-up kept is let go, so the growth is the whole level.
    py_wire._native.set_learnt_schema_budget(py_wire._native.set_learnt_schema_budget(0))
    before = rss()
    for i in range(1, count + 1):
        receive(i)
    print(json.dumps({"before": before, "after": rss()}))
    """
)


def _run(script: str, *args: int, budget: int | None = None) -> int:
    env = {k: v for k, v in os.environ.items() if k != "PY_WIRE_LEARNT_SCHEMA_BYTES"}
    if budget is not None:
        env["PY_WIRE_LEARNT_SCHEMA_BYTES"] = str(budget)
    out = subprocess.run(
        [sys.executable, "-c", script, *(str(a) for a in args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=3000,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    measured = json.loads(out.stdout.strip().splitlines()[-1])
    growth = int(measured["after"]) - int(measured["before"])
    kind = "receiver" if script is RECEIVER else "cycles"
    print(f"{kind} {args}: {growth / MIB:.1f} MiB")
    return growth


def _growth(count: int, size: int, budget: int | None) -> int:
    return _run(CYCLES, count, size, budget=budget)


#: What a receiver's RSS may exceed the budget by: the allocator's fragmentation and the
#: pools the first frames grew (measured: under CI's 4 MiB budget the receivers grow by 1.0 and
#: 1.4 MiB, where they grew by 34 and 20 MiB before the one budget; the 1 MB receiver levels at
#: 53 MiB under the default 64 MiB).
RECEIVER_SLACK = 16 * MIB if LONG else 4 * MIB


@pytest.mark.parametrize("shape", ["1MB-schemas", "wide-schemas"])
def test_a_receiver_of_new_schemas_levels_within_the_budget(shape: str) -> None:
    # CI: under a 4 MiB budget, enough frames to fill it twice over or more (a schema of 1 MB
    # costs about 4 MB: its checked text, its entry's JSON, its typed view; one of 1,024 fields
    # about 1.5 MB), fast; the long profile: the default budget, 4,096 fields, past the level
    # the issue measured (all caches together: 140-170 MiB and 400 MiB).
    fields, size = (1, 1_000_000) if shape == "1MB-schemas" else (4096 if LONG else 1024, 0)
    if LONG:
        count, budget = (120, None) if fields == 1 else (60, None)
    else:
        count, budget = (10, 4 * MIB) if fields == 1 else (6, 4 * MIB)
    growth = _run(RECEIVER, count, fields, size, budget=budget)
    budget = budget or BUDGET
    assert growth <= budget + RECEIVER_SLACK, (
        f"receiving {count} new schemas ({fields} fields) grew RSS by {growth / MIB:.1f} MiB "
        f"(budget {budget / MIB:.0f} MiB)"
    )


def test_small_schemas_built_and_dropped_are_released() -> None:
    # The budget caps what released schemas keep (CI: a 2 MiB budget, so that fewer cycles
    # reach the level): growth levels off.
    count, bound, budget = (100_000, 16 * MIB, None) if LONG else (10_000, 6 * MIB, 2 * MIB)
    growth = _growth(count, 0, budget)
    assert growth <= bound, f"{count} schemas built and dropped grew RSS by {growth / MIB:.1f} MiB"


def test_large_schemas_built_and_dropped_stay_within_the_budget() -> None:
    count, budget, slack = (768, BUDGET, 16 * MIB) if LONG else (24, 4 * MIB, 4 * MIB)
    growth = _growth(count, 1_000_000, None if LONG else budget)
    assert growth <= budget + slack, (
        f"{count} schemas of 1 MB built and dropped grew RSS by {growth / MIB:.1f} MiB "
        f"(budget {budget / MIB:.0f} MiB)"
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
