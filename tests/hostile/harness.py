"""Parent side of the hostile-input suite: runs mutants in child processes (address-space limit,
per-mutant wall-clock bound), so that a crash or a hang is caught and pinned to one mutant.

A child that dies or stalls is replaced and the campaign continues after the mutant that killed
it; that mutant's bytes are written to ``REPRO_DIR/mutant-<index>.safetensors``.

Run a campaign by hand:
    .venv/bin/python -m tests.hostile.harness 0 5000 --workers 2
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
CAMPAIGN = "py_wire-hostile-v1"
REPRO_DIR = (
    Path(os.environ.get("PY_WIRE_HOSTILE_REPRO_DIR", tempfile.gettempdir())) / "py_wire_hostile"
)
#: No mutant may take longer than this in one child (seconds; frames are a few KB: a mutant
#: takes well under a second, the bound is generous so a loaded machine is not read as a hang).
PER_MUTANT_TIMEOUT = float(os.environ.get("PY_WIRE_HOSTILE_TIMEOUT", "60"))


@dataclass
class Report:
    mutants: int = 0
    seconds: float = 0.0
    classes: Counter[str] = field(default_factory=Counter)
    findings: list[dict[str, Any]] = field(default_factory=list)

    def signatures(self) -> dict[tuple[str, str, str], list[dict[str, Any]]]:
        """Findings grouped by (kind, exception type, message with numbers blanked)."""
        import re

        groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
        for f in self.findings:
            msg = re.sub(r"\d+", "N", f.get("message", ""))[:160]
            key = (f["kind"], f.get("type", ""), msg)
            groups.setdefault(key, []).append(f)
        return groups

    def render(self, limit: int = 40) -> str:
        lines = [
            f"{self.mutants} mutants in {self.seconds:.1f} s; outcomes: "
            + ", ".join(f"{k}: {v}" for k, v in sorted(self.classes.items()))
        ]
        groups = self.signatures()
        lines.append(f"{len(self.findings)} findings in {len(groups)} distinct signatures")
        for (kind, typ, _msg), fs in sorted(groups.items(), key=lambda kv: -len(kv[1]))[:limit]:
            f = fs[0]
            lines.append(
                f"\n[{kind}] {typ} x{len(fs)} (mutants {sorted({x['index'] for x in fs})[:8]})"
            )
            entries = sorted({x["entry"] for x in fs})
            lines.append(f"  entries:  {', '.join(entries)[:500]}")
            lines.append(f"  message:  {f.get('message', '')[:400]}")
            if f.get("where"):
                lines.append(f"  where:    {f['where']}")
            lines.append(f"  mutation: {f['mutation'][:600]}")
            lines.append(
                f'  reproduce: python -c "from tests.hostile.harness import reproduce; '
                f'reproduce({f["index"]})"  (bytes: {REPRO_DIR}/mutant-{f["index"]}.safetensors)'
            )
        return "\n".join(lines)


def seeds_file() -> Path:
    from tests.hostile.seeds import build_seeds

    REPRO_DIR.mkdir(parents=True, exist_ok=True)
    path = REPRO_DIR / "seeds.pickle"
    seeds = build_seeds()
    tmp = path.with_suffix(f".{os.getpid()}")
    tmp.write_bytes(pickle.dumps(seeds))
    tmp.replace(path)
    return path


def save_mutant(index: int, campaign: str = CAMPAIGN) -> Path:
    from tests.hostile.mutate import mutant

    seeds = pickle.loads((REPRO_DIR / "seeds.pickle").read_bytes())
    m = mutant([(s.name, s.data) for s in seeds], index, campaign)
    out = REPRO_DIR / f"mutant-{index}.safetensors"
    out.write_bytes(m.data)
    (REPRO_DIR / f"mutant-{index}.txt").write_text(m.describe() + "\n")
    return out


def reproduce(index: int, campaign: str = CAMPAIGN) -> None:
    """Run one mutant in this process, printing every finding (a crash kills this process)."""
    from tests.hostile import runner

    path = seeds_file()
    seeds = pickle.loads(path.read_bytes())
    from tests.hostile.mutate import mutant

    m = mutant([(s.name, s.data) for s in seeds], index, campaign)
    seed = next(s for s in seeds if s.name == m.seed_name)
    print(m.describe())
    findings, outcome = runner.run_mutant(m.data, seed, runner._reference(seed), tempfile.mkdtemp())
    print(outcome)
    for f in findings:
        print(json.dumps(f, indent=1))


def _spawn(
    seeds: Path, start: int, stop: int, campaign: str, tag: str
) -> tuple[subprocess.Popen[bytes], Path, Path]:
    progress = REPRO_DIR / f"progress-{tag}-{start}"
    results = REPRO_DIR / f"results-{tag}-{start}.jsonl"
    results.write_text("")
    progress.write_text("")
    env = dict(os.environ, PY_WIRE_THREADS="1", OMP_NUM_THREADS="1", PYTHONFAULTHANDLER="1")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tests.hostile.runner",
            str(seeds),
            campaign,
            str(start),
            str(stop),
            str(progress),
            str(results),
        ],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    return proc, progress, results


def _collect(results: Path, report: Report) -> None:
    for line in results.read_text().splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        if "summary" in rec:
            report.classes.update(rec["summary"])
        else:
            report.findings.append(rec)


def _current(progress: Path) -> int | None:
    lines = progress.read_text().split()
    if not lines or lines[-1] == "done":
        return None
    return int(lines[-1])


def run_range(start: int, stop: int, campaign: str = CAMPAIGN, workers: int = 1,
              seeds: Path | None = None) -> Report:  # fmt: skip
    """Run mutants ``start..stop`` in ``workers`` child processes."""
    from tests.hostile.mutate import mutant

    seeds = seeds or seeds_file()
    report = Report()
    t0 = time.monotonic()
    chunk = -(-(stop - start) // max(workers, 1))
    pending = [(s, min(s + chunk, stop)) for s in range(start, stop, chunk)]
    running: list[dict[str, Any]] = []
    tag = f"{os.getpid()}"
    while pending or running:
        while pending and len(running) < workers:
            a, b = pending.pop(0)
            proc, prog, res = _spawn(seeds, a, b, campaign, tag)
            running.append({"proc": proc, "prog": prog, "res": res, "range": (a, b), "seen": None,
                            "since": time.monotonic()})  # fmt: skip
        time.sleep(0.05)
        for r in list(running):
            proc: subprocess.Popen[bytes] = r["proc"]
            cur = _current(r["prog"])
            if cur != r["seen"]:
                r["seen"], r["since"] = cur, time.monotonic()
            rc = proc.poll()
            hung = (
                rc is None
                and cur is not None
                and time.monotonic() - r["since"] > PER_MUTANT_TIMEOUT
            )
            if rc is None and not hung:
                continue
            if hung:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            stderr = ""
            if proc.stderr:
                with proc.stderr:
                    stderr = proc.stderr.read().decode(errors="replace")
            _collect(r["res"], report)
            running.remove(r)
            a, b = r["range"]
            if rc == 0 and not hung:
                report.mutants += b - a
                continue
            # The child died or hung on mutant `cur` (or before its first mutant).
            bad = cur if cur is not None else a
            report.mutants += bad - a + 1
            m = mutant(_seed_pairs(seeds), bad, campaign)
            path = save_mutant(bad, campaign)
            if hung:
                kind, what = "hang", f"no progress for {PER_MUTANT_TIMEOUT:.0f} s"
            elif rc is not None and rc < 0:
                kind, what = "crash", f"killed by {signal.Signals(-rc).name}"
            else:
                kind, what = "crash", f"child exited with status {rc}"
            tail = [x for x in stderr.strip().splitlines() if x.strip()][-12:]
            report.findings.append({
                "kind": kind, "entry": "(see stderr)", "type": what,
                "message": " | ".join(tail)[-1500:], "index": bad, "seed": m.seed_name,
                "mutation": m.describe(), "file": str(path),
            })  # fmt: skip
            report.classes[kind] += 1
            if bad + 1 < b:
                pending.insert(0, (bad + 1, b))
    report.seconds = time.monotonic() - t0
    for f in report.findings:
        if f["kind"] not in ("crash", "hang") and "file" not in f:
            f["file"] = str(save_mutant(f["index"], campaign))
    return report


_PAIRS: dict[Path, list[tuple[str, bytes]]] = {}


def _seed_pairs(path: Path) -> list[tuple[str, bytes]]:
    if path not in _PAIRS:
        _PAIRS[path] = [(s.name, s.data) for s in pickle.loads(path.read_bytes())]
    return _PAIRS[path]


def run_cli_sample(indices: list[int], campaign: str = CAMPAIGN) -> list[str]:
    """The real ``py-wire inspect`` command on a few mutants: exit 0, or 1 with one line on
    stderr; never a traceback or a signal."""
    from tests.hostile.mutate import mutant

    seeds = _seed_pairs(REPRO_DIR / "seeds.pickle")
    exe = Path(sys.executable).with_name("py-wire")
    bad = []
    for i in indices:
        m = mutant(seeds, i, campaign)
        path = REPRO_DIR / f"cli-{i}.safetensors"
        path.write_bytes(m.data)
        cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "py_wire"]
        p = subprocess.run(
            [*cmd, "inspect", str(path)], capture_output=True, text=True, timeout=120
        )
        lines = p.stderr.strip().splitlines()
        if (
            p.returncode not in (0, 1)
            or (p.returncode == 1 and len(lines) != 1)
            or "Traceback" in p.stderr
        ):
            bad.append(f"{m.describe()}\n  py-wire inspect {path}: exit {p.returncode}\n  "
                       + "\n  ".join(lines[-6:]))  # fmt: skip
        else:
            path.unlink()
    return bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("start", type=int)
    ap.add_argument("stop", type=int)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--campaign", default=CAMPAIGN)
    ap.add_argument("--json", help="write the full report here")
    args = ap.parse_args()
    report = run_range(args.start, args.stop, args.campaign, args.workers)
    print(report.render(limit=200))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"mutants": report.mutants, "seconds": report.seconds, "classes": report.classes,
             "findings": report.findings}, indent=1))  # fmt: skip
    return 1 if report.findings else 0


if __name__ == "__main__":
    sys.exit(main())
