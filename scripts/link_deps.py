"""Make another venv's installed packages importable here, without copying or downloading them:
``python scripts/link_deps.py DEV_VENV`` (run by the *new* venv's python) links every entry of
DEV_VENV's site-packages, except py_wire's own, into ``<this venv>/dev-deps`` and adds that
folder to ``sys.path`` with a ``.pth`` file. ``scripts/dev.sh wheel-test`` uses it so that a
fresh venv holding only the wheel finds torch, numpy and pydantic (several GB) installed."""

from __future__ import annotations

import sys
import sysconfig
from pathlib import Path

#: py_wire's own entries in the dev venv (its editable install): never linked, so that the
#: package imported is the wheel's.
OWN = ("py_wire", "_py_wire", "__editable__", "py-wire")


def site_packages(venv: Path) -> Path:
    found = sorted(venv.glob("lib/python3*/site-packages"))
    if len(found) != 1:
        raise SystemExit(f"want one site-packages under {venv}, found {found}")
    return found[0]


def main() -> None:
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    source = site_packages(Path(sys.argv[1]).resolve())
    if Path(sys.prefix).resolve() == source.parents[2]:
        raise SystemExit("run this with the new venv's python, not the dev venv's")
    farm = Path(sys.prefix) / "dev-deps"
    farm.mkdir(exist_ok=True)
    linked = 0
    for entry in source.iterdir():
        if entry.name.startswith(OWN) or entry.suffix == ".pth":
            continue
        (farm / entry.name).symlink_to(entry)
        linked += 1
    Path(sysconfig.get_paths()["purelib"], "py_wire_dev_deps.pth").write_text(f"{farm}\n")
    print(f"linked {linked} entries of {source} into {farm}")


if __name__ == "__main__":
    main()
