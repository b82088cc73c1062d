"""results.md (machine, table, notes) and results.png (one log-scale bar chart per profile)."""

from __future__ import annotations

import os
import platform
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

TIMES = "\u00d7"
REFERENCE = ("memcpy → prealloc", "encode")
DIRECTIONS = ("encode", "decode", "round trip")
COLUMNS = (
    "profile",
    "method",
    "direction",
    "median ms",
    "GB/s",
    f"{TIMES} memcpy (prealloc)",
    "peak MB",
)


def machine() -> str:
    import pyarrow
    import safetensors
    import tensordict
    import torch

    model = "unknown CPU"
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return (
        f"- machine: {len(os.sched_getaffinity(0))} CPUs (nproc), {model}, {platform.machine()}\n"
        f"- python {platform.python_version()}, torch {torch.__version__}, "
        f"pyarrow {pyarrow.__version__}, safetensors {safetensors.__version__}, "
        f"tensordict {tensordict.__version__}"
    )


def load_average() -> str:
    with open("/proc/loadavg") as f:
        return f.read().split()[0]


def _reference(results: list[dict[str, Any]], profile: str) -> float | None:
    for r in results:
        if r["profile"] == profile and (r["method"], r["direction"]) == REFERENCE:
            return r["median_s"]
    return None


def _median_cell(r: dict[str, Any], reps: int) -> str:
    ms = f"{r['median_s'] * 1e3:.3g}"
    if r["reps"] == 0:
        return f"{ms} (n=1, warm-up)"
    return ms if r["reps"] >= reps else f"{ms} (n={r['reps']})"


def _row(r: dict[str, Any], payload: int, ref: float | None, reps: int) -> list[str]:
    head = [r["profile"], r["method"], r["direction"]]
    if r["median_s"] is None:
        return [*head, r["status"], "—", "—", "—"]
    seconds = r["median_s"]
    peak = "—" if r["peak_bytes"] is None else f"{r['peak_bytes'] / 1e6:.0f}"
    return [
        *head,
        _median_cell(r, reps),
        f"{payload / seconds / 1e9:.2f}",
        "—" if ref is None else f"{seconds / ref:.2f}",
        peak,
    ]


def table(results: list[dict[str, Any]], payloads: dict[str, int], reps: int) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in results:
        ref = _reference(results, r["profile"])
        cells = _row(r, payloads.get(r["profile"], 0), ref, reps)
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chart(results: list[dict[str, Any]], profiles: list[str], path: Path) -> None:
    timed = [r for r in results if r["median_s"] is not None]
    methods = {
        p: list(dict.fromkeys(r["method"] for r in timed if r["profile"] == p)) for p in profiles
    }
    heights = [max(1, len(m)) * 0.45 + 1 for m in methods.values()]
    fig, axes = plt.subplots(
        len(profiles),
        1,
        figsize=(10, sum(heights)),
        gridspec_kw={"height_ratios": heights},
        squeeze=False,
    )
    width = 0.27
    for ax, profile in zip(axes[:, 0], profiles, strict=True):
        names = methods[profile]
        for k, direction in enumerate(DIRECTIONS):
            ys, xs = [], []
            for i, name in enumerate(names):
                for r in timed:
                    if (r["profile"], r["method"], r["direction"]) == (profile, name, direction):
                        ys.append(i + (k - 1) * width)
                        xs.append(r["median_s"] * 1e3)
            ax.barh(ys, xs, height=width, label=direction)
        ax.set_yticks(range(len(names)), names, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.set_xlabel("median ms (log)")
        ax.set_title(f"profile {profile}")
        ax.grid(axis="x", which="both", alpha=0.3)
        ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
