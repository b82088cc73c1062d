#!/usr/bin/env bash
# One entry point for users, developers and CI:
#   scripts/dev.sh demo    set up (venv, dependencies, Rust build) and run the demo
#   scripts/dev.sh test    set up and run every check: cargo fmt/clippy/test, ruff, mypy,
#                          stubtest, pytest
#   scripts/dev.sh setup   set up only
# Idempotent: a second run reuses the venv, the installed packages and cargo's build cache.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${PY_WIRE_VENV:-.venv}
PY=$VENV/bin/python

setup() {
  if [ ! -x "$PY" ]; then
    python3 -m venv "$VENV"
    "$PY" -m pip install --quiet --upgrade pip
  fi
  VENV=$(cd "$VENV" && pwd)
  PY=$VENV/bin/python
  stamp=$VENV/.requirements.sha256
  want=$(cat requirements-dev.txt requirements-nodeps.txt | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    "$PY" -m pip install --quiet -r requirements-dev.txt
    "$PY" -m pip install --quiet --no-deps -r requirements-nodeps.txt
    echo "$want" > "$stamp"
  fi
  # Release mode because the codec is measured. The first build installs the package
  # (editable, with the py-wire command); later ones only rebuild the extension in place.
  # Asked from outside the repository: from its root, the source folder itself is importable.
  extra=()
  if [ -x "$VENV/bin/py-wire" ] && (cd / && "$PY" -c "import py_wire" 2>/dev/null); then
    extra=(--skip-install)
  fi
  VIRTUAL_ENV=$VENV "$VENV/bin/maturin" develop --release --quiet "${extra[@]}" \
    > "$VENV/.maturin.log" 2>&1 || { cat "$VENV/.maturin.log"; exit 1; }
  # Fail here, loudly, if the build did not install: import it from another directory.
  (cd / && "$PY" -c "import py_wire._native") || { echo "py_wire is not installed" >&2; exit 1; }
  [ -x "$VENV/bin/py-wire" ] || { echo "the py-wire command is not installed" >&2; exit 1; }
}

run_tests() {
  echo "== cargo fmt --check"; cargo fmt --all --check
  echo "== cargo clippy"; cargo clippy --all-targets -- -D warnings
  cargo clippy --all-targets --features python -- -D warnings
  echo "== Rust import loops"; "$PY" scripts/rust_import_cycles.py
  echo "== cargo test"; cargo test --quiet
  echo "== ruff"
  "$VENV/bin/ruff" check .
  "$VENV/bin/ruff" format --check .
  echo "== mypy"; "$VENV/bin/mypy"  # strict, on py_wire: see [tool.mypy] in pyproject.toml
  echo "== stubtest"
  # _native.pyi against the compiled module. The allowlist names what Python 3.11 cannot show
  # (see the file); on 3.12+ it would list unused entries, which stubtest reports as errors.
  allow=()
  if "$PY" -c 'import sys; sys.exit(sys.version_info >= (3, 12))'; then
    allow=(--allowlist scripts/stubtest-allowlist-py311.txt)
  fi
  "$PY" -m mypy.stubtest py_wire._native "${allow[@]}"
  echo "== pytest"; "$PY" -m pytest "$@"
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; "$PY" -m py_wire.demo "$@" ;;
  test) setup; run_tests "$@" ;;
  *) echo "usage: scripts/dev.sh [demo|test|setup]" >&2; exit 2 ;;
esac
