# shellcheck shell=bash
# The aarch64 tools of `scripts/dev.sh wheel` and `wheel-test`, from Debian's packages and PyPI
# only, kept under one cache folder (PY_WIRE_CI_CACHE, default ~/.cache/py_wire-ci) so that a
# second run on the same machine downloads and unpacks nothing. Sourced by scripts/dev.sh; run
# `bash scripts/aarch64_tools.sh` alone to install them and print where they are.
#
# Nothing is installed into the machine's own directories: every package is unpacked with
# `dpkg-deb -x` into a root of its own under the cache, so that
#   - the arm64 CPython never replaces the machine's python3 (`apt install python3:arm64` would),
#   - Debian's rustc never lands in /usr/bin, where the wheel test's no-Rust check looks, and the
#     machine's rustup toolchain (its default, ~/.cargo) stays as it was: cargo is rustup's,
#     told to use the unpacked rustc through RUSTC for the aarch64 builds alone,
#   - qemu-user-static registers no binfmt handler: aarch64 programs run as
#     `qemu-aarch64-static -L ROOT PROGRAM`.
# The one machine-wide change is `dpkg --add-architecture arm64` (with `apt-get update`), which
# `apt-get download` needs to fetch arm64 packages; it installs nothing and is made once.

A64_CACHE=${PY_WIRE_CI_CACHE:-$HOME/.cache/py_wire-ci}
A64_SCRIPTS=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Debian's Rust (rustc 1.96 from bookworm's rustc-web) for the build machine, with the standard
# library for aarch64 beside the build machine's own (libstd-rust-web-dev:arm64: rlibs only).
A64_RUST_DEBS=(rustc-web libstd-rust-web-1.96 libstd-rust-web-dev libllvm22
  libstd-rust-web-dev:arm64 libstd-rust-web-1.96:arm64)
A64_QEMU_DEBS=(qemu-user-static)
# Debian's arm64 CPython 3.11 and the shared libraries it, its standard library and torch load.
A64_PYTHON_DEBS=(python3.11-minimal libpython3.11-minimal libpython3.11-stdlib libc6 libexpat1
  zlib1g libssl3 libbz2-1.0 libcrypt1 libffi8 liblzma5 libuuid1 libgcc-s1 libstdc++6 libgomp1)

_a64_log() { echo "aarch64 tools: $*" >&2; }

# `apt-get download` of the named packages into the cache's debs/ folder, each file fetched once;
# prints the sorted file names (a key: a package update changes it and so unpacks anew).
_a64_debs() {
  local debs=$A64_CACHE/debs uris names name missing=0
  mkdir -p "$debs"
  # An old or absent package list names files the mirror no longer has: update, then ask again.
  if ! uris=$(apt-get download --print-uris "$@" 2>/dev/null) || [ -z "$uris" ]; then
    _a64_apt_update
    uris=$(apt-get download --print-uris "$@")
  fi
  names=$(awk '{print $2}' <<< "$uris" | sort)
  while read -r name; do [ -f "$debs/$name" ] || missing=1; done <<< "$names"
  if [ "$missing" = 1 ]; then
    _a64_log "downloading $*"
    # apt's sandbox user cannot write into root's cache: apt says so and downloads as root.
    (cd "$debs" && apt-get download -qq "$@" 2>&1 | { grep -v unsandboxed || true; } >&2)
    while read -r name; do
      [ -f "$debs/$name" ] || { _a64_log "could not download $name"; return 1; }
    done <<< "$names"
  fi
  echo "$names"
}

_a64_apt_update() {
  _a64_log "apt-get update"
  apt-get update -qq >&2
}

# arm64 as a foreign architecture of dpkg, so that apt lists and downloads arm64 packages.
_a64_arch() {
  if ! dpkg --print-foreign-architectures | grep -qx arm64; then
    _a64_log "dpkg --add-architecture arm64"
    dpkg --add-architecture arm64
    _a64_apt_update
  fi
}

# Unpacks the named packages into $A64_CACHE/NAME-KEY (KEY: a hash of their file names) unless
# that root is complete already; prints the root.
_a64_root() {
  local name=$1; shift
  local files key root
  files=$(_a64_debs "$@") || return 1
  key=$(sha256sum <<< "$files" | cut -c1-12)
  root=$A64_CACHE/$name-$key
  if [ ! -f "$root/.complete" ]; then
    _a64_log "unpacking $name into $root"
    rm -rf "$root" && mkdir -p "$root"
    local f
    while read -r f; do dpkg-deb -x "$A64_CACHE/debs/$f" "$root"; done <<< "$files"
    touch "$root/.complete"
  fi
  echo "$root"
}

# Sets A64_RUSTC and A64_RUSTDOC (for the build machine, also targeting aarch64-unknown-linux-gnu),
# A64_QEMU (qemu-aarch64-static), A64_ROOT (the arm64 CPython's root: run a program as
# "$A64_QEMU" -L "$A64_ROOT" PROGRAM) and A64_PYTHON (that root's python3.11).
a64_tools() {
  command -v apt-get > /dev/null || { _a64_log "needs apt-get (Debian)"; return 1; }
  _a64_arch
  local rust qemu
  rust=$(_a64_root rust "${A64_RUST_DEBS[@]}") || return 1
  qemu=$(_a64_root qemu "${A64_QEMU_DEBS[@]}") || return 1
  A64_ROOT=$(_a64_root python-arm64 "${A64_PYTHON_DEBS[@]/%/:arm64}") || return 1
  A64_QEMU=$qemu/usr/bin/qemu-aarch64-static
  A64_PYTHON=$A64_ROOT/usr/bin/python3.11
  # Debian's rustc finds librustc_driver and LLVM in /usr/lib: point it at the unpacked ones.
  A64_RUSTC=$rust/rustc
  if [ ! -x "$A64_RUSTC" ]; then
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/usr/lib/x86_64-linux-gnu exec %s/usr/bin/rustc "$@"\n' \
      "$rust" "$rust" > "$A64_RUSTC"
    chmod +x "$A64_RUSTC"
  fi
  # Its rustdoc too: the crate's doctests for aarch64 need the standard library it ships.
  A64_RUSTDOC=$rust/rustdoc
  if [ ! -x "$A64_RUSTDOC" ]; then
    printf '#!/bin/sh\nLD_LIBRARY_PATH=%s/usr/lib/x86_64-linux-gnu exec %s/usr/bin/rustdoc "$@"\n' \
      "$rust" "$rust" > "$A64_RUSTDOC"
    chmod +x "$A64_RUSTDOC"
  fi
  "$A64_RUSTC" --print target-libdir --target aarch64-unknown-linux-gnu > /dev/null \
    || { _a64_log "the unpacked rustc does not target aarch64"; return 1; }
  export A64_RUSTC A64_RUSTDOC A64_QEMU A64_ROOT A64_PYTHON
}

# Runs an aarch64 program under emulation, its libraries (and its interpreter) from A64_ROOT.
a64_run() { "$A64_QEMU" -L "$A64_ROOT" "$@"; }

# The linker for aarch64 test binaries: zig's cc (from requirements-dev.txt), for glibc 2.28 as
# the wheel is; prints the path of a small wrapper around `python -m ziglang cc`.
a64_linker() {
  local py=$1 wrapper=$A64_CACHE/zig-cc-aarch64
  printf '#!/bin/sh\nexec %s -m ziglang cc -target aarch64-linux-gnu.2.28 "$@"\n' "$py" \
    > "$wrapper.tmp"
  chmod +x "$wrapper.tmp" && mv "$wrapper.tmp" "$wrapper"
  echo "$wrapper"
}

# The wheels torch, numpy and pydantic bring to an aarch64 CPython 3.11 (pinned in
# scripts/aarch64-requirements.txt: torch 2.5.1 is the last whose aarch64 wheel runs on CPU
# alone, the newer ones load NVIDIA's libraries), installed once into an emulated venv whose
# packages `wheel-test` links into each fresh one (scripts/link_deps.py). Prints that venv.
a64_deps_venv() {
  local host_py=$1 req=$A64_SCRIPTS/aarch64-requirements.txt key venv wheels=$A64_CACHE/wheels-aarch64
  key=$(cat "$req" <(echo "$A64_ROOT") | sha256sum | cut -c1-12)
  venv=$A64_CACHE/venv-aarch64-$key
  if [ ! -f "$venv/.complete" ]; then
    _a64_log "downloading the aarch64 wheels of $req"
    mkdir -p "$wheels"
    # --no-deps with every dependency pinned: pip would read torch's requirements with this
    # machine's markers (x86-64) and ask for NVIDIA's CUDA wheels.
    "$host_py" -m pip download --quiet --no-deps --only-binary=:all: --dest "$wheels" \
      --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none -r "$req" >&2
    rm -rf "$venv"
    a64_run "$A64_PYTHON" -m venv --without-pip "$venv"
    # The build machine's pip unpacks them (under emulation pip takes over seven minutes for
    # torch); the wheels are aarch64's, chosen for this interpreter's tags.
    "$host_py" -m pip install --quiet --no-deps --no-index --find-links "$wheels" \
      --only-binary=:all: --platform manylinux2014_aarch64 --platform manylinux_2_28_aarch64 \
      --python-version 3.11 --implementation cp --abi cp311 --abi abi3 --abi none \
      --target "$venv/lib/python3.11/site-packages" -r "$req" >&2
    touch "$venv/.complete"
  fi
  echo "$venv"
}

# pip's own wheel, run by the emulated CPython as `python PIP_WHEEL/pip` (Debian's CPython has no
# ensurepip); prints its path.
a64_pip() {
  local host_py=$1 tools=$A64_CACHE/tools found
  mkdir -p "$tools"
  found=$(find "$tools" -name 'pip-*.whl' | head -1)
  if [ -z "$found" ]; then
    "$host_py" -m pip download --quiet --no-deps --dest "$tools" pip >&2
    found=$(find "$tools" -name 'pip-*.whl' | head -1)
  fi
  echo "$found"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  a64_tools
  echo "rustc: $A64_RUSTC ($("$A64_RUSTC" --version))"
  echo "qemu: $A64_QEMU"
  echo "aarch64 CPython: $A64_PYTHON ($(a64_run "$A64_PYTHON" -c 'import platform, sys; print(sys.version.split()[0], platform.machine())'))"
fi
