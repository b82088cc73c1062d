#!/usr/bin/env bash
# One entry point for users, developers and CI:
#   scripts/dev.sh demo    set up (venv, dependencies, Rust build) and run the demo
#   scripts/dev.sh test    set up and run every check: cargo fmt/clippy/test, ruff, mypy,
#                          stubtest, pytest
#   scripts/dev.sh setup   set up only
#   scripts/dev.sh wheel   build the one wheel users install (abi3, manylinux_2_28, no Rust needed)
#   scripts/dev.sh wheel-test  install that wheel into a fresh venv with no Rust toolchain on
#                          PATH and run the demo and scripts/wheel_smoke.py from another directory
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

# The wheel: built by maturin with zig as the linker, so that it needs glibc 2.28 at most whatever
# this machine's glibc is; its own target directory, so that it never evicts the dev build.
DIST=target/dist
MAX_GLIBC_MINOR=28

wheel() {
  setup
  rm -rf "$DIST"
  # The venv first on PATH: maturin finds zig as `python3 -m ziglang` (requirements-dev.txt).
  PATH="$VENV/bin:$PATH" CARGO_TARGET_DIR=target/wheel-build "$VENV/bin/maturin" build \
    --release --quiet --interpreter "$PY" \
    --compatibility manylinux_2_28 --zig --out "$DIST"
  whl=$(one_wheel)
  case "$(basename "$whl")" in
    *-cp311-abi3-manylinux_2_*) ;;
    *) echo "not an abi3 manylinux wheel: $whl" >&2; exit 1 ;;
  esac
  # auditwheel reads the symbols the extension needs: the glibc it asks for must be 2.28 or older.
  show=$("$VENV/bin/auditwheel" show "$whl")
  echo "$show"
  minor=$(grep -oE 'manylinux_2_[0-9]+' <<< "$show" | head -1 | cut -d_ -f3)
  if [ -z "$minor" ] || [ "$minor" -gt "$MAX_GLIBC_MINOR" ]; then
    echo "the wheel needs a newer glibc than manylinux_2_$MAX_GLIBC_MINOR" >&2; exit 1
  fi
  echo "wheel: $whl ($(du -h "$whl" | cut -f1))"
}

one_wheel() {
  shopt -s nullglob
  local found=("$DIST"/*.whl)
  [ "${#found[@]}" -eq 1 ] || { echo "want one wheel in $DIST, found ${#found[@]}" >&2; exit 1; }
  echo "${found[0]}"
}

wheel_test() {
  wheel
  local whl repo tmp base
  whl=$(cd "$(dirname "$(one_wheel)")" && pwd)/$(basename "$(one_wheel)")
  repo=$(pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  base=$("$PY" -c 'import sys; print(sys._base_executable)')
  "$base" -m venv "$tmp/venv"
  # The venv's own (older) setuptools would shadow the linked one torch asks for.
  "$tmp/venv/bin/python" -m pip uninstall --quiet --yes setuptools 2>/dev/null || true
  # torch, numpy and pydantic come from the dev venv (linked, not downloaded again); pip then
  # finds the wheel's dependencies installed and fetches nothing (--no-index).
  "$tmp/venv/bin/python" scripts/link_deps.py "$VENV"
  (
    cd "$tmp"
    export PATH="$tmp/venv/bin:/usr/local/bin:/usr/bin:/bin"
    unset VIRTUAL_ENV CARGO_HOME RUSTUP_HOME
    if command -v cargo || command -v rustc; then
      echo "a Rust toolchain is on PATH: the wheel test must run without one" >&2; exit 1
    fi
    python -m pip install --quiet --no-index "$whl"
    python -m py_wire.demo --samples 8 --reps 1
    python "$repo/scripts/wheel_smoke.py" "$tmp/venv"
  )
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; "$PY" -m py_wire.demo "$@" ;;
  test) setup; run_tests "$@" ;;
  wheel) wheel ;;
  wheel-test) wheel_test ;;
  *) echo "usage: scripts/dev.sh [demo|test|setup|wheel|wheel-test]" >&2; exit 2 ;;
esac
