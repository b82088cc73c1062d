"""Regenerates (or checks) the wire-cast golden data in rust_codec/tests/data/ from torch.

The codec's float casts (rust_codec/src/schema/cast.rs) must be bit-identical to torch's ``.to()``.
This script computes, with the installed torch:

- cast_f32.txt / cast_f64.txt: torch's casts of each listed input bit pattern (the first
  column; the list of inputs is the data's, edge cases picked by hand);
- cast_sha256.txt: SHA-256 of torch's casts over every 16-bit pattern (widenings), over the
  2^20 patterns of the Rust tests' samplers (a port of ``sample_f32`` / ``sample_f64``), and
  with ``--exhaustive``, over all 2^32 float32 patterns (minutes; the X32 lines).

    .venv/bin/python scripts/cast_vectors.py           # check: exit 1 if torch disagrees
    .venv/bin/python scripts/cast_vectors.py --write   # rewrite the files
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path

import numpy as np
import torch

DATA = Path(__file__).resolve().parent.parent / "rust_codec" / "tests" / "data"
SAMPLES = 1 << 20
M64 = np.uint64(0xFFFF_FFFF_FFFF_FFFF)


def splitmix(seed: int, n: int) -> np.ndarray:
    """n outputs of SplitMix64 from ``seed``, as the Rust tests' ``SplitMix`` yields them."""
    with np.errstate(over="ignore"):
        state = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * np.uint64(
            0x9E37_79B9_7F4A_7C15
        )
        z = state
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58_476D_1CE4_E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D0_49BB_1331_11EB)
        return z ^ (z >> np.uint64(31))


def sample_f32() -> np.ndarray:
    r = splitmix(0x5EED, SAMPLES // 2)
    out = np.empty(SAMPLES, dtype=np.uint32)
    out[0::2] = (r & np.uint64(0xFFFF_FFFF)).astype(np.uint32)
    out[1::2] = (r >> np.uint64(32)).astype(np.uint32)
    return out


def sample_f64() -> np.ndarray:
    lo_table = np.array(
        [0x1000_0000, 0x1000_0001, 0x0FFF_FFFF, 0, 0x1FFF_FFFF, 1, 0x1000_0000, 0x0FFF_FFFF],
        dtype=np.uint64,
    )
    u = np.uint64
    r = splitmix(0xF00D, SAMPLES)
    i = np.arange(SAMPLES, dtype=np.uint64)
    sign = (r >> u(63)) << u(63)
    e = (r >> u(52)) & u(0x7FF)
    mant = r & u((1 << 52) - 1)
    wide, narrow = u(863) + e % u(300), u(993) + e % u(50)
    kind = i & u(3)
    lo = lo_table[((r >> u(12)) & u(7)).astype(np.int64)]
    tie15 = ((r >> u(15)) & u(1)) == 1
    tie16 = ~tie15 & (((r >> u(16)) & u(1)) == 1)
    m3 = np.where(tie15, (mant & ~u((1 << 45) - 1)) | u(0x8000 << 29), mant)
    m3 = np.where(tie16, (m3 & ~u((1 << 42) - 1)) | u(0x1000 << 29), m3)
    m3 = (m3 & ~u((1 << 29) - 1)) | lo
    e3 = np.where(((r >> u(11)) & u(1)) == 1, wide, narrow)
    exp = np.where(kind == 1, wide, np.where(kind == 2, narrow, e3))
    mant = np.where(kind == 3, m3, mant)
    out = sign | (exp << u(52)) | mant
    return np.where(kind == 0, r, out)


def cast(bits: np.ndarray, src: torch.dtype, dst: torch.dtype) -> bytes:
    raw = torch.from_numpy(bits.view({4: np.int32, 8: np.int64, 2: np.int16}[bits.itemsize]))
    values = raw.view(src)  # reinterpret the bit patterns as the source dtype
    return values.to(dst).contiguous().view(torch.uint8).numpy().tobytes()


def sha(bits: np.ndarray, src: torch.dtype, dst: torch.dtype) -> str:
    return hashlib.sha256(cast(bits, src, dst)).hexdigest()


def exhaustive_f32(dst: torch.dtype) -> str:
    h = hashlib.sha256()
    chunk = 1 << 24
    for start in range(0, 1 << 32, chunk):
        bits = np.arange(start, start + chunk, dtype=np.uint64).astype(np.uint32)
        h.update(cast(bits, torch.float32, dst))
    return h.hexdigest()


def vectors(path: Path, src: torch.dtype, dsts: list[torch.dtype], width: int) -> list[str]:
    header = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
    inputs = [int(ln.split()[0], 16) for ln in path.read_text().splitlines() if ln and ln[0] != "#"]
    bits = np.array(inputs, dtype=np.uint32 if width == 8 else np.uint64)
    columns = []
    for dst in dsts:
        raw = np.frombuffer(
            cast(bits, src, dst),
            dtype={
                torch.bfloat16: np.uint16,
                torch.float16: np.uint16,
                torch.float32: np.uint32,
                torch.float64: np.uint64,
            }[dst],
        )
        digits = raw.itemsize * 2
        columns.append([f"{int(v):0{digits}x}" for v in raw])
    rows = [f"{x:0{width}x} " + " ".join(col[i] for col in columns) for i, x in enumerate(inputs)]
    return [*header, *rows]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the data files")
    parser.add_argument("--exhaustive", action="store_true", help="also all 2^32 float32s")
    args = parser.parse_args()
    f32, f64, bf16, f16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
    every16 = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    s32, s64 = sample_f32(), sample_f64()
    shas = {
        "SHA_BF16_F32": sha(every16, bf16, f32),
        "SHA_BF16_F64": sha(every16, bf16, f64),
        "SHA_F16_F32": sha(every16, f16, f32),
        "SHA_F16_F64": sha(every16, f16, f64),
        "SHA_S32_BF16": sha(s32, f32, bf16),
        "SHA_S32_F16": sha(s32, f32, f16),
        "SHA_S32_F64": sha(s32, f32, f64),
        "SHA_S64_F32": sha(s64, f64, f32),
        "SHA_S64_BF16": sha(s64, f64, bf16),
        "SHA_S64_F16": sha(s64, f64, f16),
    }
    if args.exhaustive:
        shas |= {
            f"SHA_X32_{n}": exhaustive_f32(d)
            for n, d in (("BF16", bf16), ("F16", f16), ("F64", f64))
        }
    sha_path = DATA / "cast_sha256.txt"
    old = dict(ln.split() for ln in sha_path.read_text().splitlines() if ln and ln[0] != "#")
    sha_lines = [ln for ln in sha_path.read_text().splitlines() if ln.startswith("#")]
    sha_lines += [f"{k} {shas.get(k, v)}" for k, v in old.items()]
    files = {
        DATA / "cast_f32.txt": vectors(DATA / "cast_f32.txt", f32, [bf16, f16, f64], 8),
        DATA / "cast_f64.txt": vectors(DATA / "cast_f64.txt", f64, [f32, bf16, f16], 16),
        sha_path: sha_lines,
    }
    stale = [p for p, lines in files.items() if p.read_text() != "\n".join(lines) + "\n"]
    if args.write:
        for path, lines in files.items():
            path.write_text("\n".join(lines) + "\n")
        print(f"wrote {len(files)} files (torch {torch.__version__})")
        return 0
    for path in stale:
        print(f"{path.name}: torch {torch.__version__} disagrees with the committed data")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
