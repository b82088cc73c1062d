"""The wire-cast golden data the Rust tests read (rust_codec/tests/data) is what the installed
torch computes: scripts/cast_vectors.py recomputes every vector and checksum and compares."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "cast_vectors.py"


def test_golden_cast_data_matches_torch() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT)], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stdout + done.stderr
