"""Hostile bytes: decode either succeeds with data equal to a valid reading or raises
FrameError. Never a crash, never another exception type."""

from __future__ import annotations

import contextlib
import json
import random
import struct

import pytest
import torch

import py_wire
from py_wire import FrameError
from tests.helpers import small_vlm_batch


@pytest.fixture(scope="module")
def frame_bytes() -> bytes:
    return bytes(py_wire.encode(small_vlm_batch(), "qwen2_5_vl"))


def decode_fully(data: bytes) -> None:
    decoded = py_wire.decode(data)
    for value in decoded.values():
        if isinstance(value, py_wire.PackedTensor):
            for row in value.rows():
                for seg in row or ():
                    seg.sum()
            value.as_tensor()
        elif value.is_nested:
            value.unbind()
        else:
            value.sum()


def test_truncated_at_every_length(frame_bytes):
    for n in range(len(frame_bytes)):
        with pytest.raises(FrameError):
            py_wire.decode(frame_bytes[:n])


def test_random_bit_flips(frame_bytes):
    rng = random.Random(0)
    header_len = struct.unpack("<Q", frame_bytes[:8])[0] + 8
    positions = list(range(header_len)) + rng.sample(range(header_len, len(frame_bytes)), 400)
    for pos in positions:
        bad = bytearray(frame_bytes)
        bad[pos] ^= 1 << rng.randrange(8)
        with contextlib.suppress(FrameError):
            decode_fully(bytes(bad))


def rewrite_header(frame_bytes: bytes, edit) -> bytes:
    n = struct.unpack("<Q", frame_bytes[:8])[0]
    header = json.loads(frame_bytes[8 : 8 + n])
    edit(header)
    text = json.dumps(header).encode()
    text += b" " * ((-(8 + len(text))) % 64)
    return struct.pack("<Q", len(text)) + text + frame_bytes[8 + n :]


@pytest.mark.parametrize(
    "edit",
    [
        lambda h: h["pixel_values"].update(shape=[10**12, 1176]),
        lambda h: h["pixel_values"].update(data_offsets=[0, 2**63]),
        lambda h: h["input_ids"].update(dtype="I32"),
        lambda h: h["__metadata__"].update({"py_wire.num_rows": "99"}),
        lambda h: h["__metadata__"].update({"py_wire.format": "7"}),
        lambda h: h["__metadata__"].update({"py_wire.schema": "{}"}),
        lambda h: h["__metadata__"].update({"py_wire.fingerprint": "sha256:00"}),
        lambda h: h.pop("pixel_values.row_segments"),
        lambda h: h["__metadata__"].update(
            {"py_wire.fields": h["__metadata__"]["py_wire.fields"].replace("1176", "1175")}
        ),
    ],
    ids=[
        "huge-shape",
        "huge-offsets",
        "dtype",
        "rows",
        "version",
        "schema",
        "fingerprint",
        "missing-index",
        "field-table",
    ],
)
def test_lying_headers(frame_bytes, edit):
    with pytest.raises(FrameError):
        py_wire.decode(rewrite_header(frame_bytes, edit))


def test_lying_index_values(frame_bytes):
    frame = py_wire.Frame.from_buffer(frame_bytes)
    fields = {f.name: f for f in frame.layout.fields}
    pv = fields["pixel_values"]
    for key, value in [
        ("seg_offsets", 1 << 50),
        ("row_segments", 99),
        ("row_offsets", -3),
        ("seg_shapes", -5),
    ]:
        start = getattr(pv, key).offset
        offset = start + 8 if key in ("seg_offsets", "row_offsets") else start
        bad = bytearray(frame_bytes)
        bad[offset : offset + 8] = struct.pack("<q", value)
        with pytest.raises(FrameError):
            py_wire.decode(bytes(bad))


def test_not_a_frame_at_all():
    for junk in [b"", b"\x00" * 8, b"hello world, definitely not a frame", torch.zeros(3)]:
        with pytest.raises(FrameError):
            py_wire.decode(junk)
