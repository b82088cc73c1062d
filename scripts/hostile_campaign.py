"""The hostile-argument campaign (issue 27): ``tests/hostile/test_hostile_sweep.py`` in chunks,
each in its own process with its own hypothesis seed, an address-space limit and a resident
memory watchdog, so that no chunk grows past the bound (a campaign in one process once grew
past 8 GB). Prints each chunk's outcome counts and the totals.

    .venv/bin/python scripts/hostile_campaign.py --chunks 8 --examples 100

A chunk makes about ``examples`` x (number of sweep targets) calls, then ``--schema-calls``
calls of ``Schema.from_json`` on mutated schema texts (``tests/hostile/test_hostile_schema.py``)
in a process of its own, then, with ``--placement-examples n``, ``RayBuffer``'s placement sweep
on a real Ray (``tests/hostile/test_hostile_placement.py``: 204 calls per example, 4 of them
placing an actor) under ``--placement-address-space-gib`` (Ray maps its object store)::

    .venv/bin/python scripts/hostile_campaign.py --chunks 4 --examples 0 --schema-calls 0 \
        --placement-examples 25
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def rss_bytes(pid: int) -> int:
    """Resident memory of ``pid`` and its children (pytest runs the calls in-process)."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0
    for line in text.splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


#: The campaign's parts: (test file, test, environment variable of its size per chunk).
SWEEP = ("tests/hostile/test_hostile_sweep.py", "test_sweep", "PY_WIRE_HOSTILE_EXAMPLES")
PLACEMENT = ("tests/hostile/test_hostile_placement.py", "test_sweep", "PY_WIRE_HOSTILE_EXAMPLES")
SCHEMA_TEXT = (
    "tests/hostile/test_hostile_schema.py",
    "test_from_json_campaign",
    "PY_WIRE_HOSTILE_SCHEMA_CALLS",
)


def run_chunk(
    part: tuple[str, str, str],
    seed: int,
    size: int,
    limit_as: int,
    max_rss: int,
    timeout: float,
) -> dict:
    test_file, test, size_variable = part
    report = Path(tempfile.mkstemp(prefix="py_wire_sweep_", suffix=".json")[1])
    env = {
        **os.environ,
        size_variable: str(size),
        "PY_WIRE_HOSTILE_SEED": str(seed),
        "PY_WIRE_HOSTILE_REPORT": str(report),
    }
    cmd = [
        sys.executable, "-m", "pytest", test_file, "-q",
        "-p", "no:cacheprovider", "-k", test, f"--hypothesis-seed={seed}",
    ]  # fmt: skip

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit_as, limit_as))

    start = time.monotonic()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, preexec_fn=limit, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    peak, killed = 0, ""
    while proc.poll() is None:
        peak = max(peak, rss_bytes(proc.pid))
        if peak > max_rss:
            killed = f"resident memory {peak >> 20} MiB over {max_rss >> 20} MiB"
        elif time.monotonic() - start > timeout:
            killed = f"over {timeout:.0f} s"
        if killed:
            proc.kill()
            break
        time.sleep(0.2)
    out = proc.communicate()[0].decode(errors="replace")
    counts = json.loads(report.read_text()) if report.stat().st_size else {}
    report.unlink()
    return {
        "test": test,
        "seed": seed,
        "rc": proc.returncode,
        "killed": killed,
        "seconds": round(time.monotonic() - start, 1),
        "peak_rss_mib": peak >> 20,
        "counts": counts,
        "tail": "" if proc.returncode == 0 else out[-3000:],
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--examples", type=int, default=100)
    parser.add_argument("--schema-calls", type=int, default=20000)
    parser.add_argument("--first-seed", type=int, default=1)
    parser.add_argument("--address-space-gib", type=float, default=6.0)
    parser.add_argument("--max-rss-gib", type=float, default=3.0)
    parser.add_argument("--timeout", type=float, default=600.0)
    parser.add_argument("--placement-examples", type=int, default=0)
    parser.add_argument("--placement-address-space-gib", type=float, default=64.0)
    args = parser.parse_args()
    total: Counter[str] = Counter()
    failed = 0
    for i in range(args.chunks):
        parts = (
            (SWEEP, args.examples),
            (SCHEMA_TEXT, args.schema_calls),
            (PLACEMENT, args.placement_examples),
        )
        for part, size in parts:
            if size <= 0:
                continue
            space = (
                args.placement_address_space_gib if part is PLACEMENT else args.address_space_gib
            )
            r = run_chunk(
                part,
                args.first_seed + i,
                size,
                int(space * 2**30),
                int(args.max_rss_gib * 2**30),
                args.timeout,
            )
            total.update(r["counts"])
            failed += r["rc"] != 0 or bool(r["killed"])
            tail = r.pop("tail")
            print(json.dumps(r, sort_keys=True), flush=True)
            if tail:
                print(tail, flush=True)
    print("total", json.dumps(dict(total), sort_keys=True), f"chunks failed: {failed}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
