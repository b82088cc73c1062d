"""Hand-built reproducers for the bugs issue 7 names (all fixed; `cargo test` replays them from
regressions/). Writes regressions/<target>/known-*; no dependencies.

    python3 rust_codec/fuzz/make_known.py
"""

from __future__ import annotations

import json
import struct
from pathlib import Path

HERE = Path(__file__).resolve().parent


def frame(metadata: dict[str, str], tensors: list[tuple[str, str, list[int], bytes]]) -> bytes:
    """A safetensors frame: tensors laid out in order, each 64-byte aligned (data section
    starts aligned; each tensor's bytes are padded by explicit `__pad.N` U8 entries)."""
    header: dict[str, object] = {"__metadata__": metadata}
    data = b""
    for i, (name, dtype, shape, payload) in enumerate(tensors):
        gap = (-len(data)) % 64
        if gap:
            header[f"__pad.{i}"] = {
                "dtype": "U8",
                "shape": [gap],
                "data_offsets": [len(data), len(data) + gap],
            }
            data += b"\0" * gap
        header[name] = {
            "dtype": dtype,
            "shape": shape,
            "data_offsets": [len(data), len(data) + len(payload)],
        }
        data += payload
    js = json.dumps(header).encode()
    js += b" " * ((-(8 + len(js))) % 64)
    return struct.pack("<Q", len(js)) + js + data


def i64(*v: int) -> bytes:
    return struct.pack(f"<{len(v)}q", *v)


def meta(rows: int, fields: list[dict], seq: str | None = None) -> dict[str, str]:
    m = {"py_wire.format": "3", "py_wire.num_rows": str(rows), "py_wire.fields": json.dumps(fields)}
    if seq:
        m["py_wire.sequence_field"] = seq
    return m


def main() -> None:
    # 1. Zero fields, 2**40 rows: gather(None) does (0..total).collect() (ops.rs).
    zero = frame(meta(2**40, []), [])
    # 2. Two such frames of 2**63 + 1 rows: `total += num_rows` wraps (ops.rs).
    wrap = frame(meta(2**63 + 1, []), [])
    # 3. A Fixed-count contract over one segment shaped [2**40, 0]: repeat_n(per, items)
    #    allocates 2**40 * 8 bytes (contract.rs).
    fields = [
        {"name": "input_ids", "tier": "per_token", "dtype": "int64", "shape": []},
        {"name": "pixel_values", "tier": "packed", "dtype": "float32", "shape": [None, 0]},
    ]
    fixed = frame(
        meta(1, fields, "input_ids"),
        [
            ("__seq_offsets", "I64", [2], i64(0, 1)),
            ("input_ids", "I64", [1], i64(5)),
            ("pixel_values", "F32", [2**40, 0], b""),
            ("pixel_values.seg_shapes", "I64", [1, 2], i64(2**40, 0)),
            ("pixel_values.seg_offsets", "I64", [2], i64(0, 0)),
            ("pixel_values.row_offsets", "I64", [2], i64(0, 1)),
            ("pixel_values.row_segments", "I64", [1], i64(0)),
        ],
    )
    out = {
        "gather/known-zero-fields-2p40-rows": bytes([0, 0, 0, 0]) + zero,
        "gather/known-row-total-wraps": bytes([1])
        + struct.pack("<H", len(wrap))
        + bytes([0])
        + wrap
        + wrap,
        "parse_frame/known-zero-fields-2p40-rows": zero,
        "contracts/known-fixed-count-2p40-items": fixed,
    }
    for name, data in out.items():
        p = HERE / "regressions" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
        print(p.relative_to(HERE), len(data), "bytes")


if __name__ == "__main__":
    main()
