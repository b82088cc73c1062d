"""Writes the staged_rows seeds (fuzz/seeds/staged_rows/): a few row descriptions in the
target's input format (see fuzz_targets/staged_rows.rs). Plain python3, no dependencies."""

import pathlib
import struct

OUT = pathlib.Path(__file__).parent / "seeds" / "staged_rows"
I64, F32, BF16 = 7, 11, 10  # indices in DType::all()


def header(dtype, flags, trailing, wire, max_row, out, arena, rows):
    b = bytes([dtype, flags]) + bytes(trailing) + bytes([wire])
    return b + struct.pack("<HHHHB", max_row, out[0], out[1], arena, rows)


def row(dims, start, length, delta=0, mode=0, extra=b""):
    return bytes([mode]) + extra + bytes(dims) + struct.pack("<HHh", start, length, delta)


def seeds():
    # Three int64 rows of one storage, in bounds (Jagged).
    yield (
        "three-rows",
        header(I64, 0x10, [], 0, 0, (0, 0), 256, 3)
        + b"".join([row([4], 0, 32), row([0], 32, 0), row([2], 32, 16)]),
    )
    # A storage shrunk under its row (resize_(16)): refused, by both readers.
    yield "shrunk-storage", header(I64, 0x10, [], 0, 0, (0, 0), 256, 1) + row([4], 0, 16)
    # A pointer before its storage, and one past it.
    yield (
        "pointer-outside",
        header(I64, 0x10, [], 0, 0, (0, 0), 256, 2) + row([1], 64, 64, -8) + row([1], 64, 64, 64),
    )
    # float32 rows with a trailing dim 2 and a bfloat16 wire dtype, one row already bfloat16.
    yield (
        "wire-dtype",
        header(F32, 0x10 | 0x4 | 1, [2], BF16, 0, (0, 0), 512, 2)
        + row([3, 2], 0, 24)
        + row([1, 2], 0, 4, mode=1, extra=bytes([BF16])),
    )
    # Rows over max_row_bytes 16: large rows as sources of their own (Ranges).
    yield (
        "large-rows",
        header(I64, 0, [], 0, 16, (0, 0), 1024, 4)
        + b"".join([row([1], 0, 8), row([5], 8, 40), row([2], 48, 16), row([3], 64, 24)]),
    )
    # 66 small rows: the staging buffer is reserved at row 64.
    yield (
        "many-rows",
        header(I64, 0x10, [], 0, 0, (0, 0), 2048, 66)
        + b"".join(row([1 + i % 3], 8 * i, 24) for i in range(66)),
    )
    # A non-contiguous row (strides given) and a row overlapping encode(out=).
    yield (
        "strides-and-out",
        header(I64, 0x10 | 0x20 | 1, [2], 0, 0, (0, 64), 512, 2)
        + row([2, 2], 128, 64, mode=4, extra=b"")[:3]
        + bytes([1, 2])
        + struct.pack("<HHh", 128, 64, 0)
        + row([1, 2], 0, 16),
    )
    # A dim read as a u64 (0xff): the byte count overflows.
    yield (
        "overflow",
        header(I64, 0x10 | 1, [2], 0, 0, (0, 0), 64, 1)
        + bytes([0, 0xFF])
        + struct.pack("<Q", 1 << 62)
        + bytes([2])
        + struct.pack("<HHh", 0, 64, 0),
    )


OUT.mkdir(parents=True, exist_ok=True)
for name, data in seeds():
    (OUT / name).write_bytes(data)
    print(name, len(data))
