"""Side-by-side encode/decode benchmark of py_wire and the transports RL frameworks use today.

    python benchmarks/bench.py [--profile vlm|text|tiny|all] [--scale 0.25] [--reps 5]
                               [--out benchmarks/out]

Each profile runs in a fresh child process (so one profile's memory cannot flatter or hurt
another's peak figures); the parent collects their JSON and writes results.md / results.png.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import report
from report import TIMES

if TYPE_CHECKING:
    from harness import Peer
    from profiles import Profile

CHILD_ENV = {
    # Fixed (not adaptive) mmap threshold: blocks >= 1 MiB are mmapped and unmapped on free,
    # so memory freed by one call is not silently reused by the next one's peak figure.
    "MALLOC_MMAP_THRESHOLD_": str(1 << 20),
    "ARROW_DEFAULT_MEMORY_POOL": "system",
}
# Two-thread copy kernels stall whenever a neighbour takes one of this box's two cores (5-13x
# slower, measured), so the children run with --threads (default 1) everywhere.
THREAD_VARIABLES = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS", "PY_WIRE_THREADS")
FLATNESS_FACTOR = 10


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", choices=("vlm", "text", "tiny", "all"), default="all")
    parser.add_argument("--scale", type=float, default=1.0, help="shrinks sample counts")
    parser.add_argument("--reps", type=int, default=5, help="timed repetitions after a warm-up")
    parser.add_argument(
        "--budget",
        type=float,
        default=1.5,
        help="seconds of timed reps per direction (slow peers get fewer reps)",
    )
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="threads for torch, Arrow and Rayon (1: stable on a shared box)",
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "out")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--flatness", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--json", type=Path, help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def _log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# -- child processes ------------------------------------------------------------------------


def _run_profile(args: argparse.Namespace) -> None:
    from harness import Result, Skip, run_peer
    from peers import PEERS
    from profiles import make_profile
    from wire_peers import NOT_BUILT, WIRE_PEERS

    start = time.perf_counter()
    profile = make_profile(args.worker, args.scale)
    out: dict[str, Any] = {
        "profile": profile.name,
        "rows": profile.num_rows,
        "payload": profile.payload_bytes(),
        "results": [],
    }
    _log(
        f"[{profile.name}] {profile.num_rows} rows, {out['payload'] / 1e6:.0f} MB, built in "
        f"{time.perf_counter() - start:.1f} s"
    )
    peers = PEERS if NOT_BUILT else PEERS + WIRE_PEERS
    if NOT_BUILT:
        out["results"].append(Result(profile.name, "py_wire", "—", status=NOT_BUILT).as_dict())
    for peer in peers:
        start = time.perf_counter()
        try:
            results = run_peer(profile, peer, args.reps, args.budget)
        except Skip as skip:
            results = [Result(profile.name, peer.name, "—", status=str(skip))]
        except Exception as error:  # a broken peer is reported, not fatal
            results = [Result(profile.name, peer.name, "—", status=f"error: {error!r}"[:200])]
        out["results"] += [r.as_dict() for r in results]
        args.json.write_text(json.dumps(out))
        _log(f"[{profile.name}] {peer.name}: {time.perf_counter() - start:.1f} s")
        gc.collect()


def _decode_seconds(peer: Peer, profile: Profile, args: argparse.Namespace) -> float:
    from harness import repeat, sample

    codec = peer.make(profile)
    wire = codec.encode()
    warmup = sample(lambda: codec.decode(wire))
    warmup.value = None
    timed = repeat(lambda: codec.decode(wire), warmup, args.reps, args.budget)
    assert timed.median_s is not None
    return timed.median_s


def _run_flatness(args: argparse.Namespace) -> None:
    from peers import PEERS
    from profiles import make_profile
    from wire_peers import DECODE_DEFAULT, NOT_BUILT

    wanted = ("pyarrow IPC → nested", "pickle p5 out-of-band → rows")
    peers = [p for p in PEERS if p.name in wanted] + ([] if NOT_BUILT else [DECODE_DEFAULT])
    points: list[dict[str, Any]] = []
    for scale in (args.scale, args.scale * FLATNESS_FACTOR):
        profile = make_profile("vlm", scale)
        for peer in peers:
            seconds = _decode_seconds(peer, profile, args)
            gc.collect()
            points.append(
                {
                    "method": peer.name,
                    "scale": scale,
                    "rows": profile.num_rows,
                    "payload": profile.payload_bytes(),
                    "median_s": seconds,
                }
            )
            _log(f"[flatness] {peer.name} at scale {scale:g}: {seconds * 1e3:.3g} ms")
        del profile
        gc.collect()
    args.json.write_text(json.dumps(points))


def _child(args: argparse.Namespace, role: list[str], path: Path) -> Any:
    """Run one child; its JSON (possibly partial), or None when it wrote nothing."""
    command = [
        sys.executable,
        __file__,
        *role,
        "--scale",
        str(args.scale),
        "--reps",
        str(args.reps),
        "--budget",
        str(args.budget),
        "--threads",
        str(args.threads),
        "--json",
        str(path),
    ]
    path.unlink(missing_ok=True)
    threads = {name: str(args.threads) for name in THREAD_VARIABLES}
    env = {**os.environ, **CHILD_ENV, **threads}
    code = subprocess.run(command, env=env, check=False).returncode
    if code != 0:
        _log(f"child {role} exited with {code}")
    return json.loads(path.read_text()) if path.exists() else None


# -- parent ---------------------------------------------------------------------------------


def _flatness_md(points: list[dict[str, Any]]) -> str:
    lines = [
        f"## Flatness: vlm decode at scale s and {FLATNESS_FACTOR}{TIMES}s",
        "",
        f"Rows and payload both grow {TIMES}{FLATNESS_FACTOR}, so a decode that is O(rows) or"
        f" O(bytes) shows ~{FLATNESS_FACTOR}{TIMES}; one that is O(fields) shows ~1{TIMES}.",
        "",
        "| method | rows s → 10s | payload MB s → 10s | decode ms at s | at 10s | ratio |",
        "|---|---|---|---|---|---|",
    ]
    for small in points[: len(points) // 2]:
        big = next(p for p in points[len(points) // 2 :] if p["method"] == small["method"])
        lines.append(
            f"| {small['method']} | {small['rows']} → {big['rows']} | "
            f"{small['payload'] / 1e6:.0f} → {big['payload'] / 1e6:.0f} | "
            f"{small['median_s'] * 1e3:.3g} | {big['median_s'] * 1e3:.3g} | "
            f"{big['median_s'] / small['median_s']:.1f}{TIMES} |"
        )
    return "\n".join(lines)


NOTES = f"""## How to read this

- median ms: median of the timed repetitions after one warm-up; the warm-up is the round trip
  that verifies the peer bit for bit. "(n=k)": only k reps fitted the per-direction budget;
  "(n=1, warm-up)": one call was slower than the budget, so the warm-up is the only sample.
- GB/s: payload bytes (sum of the batch's tensors' nbytes) / median. {TIMES} memcpy: median / the
  profile's "memcpy → prealloc" encode median. round trip = encode median + decode median.
- peak MB: growth of the resident set during one call (VmHWM reset through
  /proc/self/clear_refs, minus VmRSS before), max over the reps; it counts newly touched
  pages: outputs and temporaries. A decode into views of its input shows ~0.
- Decoded forms: "→ rows" gives per-row tensors like the input; "→ nested" gives jagged
  torch.nested per-token fields and per-row views of the packed fields (py_wire's default).
- In-process, the out-of-band pickle decode gets the producer's own buffers back, so it copies
  nothing; "1 blob" adds the copy a transport makes to send them as one buffer.
"""


def _markdown(
    args: argparse.Namespace, runs: list[dict[str, Any]], flat: Any, load: str, seconds: float
) -> str:
    results = [r for run in runs for r in run["results"]]
    payloads = {run["profile"]: run["payload"] for run in runs}
    sizes = ", ".join(
        f"{run['profile']} {run['rows']} rows / {run['payload'] / 1e6:.0f} MB" for run in runs
    )
    parts = [
        "# py_wire benchmark",
        "",
        report.machine(),
        f"- run: scale {args.scale:g}, reps {args.reps}, budget {args.budget:g} s per direction,"
        f" {args.threads} thread(s),"
        f" wall {seconds:.0f} s; payloads: {sizes}",
        f"- load average (1 min) at start → end: {load} → {report.load_average()}"
        " (the box is shared: other work inflates and scatters the timings)",
        "",
        report.table(results, payloads, args.reps),
        "",
    ]
    if flat:
        parts += [_flatness_md(flat), ""]
    parts.append(NOTES)
    return "\n".join(parts)


def main(argv: list[str]) -> None:
    args = _parse(argv)
    if args.worker:
        return _run_profile(args)
    if args.flatness:
        return _run_flatness(args)
    start, load = time.perf_counter(), report.load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    profiles = ["vlm", "text", "tiny"] if args.profile == "all" else [args.profile]
    runs = [run for p in profiles if (run := _child(args, ["--worker", p], args.out / f"{p}.json"))]
    flat = _child(args, ["--flatness"], args.out / "flatness.json") if "vlm" in profiles else None
    markdown = _markdown(args, runs, flat, load, time.perf_counter() - start)
    (args.out / "results.md").write_text(markdown)
    report.chart(
        [r for run in runs for r in run["results"]],
        [run["profile"] for run in runs],
        args.out / "results.png",
    )
    print(markdown)


if __name__ == "__main__":
    main(sys.argv[1:])
