#!/usr/bin/env bash
# The checks that need a CUDA GPU, in one run: the CUDA tests (they skip on machines without
# one, CI's included) and the GPU benchmarks, each log written to LOG_DIR.
#
#   scripts/gpu_checks.sh [LOG_DIR]      # PY=python3 by default; py_wire must import
#
# Exits non-zero when a test fails, a CUDA test skipped, or a benchmark failed.
set -uo pipefail
out=${1:-benchmarks/out/gpu}
PY=${PY:-python3}
export PYTHONUNBUFFERED=1
mkdir -p "$out"
cd "$(dirname "$0")/.."
"$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 'no CUDA device')" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$out/gpu.txt"
rc=0
"$PY" -m pytest -q -rs -p no:cacheprovider tests/trainer tests/decode/test_device.py \
  2>&1 | tee "$out/tests.log" || rc=1
# The two-rank NCCL test needs two GPUs (or PY_WIRE_NCCL_SHARE_GPU=1); any other skip is a defect.
if grep -E "^SKIPPED" "$out/tests.log" | grep -v "two CUDA devices" ; then
  echo "a CUDA test skipped on a CUDA machine" >&2
  rc=1
fi
"$PY" benchmarks/stage_overlap.py --reps 5 2>&1 | tee "$out/stage_overlap.log" || rc=1
"$PY" benchmarks/h2d.py --mb 1024 --reps 5 2>&1 | tee "$out/h2d.log" || rc=1
exit $rc
