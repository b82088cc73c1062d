"""The frame: a valid safetensors file, 64-byte aligned, decoded without copying."""

from __future__ import annotations

import gc
import json
import mmap
import pickle
import struct

import numpy as np
import pytest
import safetensors
import safetensors.torch
import torch

import py_wire
from py_wire import SchemaError
from tests.helpers import small_text_batch, small_vlm_batch

QWEN = py_wire.load_schema("qwen2_5_vl")
# The same fields without the placeholder contract, for tests about packing alone.
LOOSE = py_wire.Schema.from_dict({**QWEN.model_dump(), "name": "loose", "contracts": []})


@pytest.fixture
def vlm():
    batch = small_vlm_batch()
    return batch, py_wire.encode(batch, QWEN)


def header_of(frame_bytes: bytes) -> dict:
    (n,) = struct.unpack("<Q", frame_bytes[:8])
    return json.loads(frame_bytes[8 : 8 + n])


def frame_address(frame) -> tuple[int, int]:
    base = torch.frombuffer(frame, dtype=torch.uint8)
    return base.data_ptr(), len(frame)


def test_stock_safetensors_reads_every_field(vlm, tmp_path):
    batch, frame = vlm
    loaded = safetensors.torch.load(bytes(frame))
    assert torch.equal(loaded["input_ids"], torch.cat(batch["input_ids"]))
    assert torch.equal(loaded["reward"], batch["reward"])
    # The shared image is stored once: segments [shared, a, shared] -> physical [shared, a].
    shared, extra = batch["pixel_values"][0], batch["pixel_values"][2][0]
    assert torch.equal(loaded["pixel_values"], torch.cat([shared, extra]))
    assert loaded["pixel_values.row_segments"].tolist() == [0, 1, 0]
    assert loaded["pixel_values.row_offsets"].tolist() == [0, 1, 1, 3]
    path = tmp_path / "batch.safetensors"
    path.write_bytes(bytes(frame))
    with safetensors.safe_open(str(path), framework="pt") as f:
        assert f.metadata()["py_wire.format"] == "3"
        # The field table is the schema's: the header carries no second description of it.
        assert not {"py_wire.fields", "py_wire.sequence_field"} & f.metadata().keys()
        assert torch.equal(
            f.get_tensor("image_grid_thw"), torch.tensor([[1, 2, 4], [1, 2, 2], [1, 2, 4]])
        )


def test_every_tensor_is_64_byte_aligned(vlm):
    _, frame = vlm
    raw = bytes(frame)
    header = header_of(raw)
    data_start = 8 + struct.unpack("<Q", raw[:8])[0]
    assert data_start % 64 == 0
    for name, entry in header.items():
        if name != "__metadata__" and not name.startswith("__pad."):
            assert (data_start + entry["data_offsets"][0]) % 64 == 0, name
    assert len(header) - 1 < 40  # O(fields), not O(rows)
    meta = header["__metadata__"]
    assert meta["py_wire.num_rows"] == "3"
    assert meta["py_wire.fingerprint"] == QWEN.fingerprint


def test_frame_protocols(vlm):
    _, frame = vlm
    assert len(memoryview(frame)) == len(frame) == frame.nbytes
    assert bytes(frame)[:8] == memoryview(frame)[:8].tobytes()
    assert frame.num_rows == 3
    assert frame.schema == QWEN
    assert "pixel_values" in repr(frame)


def test_decode_is_zero_copy_and_views_outlive_the_frame(vlm):
    batch, frame = vlm
    lo, n = frame_address(frame)
    decoded = py_wire.decode(frame)
    tensors = [decoded["reward"], decoded["input_ids"].values(), decoded["input_lengths"]]
    tensors += [s for row in decoded["pixel_values"] if row for s in row]
    for t in tensors:
        assert lo <= t.data_ptr() and t.data_ptr() + t.nbytes <= lo + n
    del frame
    gc.collect()
    _ = [torch.randn(1000) for _ in range(100)]
    assert torch.equal(decoded["pixel_values"][2][1], batch["pixel_values"][0])
    assert torch.equal(decoded["input_ids"].unbind()[2], batch["input_ids"][2])


def test_as_tensor_is_a_view_when_rows_are_in_order():
    batch = small_vlm_batch()
    batch["pixel_values"] = [torch.randn(3, 1176), None, [torch.randn(2, 1176)]]
    frame = py_wire.encode(batch, LOOSE)
    pv = py_wire.decode(frame)["pixel_values"]
    lo, n = frame_address(frame)
    whole = pv.as_tensor()
    assert whole.shape == (5, 1176) and lo <= whole.data_ptr() < lo + n
    assert torch.equal(whole, torch.cat([batch["pixel_values"][0], batch["pixel_values"][2][0]]))
    assert pv.segment_counts() == [1, 0, 1]
    assert pv[1] is None and len(pv) == 3


@pytest.mark.parametrize(
    "wrap",
    [
        bytes,
        bytearray,
        lambda f: memoryview(bytes(f)),
        lambda f: np.frombuffer(bytes(f), dtype=np.uint8),
        lambda f: torch.frombuffer(bytearray(bytes(f)), dtype=torch.uint8),
    ],
    ids=["bytes", "bytearray", "memoryview", "numpy", "torch"],
)
def test_decode_accepts_every_buffer(vlm, wrap):
    batch, frame = vlm
    decoded = py_wire.decode(wrap(frame))
    assert torch.equal(decoded["pixel_values"][0][0], batch["pixel_values"][0])
    assert torch.equal(decoded["advantages"].values(), torch.cat(batch["advantages"]))


def test_decode_from_mmap_is_zero_copy(vlm, tmp_path):
    batch, frame = vlm
    path = tmp_path / "f.bin"
    path.write_bytes(bytes(frame))
    with open(path, "rb") as fh:
        mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        # A read-only mapping: zero-copy is what "view" asks for (the default would copy it).
        decoded = py_wire.decode(mm, writable="view")
        assert torch.equal(decoded["reward"], batch["reward"])
        base = np.frombuffer(mm, dtype=np.uint8).ctypes.data
        for name in ("reward", "input_ids"):
            value = decoded[name]
            address = (value.values() if value.is_nested else value).data_ptr()
            assert base <= address < base + len(mm), f"{name} was copied out of the mapping"
        del decoded
        gc.collect()


def test_misaligned_base_is_copied_once(vlm):
    batch, frame = vlm
    shifted = bytearray(len(frame) + 1)
    shifted[1:] = bytes(frame)
    view = memoryview(shifted)[1:]
    source = np.frombuffer(shifted, dtype=np.uint8).ctypes.data
    assert (source + 1) % 16, "the test needs a base that is not 16-byte aligned"
    frame = py_wire.Frame.from_buffer(view)
    copy = frame_address(frame)[0]
    assert not source <= copy < source + len(shifted), "a misaligned base was not copied"
    assert copy % 64 == 0
    decoded = py_wire.decode(frame)
    assert torch.equal(decoded["reward"], batch["reward"])
    lo, size = frame_address(frame)
    assert lo <= decoded["reward"].data_ptr() < lo + size, "decode copied again"


def test_readonly_input_gives_no_warning(vlm, recwarn):
    _, frame = vlm
    py_wire.decode(bytes(frame))
    py_wire.decode(bytes(frame), writable="view")
    assert not [w for w in recwarn if "writable" in str(w.message)]


def test_pickle_protocol_5_is_zero_copy(vlm):
    batch, frame = vlm
    buffers = []
    data = pickle.dumps(frame, protocol=5, buffer_callback=buffers.append)
    assert len(data) < 200  # the payload went out of band
    assert len(buffers) == 1
    lo, _ = frame_address(frame)
    assert np.frombuffer(buffers[0], dtype=np.uint8).ctypes.data == lo
    rebuilt = pickle.loads(data, buffers=buffers)
    assert frame_address(rebuilt)[0] == lo  # the rebuilt frame wraps the same memory
    decoded = py_wire.decode(rebuilt)
    assert torch.equal(decoded["pixel_values"][2][0], batch["pixel_values"][2][0])
    in_band = pickle.loads(pickle.dumps(frame, protocol=4))
    assert bytes(in_band) == bytes(frame)


def test_schema_must_match(vlm):
    _, frame = vlm
    with pytest.raises(SchemaError, match="encoded with schema 'qwen2_5_vl'"):
        py_wire.decode(frame, "text_grpo")
    assert py_wire.decode(frame, "qwen2_5_vl")["reward"].shape == (3,)


def test_stage_decodes_only_its_fields(vlm):
    _, frame = vlm
    decoded = py_wire.decode(frame, stage="generation")
    encoded = {f.name for f in frame.layout.fields}
    assert set(decoded) == set(QWEN.fields_for("generation")) & encoded
    assert "pixel_values" not in decoded and "input_ids" in decoded


def test_padded_and_list_layouts(vlm):
    batch, frame = vlm
    padded = py_wire.decode(frame, layout="padded")
    assert padded["input_ids"].shape == (3, 9)
    assert padded["input_lengths"].tolist() == [6, 3, 9]
    assert torch.equal(padded["input_ids"][1, :3], batch["input_ids"][1])
    assert (padded["input_ids"][1, 3:] == 0).all()
    listed = py_wire.decode(frame, layout="list")
    assert all(
        torch.equal(a, b) for a, b in zip(listed["advantages"], batch["advantages"], strict=False)
    )
    assert listed["pixel_values"][1] is None


def test_bfloat16_bool_zero_d_and_zero_size():
    schema = py_wire.Schema.from_dict(
        {
            "name": "kinds",
            "sequence_field": "ids",
            "fields": {
                "ids": {"tier": "per_token", "dtype": "int32"},
                "mask": {"tier": "per_token", "dtype": "bool", "shape": [2]},
                "media": {"tier": "packed", "dtype": "bfloat16", "shape": ["*", "*", 3]},
                "score": {"tier": "scalar", "dtype": "bfloat16"},
            },
        }
    )
    batch = {
        "ids": [torch.arange(2, dtype=torch.int32), torch.zeros(0, dtype=torch.int32)],
        "mask": [torch.tensor([[True, False], [False, True]]), torch.zeros(0, 2, dtype=torch.bool)],
        "media": [
            [torch.randn(2, 0, 3, dtype=torch.bfloat16), torch.randn(1, 5, 3).bfloat16()],
            [],
        ],
        "score": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
    }
    decoded = py_wire.decode(py_wire.encode(batch, schema))
    assert decoded["score"].dtype == torch.bfloat16 and decoded["score"].shape == (2,)
    assert torch.equal(decoded["score"], batch["score"])
    assert decoded["media"].segment_counts() == [2, 0]
    assert decoded["media"][0][0].shape == (2, 0, 3)
    assert torch.equal(decoded["media"][0][1], batch["media"][0][1])
    assert torch.equal(decoded["mask"].unbind()[0], batch["mask"][0])


def test_zero_row_batch_round_trips():
    batch = small_text_batch(())
    frame = py_wire.encode(batch, "text_grpo")
    assert frame.num_rows == 0
    decoded = py_wire.decode(frame, layout="list")
    assert decoded["input_ids"] == [] and decoded["reward"].shape == (0,)
    nested = py_wire.decode(frame)["input_ids"]
    assert nested.size(0) == 0 and nested.unbind() == ()


def test_non_contiguous_inputs():
    batch = small_vlm_batch()
    wide = torch.randn(1176, 8)
    batch["pixel_values"][0] = wide.t()  # a transposed view
    batch["reward"] = torch.arange(6, dtype=torch.float32)[::2]
    decoded = py_wire.decode(py_wire.encode(batch, QWEN))
    assert torch.equal(decoded["pixel_values"][0][0], wide.t())
    assert torch.equal(decoded["reward"], torch.tensor([0.0, 2.0, 4.0]))


def test_jagged_and_padded_inputs_match_lists():
    batch = small_text_batch()
    by_lists = bytes(py_wire.encode(batch, "text_grpo"))
    jagged = dict(batch)
    jagged["input_ids"] = torch.nested.nested_tensor_from_jagged(
        torch.cat(batch["input_ids"]), torch.tensor([0, 5, 5, 12])
    )
    padded = dict(batch)
    padded["advantages"] = torch.nn.utils.rnn.pad_sequence(batch["advantages"], batch_first=True)
    assert bytes(py_wire.encode(jagged, "text_grpo")) == by_lists
    assert bytes(py_wire.encode(padded, "text_grpo")) == by_lists


def test_packed_tensor_input_and_api():
    rows = [torch.ones(2, 1176), None, [torch.zeros(1, 1176), torch.ones(3, 1176)]]
    pt = py_wire.PackedTensor(rows)
    assert pt.segment_counts() == [1, 0, 2] and pt.num_segments == 3
    assert pt.as_tensor().shape == (6, 1176)
    # the CSR form: segments, rows as offsets into references to them
    assert [t.shape[0] for t in pt.segments] == [2, 1, 3]
    assert pt.row_offsets == [0, 1, 1, 3] and pt.row_segments == [0, 1, 2]
    assert len(pt.slice([0, 2])) == 2
    assert len(py_wire.PackedTensor.concat([pt, pt])) == 6
    assert py_wire.PackedTensor([None, None]).as_tensor() is None
    batch = small_vlm_batch()
    batch["pixel_values"] = pt
    decoded = py_wire.decode(py_wire.encode(batch, LOOSE))
    assert decoded["pixel_values"].segment_counts() == [1, 0, 2]


def test_pad_to_max_shape():
    pt = py_wire.PackedTensor([torch.ones(1, 3, 2, 4), [torch.ones(2, 3, 4, 3)]])
    out = pt.as_tensor(pad_to_max_shape=True)
    assert out.shape == (3, 3, 4, 4)
    assert out[0, :, 2:, :].abs().sum() == 0 and out[1:, :, :, 3].abs().sum() == 0
    with pytest.raises(ValueError, match="one rank"):
        py_wire.PackedTensor([torch.ones(1, 2), torch.ones(1, 2, 3)]).as_tensor(
            pad_to_max_shape=True
        )


def test_encode_into_a_reused_buffer(vlm):
    batch, frame = vlm
    out = np.empty(len(frame) + 4096, dtype=np.uint8)
    out[:] = 0xAB  # stale bytes must not leak into padding
    reused = py_wire.encode(batch, QWEN, out=out)
    assert bytes(reused) == bytes(frame)
    assert frame_address(reused)[0] == out.ctypes.data
    with pytest.raises(py_wire.BatchError, match="out holds 10 bytes but this frame needs"):
        py_wire.encode(batch, QWEN, out=bytearray(10))


def test_encode_parts_are_the_frame_and_borrow_big_payloads(vlm):
    batch, frame = vlm
    parts = py_wire.encode_parts(batch, QWEN, min_borrow=1024)
    assert b"".join(bytes(p) for p in parts) == bytes(frame)
    borrowed = [p for p in parts if not isinstance(p, bytes)]
    addresses = {np.frombuffer(p, dtype=np.uint8).ctypes.data for p in borrowed}
    assert batch["pixel_values"][0].data_ptr() in addresses  # no copy of the shared image
    assert len(borrowed) == 2  # the two distinct images; the repeat is stored once
    assert all(memoryview(p).readonly for p in borrowed)


def test_decoded_packed_tensor_re_encodes_without_row_work(vlm):
    batch, frame = vlm
    decoded = py_wire.decode(frame)
    again = dict(
        batch, pixel_values=decoded["pixel_values"], image_grid_thw=decoded["image_grid_thw"]
    )
    assert bytes(py_wire.encode(again, QWEN)) == bytes(frame)


def test_stage_decode_presents_absent_media_as_empty_rows():
    batch = small_text_batch()
    frame = py_wire.encode(batch, QWEN)  # no media columns at all
    decoded = py_wire.decode(frame, stage="train")
    assert decoded["pixel_values"].segment_counts() == [0, 0, 0]
    assert decoded["pixel_values"].as_tensor() is None
    assert decoded["image_grid_thw"][1] is None
    assert "mm_token_type_ids" not in decoded  # per-token data is never invented
    listed = py_wire.decode(frame, stage="train", layout="list")
    assert listed["pixel_values"] == [None, None, None]


def test_encode_parts_copies_no_payload_by_default():
    batch = small_text_batch((5, 0, 7))
    parts = py_wire.encode_parts(batch, "text_grpo")
    borrowed = {
        np.frombuffer(p, dtype=np.uint8).ctypes.data for p in parts if not isinstance(p, bytes)
    }
    inputs = [
        t
        for name in ("input_ids", "advantages", "generation_logprobs")
        for t in batch[name]
        if t.numel()
    ]
    inputs += [batch[name] for name in ("input_lengths", "loss_multiplier", "reward")]
    assert {t.data_ptr() for t in inputs} <= borrowed
    frame = bytes(py_wire.encode(batch, "text_grpo"))
    assert b"".join(bytes(p) for p in parts) == frame
    payload = sum(t.nbytes for t in inputs)
    assert sum(len(p) for p in parts if isinstance(p, bytes)) == len(frame) - payload
