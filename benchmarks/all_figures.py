"""Every figure the README publishes, in one command, with the machine printed beside them.

    .venv/bin/python benchmarks/all_figures.py            # the README's settings (long)
    .venv/bin/python benchmarks/all_figures.py --quick    # every benchmark shrunk: a smoke run
    .venv/bin/python benchmarks/all_figures.py --only encode_curve pool

Runs each benchmark in its own process with the settings the README cites, one after another
(never two at once: they would time each other), prints its output as it comes and keeps it in
``<out>/<name>.txt``; bench.py and encode_curve.py also write their tables and charts under
``<out>``. Before and after every step it records the load average and free memory; the
machine (CPU model, cores, memory, Python, torch) and a summary table go to ``<out>/SUMMARY.md``
and ``<out>/summary.json``. ``--out`` defaults to benchmarks/out/figures (benchmarks/out/quick
with ``--quick``). A step whose script or dependencies are missing is skipped with a note.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import machine

HERE = Path(__file__).resolve().parent


@dataclass
class Step:
    name: str
    script: str
    full: list[str]  # the README's settings
    quick: list[str]  # shrunk, to prove the step runs
    cites: str  # where the README (or the issue) publishes its figures
    needs: tuple[str, ...] = ()  # modules beyond torch and py_wire
    env: dict[str, str] = field(default_factory=dict)
    quick_env: dict[str, str] | None = None  # env in quick mode, if it differs


def steps(out: Path) -> list[Step]:
    return [
        Step(
            "bench",
            "bench.py",
            ["--profile", "all", "--reps", "5", "--out", str(out / "bench")],
            [
                "--profile",
                "all",
                "--scale",
                "0.03",
                "--reps",
                "2",
                "--budget",
                "0.3",
                "--out",
                str(out / "bench"),
            ],
            "README Performance table (vlm / text / tiny, all peers, 2 copy threads, out=, "
            "encode_parts), flatness (vlm decode at s and 10s), benchmarks/results/",
            ("pyarrow", "tensordict", "safetensors", "matplotlib"),
        ),
        Step(
            "encode_curve",
            "encode_curve.py",
            ["--max-gb", "8", "--reps", "5", "--out", str(out)],
            ["--max-gb", "0.0625", "--reps", "2", "--out", str(out)],
            "issue 10: encode at one thread <= 1.25x memcpy from 32 MiB to 8 GiB, with and "
            "without out= (needs ~26 GiB free at 8 GiB; larger sizes are skipped otherwise)",
        ),
        Step(
            "encode_floor",
            "encode_floor.py",
            ["--runs", "3", "--reps", "5", "--out", str(out / "floor")],
            ["--sizes-mb", "8", "64", "--reps", "2", "--out", str(out / "floor")],
            "issue 19: encode at one thread against one streaming memcpy of its payload and "
            "per-tensor copies, 8 MiB to 2.5 GiB and the 217 MB batch (needs ~11 GiB free)",
        ),
        Step(
            "pool",
            "pool.py",
            ["--mb", "512", "--reps", "5"],
            ["--mb", "64", "--reps", "2"],
            "README Performance: 512 MiB frame at twice a 256 MiB pool budget (encode x memcpy, "
            "take_rows/chunk(8) alternating)",
            env={"PY_WIRE_FRAME_POOL_BYTES": "268435456"},
            quick_env={"PY_WIRE_FRAME_POOL_BYTES": "33554432"},  # same 2x ratio at 64 MiB
        ),
        Step(
            "ops_memory",
            "ops_memory.py",
            ["--rows", "1000", "65536", "262144", "1048576"],
            ["--rows", "1000", "16384"],
            "README Performance: frame ops' peak bytes per output row and GB/s at 1M rows "
            "(issue 10: 1k to 1M rows)",
        ),
        Step(
            "compact_frames",
            "compact_frames.py",
            ["--reps", "1500"],
            ["--reps", "100"],
            "issue 19: a 1-row and a 1k-row frame's fixed cost, embedded against compact "
            "headers (encode, decode, take_rows in order and shuffled)",
        ),
        Step(
            "tiny_rows",
            "tiny_rows.py",
            [],
            ["--tensors", "16384", "--reps", "3"],
            "issue 10: 262k tiny tensors from lists against torch.cat and safetensors",
            ("safetensors",),
        ),
        Step(
            "transport",
            "transport.py",
            ["--rows", "44", "--reps", "5"],
            ["--rows", "4", "--reps", "2"],
            "README Moving frames (gloo send/recv, broadcast_object_list, save, load) and "
            "Feeding a trainer (row-window micro-batches, take_rows, pack_sequences)",
        ),
        Step(
            "ray_transport",
            "ray_transport.py",
            ["--rows", "44", "--reps", "5"],
            ["--rows", "4", "--reps", "2"],
            "README Moving frames: a frame through Ray against the pickled dict",
            ("ray",),
        ),
        Step(
            "file_transport",
            "file_transport.py",
            ["--rows", "44", "--reps", "5"],
            ["--rows", "4", "--reps", "2"],
            "README Moving frames: save/load against torch.save/torch.load",
        ),
        Step(
            "grpo_shard",
            "grpo_shard.py",
            ["--prompts", "2", "--group", "16", "--reps", "3"],
            ["--prompts", "1", "--group", "4", "--reps", "2"],
            "benchmarks/SCALING.md: one GRPO logprob shard, py_wire against the pickled dict",
        ),
        Step(
            "h2d",
            "h2d.py",
            ["--mb", "1024", "--reps", "5"],
            ["--mb", "64", "--reps", "2"],
            "benchmarks/SCALING.md: a frame to the GPU (prints a note and skips without CUDA)",
        ),
        Step(
            "stage_overlap",
            "stage_overlap.py",
            ["--reps", "5"],
            ["--prompts", "2", "--group", "4", "--reps", "2"],
            "docs/trainer.md: micro-batches staged onto the GPU while a step computes (skips "
            "without CUDA)",
        ),
        Step(
            "contract_check",
            "contract_check.py",
            ["--tokens", "32768", "--images", "16", "--reps", "200"],
            ["--tokens", "32768", "--images", "16", "--reps", "20"],
            "README Performance: placeholder contract check on a 32,768-token row, 16 images",
        ),
    ]


def _missing(modules: tuple[str, ...]) -> list[str]:
    return [m for m in modules if importlib.util.find_spec(m) is None]


def run_step(step: Step, args: argparse.Namespace) -> dict[str, Any]:
    script = HERE / step.script
    record: dict[str, Any] = {"name": step.name, "cites": step.cites}
    if not script.exists():
        record.update(status="skipped", note=f"{step.script} is not in benchmarks/ yet")
        return record
    missing = _missing(step.needs)
    if missing:
        note = f"missing {', '.join(missing)} (pip install pyarrow tensordict matplotlib)"
        record.update(status="skipped", note=note)
        return record
    argv = step.quick if args.quick else step.full
    note = ""
    env_extra = step.quick_env if args.quick and step.quick_env is not None else step.env
    env = {**os.environ, **env_extra}
    shown_env = " ".join(f"{k}={v}" for k, v in env_extra.items())
    command = " ".join(
        [*([shown_env] if shown_env else []), "python", f"benchmarks/{step.script}", *argv]
    )
    log = args.out / f"{step.name}.txt"
    before = machine.facts()
    print(f"\n=== {step.name}: {command}", flush=True)
    print(
        f"    load average {before['load_average'][0]:.2f}, "
        f"MemAvailable {before['mem_available_gib']:.1f} GiB",
        flush=True,
    )
    if note:
        print(f"    note: {note}", flush=True)
    start = time.perf_counter()
    with log.open("w") as sink:
        sink.write(f"$ {command}\n{machine.describe(before)}\n\n")
        sink.flush()
        proc = subprocess.Popen(
            [sys.executable, str(script), *argv],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            # benchmarks/, not the repository root: children started with `python -c` and Ray's
            # workers put their working directory on sys.path, and the root's py_wire/ is the
            # unbuilt source (no _native) wherever the package is installed from elsewhere.
            cwd=HERE,
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            sink.write(line)
        code = proc.wait()
        wall = time.perf_counter() - start
        after = machine.facts()
        sink.write(
            f"\nexit {code}, wall {wall:.1f} s, load average after {after['load_average'][0]:.2f}\n"
        )
    record.update(
        status="ok" if code == 0 else f"exit {code}",
        command=command,
        log=str(log),
        wall_s=wall,
        load_before=before["load_average"],
        load_after=after["load_average"],
        mem_available_gib_before=before["mem_available_gib"],
        note=note,
    )
    return record


STABILITY = """\
Which figures carry across machines (see benchmarks/README.md): ratios to memcpy measured in
the same run (encode x memcpy, frame ops' bytes per row) and decode's O(fields) times are
comparable; absolute ms, copy-thread speedups and page-fault costs depend on this machine's
memory bandwidth, core count, kernel and neighbours' load.
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="shrink every benchmark")
    parser.add_argument("--out", type=Path, help="default benchmarks/out/figures (or /quick)")
    parser.add_argument("--only", nargs="+", help="run only these steps (names as printed)")
    args = parser.parse_args()
    args.out = (args.out or HERE / "out" / ("quick" if args.quick else "figures")).resolve()
    args.out.mkdir(parents=True, exist_ok=True)
    plan = steps(args.out)
    if args.only:
        unknown = set(args.only) - {s.name for s in plan}
        if unknown:
            parser.error(f"unknown steps {sorted(unknown)}; known: {[s.name for s in plan]}")
        plan = [s for s in plan if s.name in args.only]

    start = machine.facts()
    t0 = time.time()
    mode = "quick (every benchmark shrunk: not figures to publish)" if args.quick else "full"
    print(f"all figures, {mode}; output under {args.out}")
    print(machine.describe(start))
    records = [run_step(step, args) for step in plan]
    end = machine.facts()

    rows = []
    for r in records:
        if r["status"] == "skipped":
            rows.append(f"| {r['name']} | skipped: {r['note']} | | | {r['cites']} |")
            continue
        load = f"{r['load_before'][0]:.2f} → {r['load_after'][0]:.2f}"
        rows.append(
            f"| {r['name']} | {r['status']}: `{r['command']}` | {r['wall_s']:.0f} | {load} "
            f"| {r['cites']} |"
        )
    summary = (
        f"# All figures ({mode})\n\n"
        f"`{Path(sys.executable).name} benchmarks/all_figures.py {' '.join(sys.argv[1:])}`, "
        f"wall {time.time() - t0:.0f} s. Each step's full output: `<step>.txt` beside this "
        "file.\n\n"
        f"Machine at start:\n\n```\n{machine.describe(start)}\n```\n\n"
        "| step | command | wall s | load average (1 min) before → after | figures for |\n"
        "|---|---|---|---|---|\n" + "\n".join(rows) + "\n\n"
        f"Machine at end:\n\n```\n{machine.describe(end)}\n```\n\n{STABILITY}"
    )
    (args.out / "SUMMARY.md").write_text(summary)
    (args.out / "summary.json").write_text(
        json.dumps({"machine_before": start, "machine_after": end, "steps": records}, indent=1)
    )
    print("\n" + summary)
    failed = [r["name"] for r in records if r["status"] not in ("ok", "skipped")]
    if failed:
        print(f"failed: {failed}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
