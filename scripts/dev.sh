#!/usr/bin/env bash
# One entry point for users, developers and CI:
#   scripts/dev.sh demo    set up (venv, dependencies, Rust build) and run the demo
#   scripts/dev.sh test    set up and run every check: cargo fmt/clippy/test, ruff, mypy,
#                          stubtest, pytest
#   scripts/dev.sh setup   set up only
#   scripts/dev.sh wheel   build what users install into target/dist: the abi3 manylinux_2_28
#                          wheels for x86-64 and aarch64 (no Rust needed) and the sdist, each
#                          checked (auditwheel, twine check); installs the aarch64 tools it needs
#                          (scripts/aarch64_tools.sh, cached in ~/.cache/py_wire-ci)
#   scripts/dev.sh wheel-test  build them, install each wheel into a fresh venv with no Rust
#                          toolchain on PATH (aarch64's into an aarch64 CPython under qemu) and
#                          run the demo and scripts/wheel_smoke.py from another directory; then
#                          install the sdist (pip builds it with the machine's Rust) and smoke it
#   scripts/dev.sh test-aarch64  the crate's cargo tests built for aarch64, run under qemu
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
  # Two processes, each module in one of them (its Ray or TransferQueue started once):
  # PY_WIRE_TEST_WORKERS=0 runs the suite in this process alone.
  echo "== pytest"
  "$PY" -m pytest --numprocesses "${PY_WIRE_TEST_WORKERS:-2}" --dist loadfile "$@"
}

# The artefacts users install, into target/dist: an abi3 manylinux_2_28 wheel for x86-64 and one
# for aarch64 (GH200/GB200 nodes), both linked by zig so that they need glibc 2.28 at most whatever
# this machine's glibc is, and the sdist. aarch64 is built with Debian's Rust (its standard
# library for aarch64 comes from Debian too; scripts/aarch64_tools.sh unpacks both into a cache).
# Cargo's target folders live in that cache as well, so that CI's fresh clones build incrementally.
DIST=$PWD/target/dist  # absolute: the wheel tests read it from other directories
MAX_GLIBC_MINOR=28
# shellcheck source=scripts/aarch64_tools.sh
source scripts/aarch64_tools.sh

wheel() {
  setup
  rm -rf "$DIST"
  a64_tools
  # The venv first on PATH: maturin finds zig as `python3 -m ziglang` (requirements-dev.txt).
  PATH="$VENV/bin:$PATH" CARGO_TARGET_DIR=$A64_CACHE/target-wheel "$VENV/bin/maturin" build \
    --release --quiet --interpreter "$PY" \
    --compatibility manylinux_2_28 --zig --out "$DIST"
  # rustup's cargo drives Debian's rustc (RUSTC), which has aarch64's standard library; the
  # machine's own toolchain is left as it is.
  PATH="$VENV/bin:$PATH" RUSTC=$A64_RUSTC CARGO_TARGET_DIR=$A64_CACHE/target-wheel-aarch64 \
    "$VENV/bin/maturin" build --release --quiet --target aarch64-unknown-linux-gnu \
    --compatibility manylinux_2_28 --zig --out "$DIST"
  "$VENV/bin/maturin" sdist --out "$DIST" > /dev/null
  check_wheel "$(artefact x86_64.whl)" x86_64
  check_wheel "$(artefact aarch64.whl)" aarch64
  check_sdist "$(artefact .tar.gz)"
  # The metadata a registry page shows (license, classifiers, links, the README rendered).
  "$PY" -m twine check --strict "$DIST"/*
  for found in "$DIST"/*; do echo "built: $found ($(du -h "$found" | cut -f1))"; done
}

# The one artefact in $DIST whose name ends with $1.
artefact() {
  shopt -s nullglob
  local found=("$DIST"/*"$1")
  [ "${#found[@]}" -eq 1 ] || { echo "want one *$1 in $DIST, found ${#found[@]}" >&2; exit 1; }
  echo "$(cd "$(dirname "${found[0]}")" && pwd)/$(basename "${found[0]}")"
}

check_wheel() {
  local whl=$1 arch=$2 show minor
  case "$(basename "$whl")" in
    *-cp311-abi3-manylinux_2_*_"$arch".whl) ;;
    *) echo "not an abi3 manylinux $arch wheel: $whl" >&2; exit 1 ;;
  esac
  # auditwheel reads the symbols the extension needs: the glibc it asks for must be 2.28 or older.
  show=$("$PY" -m auditwheel show "$whl")
  echo "$show"
  grep -q "$arch" <<< "$show" || { echo "auditwheel does not see $arch in $whl" >&2; exit 1; }
  # The license text travels in the wheel's metadata, beside the license it declares.
  "$PY" -c 'import sys, zipfile; names = zipfile.ZipFile(sys.argv[1]).namelist()
sys.exit(not any(".dist-info/" in n and n.endswith("LICENSE") for n in names))' "$whl" ||
    { echo "$whl carries no LICENSE in its .dist-info" >&2; exit 1; }
  minor=$(grep -oE 'manylinux_2_[0-9]+' <<< "$show" | head -1 | cut -d_ -f3)
  if [ -z "$minor" ] || [ "$minor" -gt "$MAX_GLIBC_MINOR" ]; then
    echo "$whl needs a newer glibc than manylinux_2_$MAX_GLIBC_MINOR" >&2; exit 1
  fi
}

# The sdist carries what a build from it needs: the crate, its lock file, the package and its
# bundled schemas, and the README its metadata points at.
check_sdist() {
  local listing want
  listing=$(tar -tzf "$1")
  for want in pyproject.toml README.md LICENSE Cargo.lock rust_codec/Cargo.toml rust_codec/src/lib.rs \
    py_wire/__init__.py py_wire/_native.pyi py_wire/py.typed py_wire/schemas/qwen2_5_vl.toml; do
    grep -q "^py_wire-[^/]*/$want\$" <<< "$listing" || { echo "$1 lacks $want" >&2; exit 1; }
  done
}

# Fails if a Rust toolchain is reachable from the PATH of what follows.
no_rust() {
  if command -v cargo || command -v rustc; then
    echo "a Rust toolchain is on PATH: the wheel test must run without one" >&2; exit 1
  fi
}

wheel_test() {
  wheel
  local repo tmp base pip
  repo=$(pwd)
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  base=$("$PY" -c 'import sys; print(sys._base_executable)')

  echo "== the x86-64 wheel, no Rust on PATH"
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
    no_rust
    python -m pip install --quiet --no-index "$(artefact x86_64.whl)"
    python -m py_wire.demo --samples 8 --reps 1
    python "$repo/scripts/wheel_smoke.py" "$tmp/venv"
  )

  echo "== the aarch64 wheel in an aarch64 CPython under emulation, no Rust on PATH"
  local deps
  deps=$(a64_deps_venv "$PY")
  pip=$(a64_pip "$PY")
  a64_run "$A64_PYTHON" -m venv --without-pip "$tmp/venv-aarch64"
  a64_run "$tmp/venv-aarch64/bin/python" scripts/link_deps.py "$deps"
  (
    cd "$tmp"
    export PATH="/usr/local/bin:/usr/bin:/bin"
    unset VIRTUAL_ENV CARGO_HOME RUSTUP_HOME RUSTC
    no_rust
    py=$tmp/venv-aarch64/bin/python
    a64_run "$py" "$pip/pip" install --quiet --no-index "$(artefact aarch64.whl)"
    a64_run "$py" -m py_wire.demo --samples 4 --reps 1
    # Without a binfmt handler the kernel cannot start an aarch64 program: the smoke test starts
    # its subprocesses (the py-wire command, a second interpreter) through qemu, as this does.
    # PY_WIRE_STREAMING=always: even asked to, nothing streams on aarch64 (the smoke test checks).
    PY_WIRE_STREAMING=always PY_WIRE_SMOKE_RUNNER="$A64_QEMU -L $A64_ROOT" a64_run "$py" \
      "$repo/scripts/wheel_smoke.py" "$tmp/venv-aarch64"
  )

  echo "== the sdist, built by pip with the machine's Rust"
  "$base" -m venv "$tmp/venv-sdist"
  "$tmp/venv-sdist/bin/python" -m pip uninstall --quiet --yes setuptools 2>/dev/null || true
  "$tmp/venv-sdist/bin/python" scripts/link_deps.py "$VENV"
  (
    cd "$tmp"
    # pip fetches maturin for the build (build isolation, as for any user); the crate's own
    # dependencies come from crates.io into cargo's cache. The crate itself is always rebuilt:
    # the sdist's files carry one fixed mtime, so cargo would take a cached build of older
    # sources as fresh (a stale extension once passed the build here); pip's wheel cache is off
    # for the same reason.
    rm -rf "$A64_CACHE"/target-sdist/release/.fingerprint/py_wire_codec-* \
      "$A64_CACHE"/target-sdist/release/deps/*py_wire_codec* "$A64_CACHE"/target-sdist/maturin
    CARGO_TARGET_DIR=$A64_CACHE/target-sdist "$tmp/venv-sdist/bin/python" -m pip install \
      --quiet --no-cache-dir "$(artefact .tar.gz)"
    "$tmp/venv-sdist/bin/python" "$repo/scripts/wheel_smoke.py" "$tmp/venv-sdist"
  )
}

# The crate's own tests (the core, without the Python feature) built for aarch64 and run under
# emulation: the copy kernels, the SIMD scans and the frame code on the other architecture.
test_aarch64() {
  setup
  a64_tools
  local linker
  linker=$(a64_linker "$PY")
  RUSTC=$A64_RUSTC RUSTDOC=$A64_RUSTDOC CARGO_TARGET_DIR=$A64_CACHE/target-test-aarch64 \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=$linker \
    CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUNNER="$A64_QEMU -L $A64_ROOT" \
    cargo test --quiet --target aarch64-unknown-linux-gnu "$@"
}

cmd=${1:-demo}
shift || true
case "$cmd" in
  setup) setup ;;
  demo) setup; "$PY" -m py_wire.demo "$@" ;;
  test) setup; run_tests "$@" ;;
  wheel) wheel ;;
  wheel-test) wheel_test ;;
  test-aarch64) test_aarch64 "$@" ;;
  *) echo "usage: scripts/dev.sh [demo|test|setup|wheel|wheel-test|test-aarch64]" >&2; exit 2 ;;
esac
