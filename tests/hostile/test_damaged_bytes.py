"""Hostile bytes: decode either succeeds with data equal to a valid reading or raises
FrameError. Never a crash, never another exception type."""

from __future__ import annotations

import itertools
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


@pytest.mark.slow
def test_truncated_at_every_length(frame_bytes):
    for n in range(len(frame_bytes)):
        with pytest.raises(FrameError):
            py_wire.decode(frame_bytes[:n])


def independent_reading(data: bytes) -> dict[str, list[list[torch.Tensor]]]:
    """Every field's rows as an independent reader sees them: the safetensors library for the
    tensors, the format spec's CSR walk (README, Format) in plain Python for the rows."""
    from safetensors.torch import load

    tensors = load(data)
    header_len = struct.unpack("<Q", data[:8])[0]
    meta = json.loads(data[8 : 8 + header_len])["__metadata__"]
    # The field table as the spec derives it: the schema's fields that have a values tensor.
    decls = json.loads(meta["py_wire.schema"])["fields"]
    table = [{"name": n, **d} for n, d in decls.items() if n in tensors]
    out: dict[str, list[list[torch.Tensor]]] = {}
    for field in table:
        name, values = field["name"], tensors[field["name"]]
        if field["tier"] == "packed":
            flat = values.reshape(-1)
            row_offsets = tensors[f"{name}.row_offsets"].tolist()
            refs = tensors[f"{name}.row_segments"].tolist()
            seg_offsets = tensors[f"{name}.seg_offsets"].tolist()
            shapes = tensors[f"{name}.seg_shapes"].tolist()
            out[name] = [
                [
                    flat[seg_offsets[s] : seg_offsets[s + 1]].reshape(shapes[s])
                    for s in refs[row_offsets[r] : row_offsets[r + 1]]
                ]
                for r in range(len(row_offsets) - 1)
            ]
        elif field["tier"] == "per_token":
            bounds = tensors["__seq_offsets"].tolist()
            out[name] = [[values[a:b]] for a, b in itertools.pairwise(bounds)]
        else:
            out[name] = [[row] for row in values]
    return out


def rows_of(value: object) -> list[list[torch.Tensor]]:
    if isinstance(value, py_wire.PackedTensor):
        return [list(row or ()) for row in value.rows()]
    assert isinstance(value, torch.Tensor)
    if value.is_nested:
        return [[row] for row in value.unbind()]
    return [[row] for row in value]


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (
        a.dtype == b.dtype
        and a.shape == b.shape
        and torch.equal(a.reshape(-1).view(torch.uint8), b.reshape(-1).view(torch.uint8))
    )


@pytest.mark.slow
def test_random_bit_flips(frame_bytes):
    """Every single-bit flip of the header and 400 of the payload: decode raises FrameError, or
    returns exactly what an independent reader (safetensors + the spec's CSR walk) reads from
    the same bytes; a header flip that decodes reads the same rows as the original frame."""
    rng = random.Random(0)
    header_len = struct.unpack("<Q", frame_bytes[:8])[0] + 8
    original = independent_reading(frame_bytes)
    positions = list(range(header_len)) + rng.sample(range(header_len, len(frame_bytes)), 400)
    accepted = 0
    for pos in positions:
        bad = bytearray(frame_bytes)
        bad[pos] ^= 1 << rng.randrange(8)
        try:
            decoded = py_wire.decode(bytes(bad))
        except FrameError:
            continue
        accepted += 1
        expected = independent_reading(bytes(bad))
        if pos < header_len:
            assert expected.keys() == original.keys(), pos
            expected = original
        assert decoded.keys() == expected.keys(), pos
        for name, rows in expected.items():
            got = rows_of(decoded[name])
            assert len(got) == len(rows), (pos, name)
            for r, (mine, theirs) in enumerate(zip(got, rows, strict=True)):
                assert len(mine) == len(theirs), (pos, name, r)
                assert all(map(same_bits, mine, theirs)), (pos, name, r)
    assert accepted >= 300, accepted  # payload flips decode; the check above ran on them


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
        lambda h: h["__metadata__"].update({"py_wire.fields": "[]"}),
        lambda h: h["__metadata__"].update({"py_wire.sequence_field": "input_ids"}),
        lambda h: h["__metadata__"].update({"py_wire.format": "1"}),
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
        "field-table",  # an embedded header with a field table mixes forms
        "sequence-field",
        "format-1",
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


def test_a_format_1_frame_is_refused_by_its_version(frame_bytes):
    """Only format 3 is read (0.1 had no users): a frame as a format-1 writer wrote it (its
    field table and sequence field beside the schema, which format 3 derives) is a FrameError
    naming the version, whatever its bytes hold. A field table that lost fields is checked in
    the codec's own tests (bare frames, rust_codec/tests/hostile.rs)."""
    from tests.hostile.mutate import Parsed, to_format_1

    parsed = Parsed.of(frame_bytes)
    assert to_format_1(parsed)
    with pytest.raises(FrameError, match='version "1" is not supported') as err:
        py_wire.Frame.from_buffer(parsed.build())
    assert err.value.expected == "3" and err.value.found == "1"
    with pytest.raises(FrameError, match='version "1"'):
        py_wire.concat([frame_bytes, parsed.build()])
