"""Smoke test of an installed wheel, run by ``scripts/dev.sh wheel-test`` from a directory outside
the checkout, in a venv that holds the wheel and no Rust toolchain:
``python wheel_smoke.py VENV``.

Checks that the package imported is the wheel's (not the checkout's), that every bundled schema
round-trips a generated batch through an embedded and a compact frame, a file and frame ops,
that the ``py-wire`` command runs, and that the demo runs without hypothesis (a dev-only
dependency). On aarch64 it also checks that no copy streams (docs/performance.md, "aarch64").

``PY_WIRE_SMOKE_RUNNER`` (a command prefix, such as ``qemu-aarch64-static -L ROOT``) starts the
subprocesses where the kernel cannot start the interpreter itself (an aarch64 CPython under
emulation with no binfmt handler): the ``py-wire`` script is then run by this interpreter."""

from __future__ import annotations

import os
import platform
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

import py_wire
from py_wire._compare import assert_batch_equal
from py_wire.synth.registry import GENERATORS, generate

NO_HYPOTHESIS = (
    "import sys; sys.modules['hypothesis'] = None; import runpy; "
    "sys.argv = ['demo', '--samples', '4', '--reps', '1']; "
    "runpy.run_module('py_wire.demo', run_name='__main__')"
)


RUNNER = shlex.split(os.environ.get("PY_WIRE_SMOKE_RUNNER", ""))


def check(ok: bool, what: str) -> None:
    if not ok:
        raise SystemExit(f"wheel smoke test failed: {what}")


def main() -> None:
    venv = Path(sys.argv[1]).resolve()
    where = Path(py_wire.__file__).resolve()
    check(venv in where.parents, f"py_wire imported from {where}, not from the wheel in {venv}")
    native = Path(py_wire._native.__file__).resolve()
    check(venv in native.parents, f"the codec came from {native}")
    check(".abi3." in native.name, f"the codec {native.name} is not an abi3 extension")

    schemas = py_wire.bundled_schemas()
    check(set(GENERATORS) <= set(schemas), "a generator names no bundled schema")
    with tempfile.TemporaryDirectory() as tmp:
        for name in GENERATORS:
            schema = py_wire.load_schema(name)
            batch = generate(name, 6, seed=1)
            frame = py_wire.encode(batch, schema)
            assert_batch_equal(py_wire.decode(frame), batch, schema)
            compact = py_wire.encode(batch, schema, compact=True)
            check(len(compact) < len(frame), f"{name}: the compact frame is not smaller")
            assert_batch_equal(py_wire.decode(compact, layout="list"), batch, schema)
            path = Path(tmp, "frame.pwf")
            py_wire.save(frame, path)
            check(bytes(py_wire.load(path)) == bytes(frame), f"{name}: save/load")
            joined = py_wire.concat(py_wire.split(frame, [3, 3]))
            assert_batch_equal(py_wire.decode(joined), batch, schema)

    command = [str(venv / "bin" / "py-wire")]
    if RUNNER:
        command = [*RUNNER, sys.executable, *command]
    listed = subprocess.run(
        [*command, "schema", "list"], check=True, capture_output=True, text=True
    ).stdout
    check(all(name in listed for name in schemas), "py-wire schema list misses a schema")
    subprocess.run([*RUNNER, sys.executable, "-c", NO_HYPOTHESIS], check=True, capture_output=True)

    # aarch64 has no streaming-store copy: the codec says it never streams, even when
    # PY_WIRE_STREAMING=always (as scripts/dev.sh wheel-test runs it there).
    threshold, _, glibc = py_wire._native.streaming_threshold()
    if platform.machine() == "aarch64":
        check(threshold == 2**64 - 1 and glibc is None, f"aarch64 streams from {threshold}")
    print(
        f"wheel smoke test ({platform.machine()}): py_wire {py_wire.__version__} "
        f"from {where.parent}, "
        f"{len(GENERATORS)} schemas round-tripped, py-wire and the demo ran without hypothesis"
    )


if __name__ == "__main__":
    main()
