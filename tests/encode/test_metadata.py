"""``encode(metadata=)``: caller entries in the frame's safetensors ``__metadata__``, kept by
frame operations, refused when reserved, oversized or not str to str."""

from __future__ import annotations

from pathlib import Path

import pytest

import py_wire
from py_wire import WireError
from tests.helpers import small_text_batch

BATCH = small_text_batch((3, 4, 5, 6))


def test_entries_travel_with_the_frame_and_its_operations() -> None:
    frame = py_wire.encode(BATCH, "text_grpo", metadata={"step": "17", "producer": "rollout-3"})
    again = py_wire.Frame.from_buffer(bytes(frame))
    assert again.metadata["step"] == "17" and again.metadata["producer"] == "rollout-3"
    for derived in (py_wire.take_rows(frame, [2, 0]), py_wire.shard(frame, 1, 2)):
        assert derived.metadata["step"] == "17"
    plain = py_wire.encode(BATCH, "text_grpo")
    assert "step" not in plain.metadata
    # Decoding ignores caller entries: the same tensors either way.
    a, b = py_wire.decode(frame), py_wire.decode(plain)
    assert all(bool((a[k] == b[k]).all()) for k in ("reward", "input_lengths"))


@pytest.mark.parametrize(
    ("metadata", "error", "match"),
    [
        ({"py_wire.fields": "[]"}, py_wire.WireError, "reserved"),
        ({"": "x"}, py_wire.WireError, "reserved"),
        ({"k": 3}, TypeError, "metadata must map str to str"),
        ([("k", "v")], TypeError, "metadata must be a mapping"),
        ({"k": "x" * (1 << 17)}, py_wire.WireError, "metadata holds"),
    ],
)
def test_bad_metadata_is_refused_by_name(metadata: object, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        py_wire.encode(BATCH, "text_grpo", metadata=metadata)  # type: ignore[arg-type]


# -- reserved keys: py_wire.* is the codec's; a damaged one is refused --------------------------


def _flip(data: bytes, old: bytes, new: bytes) -> bytearray:
    assert data.count(old) == 1
    return bytearray(data.replace(old, new))


@pytest.mark.parametrize(
    "renamed",
    [b'"py_wire.checksul"', b'"py_wird.checksum"', b'"qy_wire.checksum"', b'"py_wire/checksum"'],
)
def test_a_damaged_reserved_key_is_a_frame_error(renamed: bytes, tmp_path: Path) -> None:
    frame = py_wire.encode(small_text_batch(), "text_grpo", checksum=True)
    data = _flip(bytes(frame), b'"py_wire.checksum"', renamed)
    data[-1] ^= 1  # and a payload byte: verification must not be off
    path = tmp_path / "frame"
    path.write_bytes(data)
    with pytest.raises(py_wire.FrameError, match="reserved"):
        py_wire.load(path)
    with pytest.raises(py_wire.FrameError, match="reserved"):
        py_wire.decode(bytes(data))


@pytest.mark.parametrize("key", ["py_wire.extra", "py_wird.x", "qy_wire.thing", "py_wirE.x"])
def test_encode_refuses_reserved_keys(key: str) -> None:
    with pytest.raises(WireError, match="metadata key"):
        py_wire.encode(small_text_batch(), "text_grpo", metadata={key: "1"})


def test_keys_two_bits_away_are_the_callers() -> None:
    frame = py_wire.encode(small_text_batch(), "text_grpo", metadata={"py_wirf.x": "1"})
    assert py_wire.decode(bytes(frame))["reward"].shape == (3,)
