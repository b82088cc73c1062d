"""Optional payload checksums (issue 15, finding 10): ``encode(..., checksum=True)`` stores an
xxh3-64 digest per field, one for the shared tables and padding and one for the header;
``Frame.verify()`` / ``decode(verify=True)`` check them, and every corruption of a frame that
carries them is a ``FrameError`` (naming the field when the bytes are a field's)."""

from __future__ import annotations

import json

import pytest
import torch

import py_wire
from py_wire import FrameError
from py_wire.synth.registry import generate

KEY = "py_wire.checksum"


def _batch(schema: str = "qwen2_5_vl", rows: int = 3, seed: int = 0) -> dict:
    return generate(schema, rows, seed=seed)


def _field_ranges(frame: py_wire.Frame) -> dict[str, list[tuple[int, int]]]:
    """Absolute byte ranges of each field's tensors, from the header."""
    n = int.from_bytes(bytes(frame)[:8], "little")
    header = json.loads(bytes(frame)[8 : 8 + n])
    fields = [f.name for f in frame.layout.fields]
    out: dict[str, list[tuple[int, int]]] = {f: [] for f in fields}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        owner = name if name in out else name.rsplit(".", 1)[0]
        if owner in out:
            b, e = entry["data_offsets"]
            out[owner].append((8 + n + b, 8 + n + e))
    return out


def test_roundtrip_and_header_entry() -> None:
    batch = _batch()
    plain = py_wire.encode(batch, "qwen2_5_vl")
    frame = py_wire.encode(batch, "qwen2_5_vl", checksum=True)
    assert not plain.has_checksum and frame.has_checksum
    stored = json.loads(frame.metadata[KEY])
    assert stored["algorithm"] == "xxh3-64"
    assert set(stored["fields"]) == {f.name for f in frame.layout.fields}
    assert all(len(h) == 16 and h != "0" * 16 for h in stored["fields"].values())
    # Additive: the metadata is the plain frame's plus one key; the payload is the same.
    other = {k: v for k, v in frame.metadata.items() if k != KEY}
    assert other == plain.metadata
    frame.verify()
    py_wire.Frame.from_buffer(bytes(frame)).verify()
    out = py_wire.decode(frame, verify=True)
    ref = py_wire.decode(plain)
    assert torch.equal(out["input_ids"].values(), ref["input_ids"].values())
    assert py_wire.encoded_nbytes(batch, "qwen2_5_vl", checksum=True) == len(frame)


def test_encode_parts_and_out_give_the_same_frame() -> None:
    batch = _batch(rows=4, seed=3)
    frame = py_wire.encode(batch, "qwen2_5_vl", checksum=True)
    for min_borrow in (0, 1 << 20):
        parts = py_wire.encode_parts(batch, "qwen2_5_vl", checksum=True, min_borrow=min_borrow)
        assert b"".join(bytes(p) for p in parts) == bytes(frame)
    out = bytearray(len(frame) + 64)
    into = py_wire.encode(batch, "qwen2_5_vl", checksum=True, out=out)
    assert bytes(into) == bytes(frame)
    into.verify()


def test_frame_ops_keep_checksums_of_their_own_bytes() -> None:
    frame = py_wire.encode(_batch(rows=6), "qwen2_5_vl", checksum=True)
    for part in [
        py_wire.take_rows(frame, [4, 0, 2]),
        py_wire.shard(frame, 1, 2),
        py_wire.concat([frame, frame]),
        *py_wire.chunk(frame, 3),
    ]:
        assert part.has_checksum
        part.verify()
    plain = py_wire.encode(_batch(rows=6), "qwen2_5_vl")
    assert not py_wire.take_rows(plain, [1]).has_checksum


def test_verify_without_checksums_is_an_error() -> None:
    frame = py_wire.encode(_batch(), "qwen2_5_vl")
    with pytest.raises(FrameError, match="carries no checksums"):
        frame.verify()
    with pytest.raises(FrameError, match="carries no checksums"):
        py_wire.decode(frame, verify=True)


def test_flag_types() -> None:
    with pytest.raises(TypeError, match="checksum"):
        py_wire.encode(_batch(), "qwen2_5_vl", checksum=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="verify"):
        py_wire.decode(py_wire.encode(_batch(), "qwen2_5_vl"), verify="yes")  # type: ignore[arg-type]


@pytest.mark.slow
@pytest.mark.parametrize("schema", ["qwen2_5_vl", "text_grpo"])
def test_every_single_byte_corruption_is_a_frame_error(schema: str) -> None:
    """Each header byte and 600 data bytes (evenly spread, the first and last included) of a
    frame, changed in turn: the frame never wraps and verifies."""
    frame = py_wire.encode(_batch(schema, rows=2, seed=1), schema, checksum=True)
    good = bytes(frame)
    ranges = _field_ranges(frame)
    owner = {}
    for name, spans in ranges.items():
        for b, e in spans:
            owner.update(dict.fromkeys(range(b, e), name))
    header_end = 8 + int.from_bytes(good[:8], "little")
    step = max(1, (len(good) - header_end) // 600)
    positions = [*range(header_end), *range(header_end, len(good), step), len(good) - 1]
    named = 0
    for pos in positions:
        bad = bytearray(good)
        bad[pos] ^= 0x5A
        with pytest.raises(FrameError) as info:
            py_wire.Frame.from_buffer(bad).verify()
        if pos in owner and "checksum mismatch in field" in str(info.value):
            assert info.value.field == owner[pos], (pos, str(info.value))
            assert f'"{owner[pos]}"' in str(info.value)
            named += 1
    assert named > 0


def test_a_corrupted_field_is_named() -> None:
    frame = py_wire.encode(_batch(rows=3), "qwen2_5_vl", checksum=True)
    _, end = _field_ranges(frame)["advantages"][0]
    bad = bytearray(frame)
    bad[end - 1] ^= 1
    with pytest.raises(FrameError, match='checksum mismatch in field "advantages"') as info:
        py_wire.Frame.from_buffer(bad).verify()
    assert info.value.field == "advantages"
    with pytest.raises(FrameError, match="advantages"):
        py_wire.decode(bad, verify=True)
    # The schema's fingerprint edited: the reader refuses it when the frame is wrapped.
    fingerprint = frame.metadata["py_wire.fingerprint"].encode()
    edited = fingerprint[:-1] + (b"0" if fingerprint[-1:] != b"0" else b"1")
    text = bytes(frame).replace(fingerprint, edited)
    assert text != bytes(frame)
    with pytest.raises(FrameError, match="does not match its fingerprint"):
        py_wire.Frame.from_buffer(bytearray(text))
    # A header whose meaning changed while it still parses and validates (a caller's own
    # entry, which no reader checks): only the header checksum can tell.
    tagged = py_wire.encode(_batch(rows=3), "qwen2_5_vl", checksum=True, metadata={"run": "step-1"})
    text = bytes(tagged).replace(b'"step-1"', b'"step-2"')
    assert text != bytes(tagged)
    with pytest.raises(FrameError, match="checksum mismatch in the header"):
        py_wire.Frame.from_buffer(bytearray(text)).verify()


def test_malformed_checksum_entries() -> None:
    frame = py_wire.encode(_batch("text_grpo", rows=2), "text_grpo", checksum=True)
    raw = bytes(frame)
    stored = frame.metadata[KEY]
    parsed = json.loads(stored)
    dropped = dict(parsed)
    dropped["fields"] = dict(list(parsed["fields"].items())[1:])
    for replacement, message in [
        (stored.replace("xxh3-64", "xxh3-32"), "not supported"),
        (json.dumps(dropped, separators=(",", ":")), "lack field"),
    ]:
        old = json.dumps(stored)[1:-1].encode()
        new = json.dumps(replacement)[1:-1].encode()
        n = int.from_bytes(raw[:8], "little")
        header = raw[8 : 8 + n].replace(old, new)
        header = header.rstrip(b" ")
        header += b" " * (n - len(header))
        assert len(header) == n
        bad = bytearray(raw[:8] + header + raw[8 + n :])
        with pytest.raises(FrameError, match=message):
            py_wire.Frame.from_buffer(bad).verify()
