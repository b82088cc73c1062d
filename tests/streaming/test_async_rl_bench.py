"""CI runs the fully-async benchmark's quick mode: every property it checks (exactly once,
staleness within the bound, no length bias, peak bytes under the budget) on Ray alone, on
real TransferQueue and beside verl's message queue; the speed is reported, not asserted
(``--no-speed-check``: CI machines are shared)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Ray start-up (and the benchmark) on a loaded 2-core machine can take minutes.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]  # spawns Ray (see pyproject's markers)

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "async_rl.py"


def test_quick_run_holds_every_property() -> None:
    run = subprocess.run(
        [sys.executable, str(BENCH), "--quick", "--no-speed-check"],
        capture_output=True,
        text=True,
        timeout=540,
        check=False,
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    for path in ("ray", "tq", "verl"):
        assert f"{path:5s} 200 groups" in run.stdout, run.stdout
