"""scripts/rust_import_cycles.py: the loops it reports, through a module's re-exports too."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "rust_import_cycles.py"


def _run(src: Path | None = None) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, str(SCRIPT)] + ([str(src)] if src is not None else [])
    return subprocess.run(args, capture_output=True, text=True, timeout=60, check=False)


def _crate(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_loop_through_a_modules_re_export_is_reported(tmp_path: Path) -> None:
    # encode/mod.rs plans with tier; tier names encode's input through encode/mod.rs's
    # re-export: a loop of files, though the item itself lives in encode/input.rs.
    src = _crate(
        tmp_path,
        {
            "lib.rs": "mod encode;\nmod tier;\n",
            "encode/mod.rs": "mod input;\npub use input::Input;\nuse crate::tier::plan;\n",
            "encode/input.rs": "pub struct Input;\n",
            "tier.rs": "use crate::encode::Input;\npub fn plan(_: Input) {}\n",
        },
    )
    out = _run(src)
    assert out.returncode == 1, out.stdout
    assert "loop: encode/mod.rs, tier.rs" in out.stdout
    assert "tier.rs:1 -> encode/mod.rs  (crate::encode::Input)" in out.stdout


def test_naming_the_defining_file_is_no_loop(tmp_path: Path) -> None:
    src = _crate(
        tmp_path,
        {
            "lib.rs": "mod encode;\nmod tier;\npub use encode::Input;\n",
            "encode/mod.rs": "pub mod input;\npub use input::Input;\nuse crate::tier::plan;\n",
            "encode/input.rs": "pub struct Input;\n",
            "tier.rs": "use crate::encode::input::Input;\npub fn plan(_: Input) {}\n",
        },
    )
    out = _run(src)
    assert out.returncode == 0, out.stdout
    assert "no loops" in out.stdout


def test_the_crate_has_no_loops() -> None:
    out = _run()
    assert out.returncode == 0, out.stdout
