"""``truncate``: per-token fields cut to ``max_len`` tokens per row; packed media whole."""

from __future__ import annotations

import pytest
import torch

import py_wire
from py_wire.synth import registry

SCHEMA = "qwen2_5_vl"
VISION_END = 151653


@pytest.fixture(scope="module")
def frame() -> py_wire.Frame:
    return py_wire.encode(registry.generate(SCHEMA, 4), SCHEMA)


def test_tokens_cut_media_whole(frame: py_wire.Frame) -> None:
    before = py_wire.decode(frame, layout="list")
    ends = [int((ids == VISION_END).nonzero().max()) + 1 for ids in before["input_ids"]]
    lengths = [len(ids) for ids in before["input_ids"]]
    max_len = max(ends) + 5  # past every image's placeholders, shorter than the longest row
    assert max_len < max(lengths)

    after = py_wire.decode(py_wire.truncate(frame, max_len), layout="list")
    schema = py_wire.load_schema(SCHEMA)
    for name, field in schema.fields.items():
        if name not in before:  # an optional field the generator leaves out
            continue
        if field.tier == "per_token":
            for a, b in zip(after[name], before[name], strict=True):
                assert torch.equal(a, b[:max_len])
        elif field.tier == "packed":
            for ra, rb in zip(after[name], before[name], strict=True):
                assert len(ra) == len(rb)
                for a, b in zip(ra, rb, strict=True):
                    assert a.shape == b.shape and torch.equal(a, b)  # never narrowed
        elif name != schema.lengths_field:
            assert torch.equal(after[name], before[name])
    expected = torch.tensor([min(n, max_len) for n in lengths], dtype=torch.int64)
    assert torch.equal(after["input_lengths"], expected)
    assert max(len(ids) for ids in after["input_ids"]) == max_len


def test_no_op_and_errors(frame: py_wire.Frame) -> None:
    longest = max(len(ids) for ids in py_wire.decode(frame, layout="list")["input_ids"])
    assert bytes(py_wire.truncate(frame, longest)) == bytes(frame)
    with pytest.raises(py_wire.ContractError):
        py_wire.truncate(frame, 1)  # cuts into the images' placeholder runs
    with pytest.raises(py_wire.WireError, match="max_len"):
        py_wire.truncate(frame, -1)


def test_text_rows_shorter_than_max_len_and_empty_rows() -> None:
    from tests.helpers import small_text_batch

    frame = py_wire.encode(small_text_batch((5, 0, 7)), "text_grpo")
    out = py_wire.decode(py_wire.truncate(frame, 6), layout="list")
    assert [len(t) for t in out["input_ids"]] == [5, 0, 6]
    assert out["input_lengths"].tolist() == [5, 0, 6]
    assert torch.equal(out["input_ids"][2], torch.arange(6) + 10)
    assert [
        len(t) for t in py_wire.decode(py_wire.truncate(frame, 0), layout="list")["advantages"]
    ] == [0, 0, 0]
