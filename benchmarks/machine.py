"""What a benchmark ran on, printed beside its figures: CPU model, cores, memory, load average,
Python and torch versions. Standard library only (torch is read if importable), Linux /proc.

    .venv/bin/python benchmarks/machine.py          # one line per fact
    .venv/bin/python benchmarks/machine.py --json   # the same as JSON
"""

from __future__ import annotations

import json
import os
import platform
import sys
from typing import Any


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def meminfo_gib(key: str) -> float | None:
    """A /proc/meminfo entry (``MemTotal``, ``MemAvailable``) in GiB; None off Linux."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return None


def load_average() -> tuple[float, float, float]:
    return os.getloadavg()


def non_temporal_threshold() -> str:
    """glibc's ``x86_non_temporal_threshold``: memcpy streams (non-temporal stores) above it."""
    import subprocess

    for loader in ("/lib64/ld-linux-x86-64.so.2", "/lib/ld-linux-aarch64.so.1"):
        try:
            out = subprocess.run(
                [loader, "--list-tunables"], capture_output=True, text=True, timeout=10
            ).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        for line in out.splitlines():
            if "x86_non_temporal_threshold" in line:
                value = int(line.split(":")[1].split()[0], 16)
                return f"{value / 2**20:.0f} MiB"
    return "unknown"


def facts() -> dict[str, Any]:
    try:
        import torch

        torch_version = torch.__version__
    except ImportError:
        torch_version = "not installed"
    return {
        "cpu": cpu_model(),
        "non_temporal_threshold": non_temporal_threshold(),
        "cores_usable": len(os.sched_getaffinity(0)),
        "cores_online": os.cpu_count(),
        "mem_total_gib": meminfo_gib("MemTotal"),
        "mem_available_gib": meminfo_gib("MemAvailable"),
        "load_average": load_average(),
        "python": platform.python_version(),
        "torch": torch_version,
        "platform": platform.platform(),
        "env": {
            k: os.environ[k]
            for k in ("PY_WIRE_THREADS", "PY_WIRE_FRAME_POOL_BYTES", "PY_WIRE_HUGE_PAGES")
            if k in os.environ
        },
    }


def describe(info: dict[str, Any] | None = None) -> str:
    info = info or facts()
    load = ", ".join(f"{x:.2f}" for x in info["load_average"])
    total, avail = info["mem_total_gib"], info["mem_available_gib"]
    memory = f"{total:.1f} GiB total, {avail:.1f} GiB available" if total else "unknown"
    env = " ".join(f"{k}={v}" for k, v in info["env"].items()) or "none set"
    return (
        f"cpu: {info['cpu']}, {info['cores_usable']} usable cores ({info['cores_online']} online), "
        f"glibc x86_non_temporal_threshold {info.get('non_temporal_threshold', 'unknown')}\n"
        f"memory: {memory}\n"
        f"load average (1, 5, 15 min): {load}\n"
        f"python {info['python']}, torch {info['torch']}, {info['platform']}\n"
        f"py_wire environment: {env}"
    )


if __name__ == "__main__":
    if "--json" in sys.argv[1:]:
        print(json.dumps(facts(), indent=2))
    else:
        print(describe())
