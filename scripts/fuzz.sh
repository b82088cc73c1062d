#!/usr/bin/env bash
# Runs the cargo-fuzz targets of rust_codec/fuzz (ASan, nightly), one process at a time.
#   scripts/fuzz.sh                 every target, RUNS executions each
#   scripts/fuzz.sh gather 2000000  one target, 2M executions
# Environment: RUNS (default 20000), MAX_TIME (seconds per target, default 0 = no limit),
# SANITIZER (address, the default, or none: about 10x the executions per second, for long
# campaigns; libFuzzer's -malloc_limit_mb and -rss_limit_mb hold either way).
# The working corpus lives outside the repository, in $FUZZ_CORPUS/<target>/ (default
# ~/.cache/py_wire/fuzz-corpus), started from the committed seeds (rust_codec/fuzz/seeds/) and
# regressions; crashes go to rust_codec/fuzz/artifacts/<target>/ (a crash found becomes a file in fuzz/regressions/, which
# `cargo test` replays).
set -euo pipefail
cd "$(dirname "$0")/../rust_codec"

TARGETS=(parse_frame gather padded contracts schema_json staged_rows row_selection)
targets=("${1:-all}")
[ "${targets[0]}" = all ] && targets=("${TARGETS[@]}")
runs=${2:-${RUNS:-20000}}

max_len() {
  case "$1" in
    schema_json) echo 8192 ;;       # a field table or a contract, not a frame
    gather) echo 131072 ;;          # two frames and a row list
    row_selection) echo 66560 ;;    # one frame and a short selection program
    staged_rows) echo 4096 ;;       # row descriptions, not bytes of a frame
    *) echo 65536 ;;                # one frame (seeds are <= 64 KiB)
  esac
}

seeds_of() {
  case "$1" in
    gather|schema_json|staged_rows) echo "fuzz/seeds/$1" ;;
    *) echo "fuzz/seeds/frames" ;;     # every target that reads one frame
  esac
}

corpus_root=${FUZZ_CORPUS:-$HOME/.cache/py_wire/fuzz-corpus}
sanitizer=${SANITIZER:-address}
cargo +nightly fuzz build -s "$sanitizer" >/dev/null
for t in "${targets[@]}"; do
  corpus="$corpus_root/$t"
  mkdir -p "$corpus" "fuzz/artifacts/$t"
  cp -n "$(seeds_of "$t")"/* "$corpus"/
  if [ -d "fuzz/regressions/$t" ]; then cp -n "fuzz/regressions/$t"/* "$corpus"/; fi
  log=$(mktemp)
  set +e
  nice -n 10 cargo +nightly fuzz run -s "$sanitizer" "$t" "$corpus" -- \
    -rss_limit_mb=2048 -malloc_limit_mb=512 -timeout=10 \
    -max_len="$(max_len "$t")" -dict=fuzz/frame.dict \
    -runs="$runs" -max_total_time="${MAX_TIME:-0}" -print_final_stats=1 >"$log" 2>&1
  rc=$?
  set -e
  execs=$(grep -a 'stat::number_of_executed_units' "$log" | awk '{print $2}')
  echo "$t ($sanitizer): rc=$rc executions=${execs:-?} corpus=$(ls "$corpus" | wc -l) log=$log"
  [ $rc -eq 0 ] || grep -a -m3 -E 'panicked|ERROR: libFuzzer|SUMMARY' "$log" | sed 's/^/  /'
done
