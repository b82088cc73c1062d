"""A concat never drops a per-frame fact: frames whose caller metadata disagree are refused,
or the fact becomes a per-row field (``per_row=``)."""

from __future__ import annotations

import pytest
import torch

import py_wire
from tests.helpers import small_text_batch, small_vlm_batch


def _frame(version: int | None, lengths: tuple[int, ...] = (3, 2), **meta: str) -> py_wire.Frame:
    if version is not None:
        meta["policy_version"] = str(version)
    return py_wire.encode(small_text_batch(lengths), "text_grpo", metadata=meta or None)


def test_differing_metadata_is_refused_naming_key_and_values() -> None:
    # The old concat kept the first frame's header: rows of versions 2 and 3 came back as 2.
    with pytest.raises(
        py_wire.WireError, match=r'"policy_version".*frame 0 has "2".*frame 1 has "3"'
    ):
        py_wire.concat([_frame(2), _frame(3)])


def test_a_key_in_some_frames_only_is_refused() -> None:
    with pytest.raises(py_wire.WireError, match=r"frame 1 has no such entry"):
        py_wire.concat([_frame(2), _frame(None)])


def test_agreeing_metadata_is_kept() -> None:
    out = py_wire.concat([_frame(2, run="a"), _frame(2, run="a")])
    assert out.metadata["policy_version"] == "2"
    assert out.metadata["run"] == "a"


def test_per_row_keeps_each_frames_version_on_its_rows() -> None:
    frames = [_frame(2, (3, 2)), _frame(3, (4,)), _frame(2, (1, 1, 1))]
    out = py_wire.concat(frames, per_row={"policy_version": "policy_version"})
    assert "policy_version" not in out.metadata
    got = py_wire.decode(out)["policy_version"]
    assert got.tolist() == [2, 2, 3, 2, 2, 2]
    assert got.dtype == torch.int64
    # Other facts still have to agree.
    with pytest.raises(py_wire.WireError, match='"run"'):
        py_wire.concat(
            [_frame(2, run="a"), _frame(3, run="b")], per_row={"policy_version": "policy_version"}
        )


def test_per_row_concat_of_concats_carries_the_field() -> None:
    per_row = {"policy_version": "policy_version"}
    ab = py_wire.concat([_frame(0), _frame(1)], per_row=per_row)
    out = py_wire.concat([ab, _frame(5, (2,))], per_row=per_row)
    assert py_wire.decode(out)["policy_version"].tolist() == [0, 0, 1, 1, 5]
    # Without per_row the header facts differ (one frame has the key, one has not): refused.
    with pytest.raises(py_wire.WireError, match="policy_version"):
        py_wire.concat([ab, _frame(5)])


def test_per_row_with_media_and_take_rows() -> None:
    batch = small_vlm_batch()
    a = py_wire.encode(batch, "qwen2_5_vl", metadata={"policy_version": "7"})
    b = py_wire.encode(batch, "qwen2_5_vl", metadata={"policy_version": "8"})
    out = py_wire.concat([a, b], per_row={"policy_version": "policy_version"})
    decoded = py_wire.decode(out)
    assert decoded["policy_version"].tolist() == [7, 7, 7, 8, 8, 8]
    assert torch.equal(
        decoded["pixel_values"].as_tensor(),
        torch.cat([py_wire.decode(a)["pixel_values"].as_tensor()] * 2),
    )
    picked = py_wire.take_rows(out, [5, 0])
    assert py_wire.decode(picked)["policy_version"].tolist() == [8, 7]


def test_per_row_refusals() -> None:
    per_row = {"policy_version": "policy_version"}
    with pytest.raises(py_wire.WireError, match="neither metadata key"):
        py_wire.concat([_frame(1), _frame(None)], per_row=per_row)
    with pytest.raises(py_wire.WireError, match='"x1" is not a int64 value'):
        py_wire.concat([_frame(1), _frame(None, policy_version="x1")], per_row=per_row)
    with pytest.raises(py_wire.SchemaError, match="no field 'nope'"):
        py_wire.concat([_frame(1)], per_row={"policy_version": "nope"})
    with pytest.raises(py_wire.SchemaError, match="0-d scalar"):
        py_wire.concat([_frame(1)], per_row={"policy_version": "input_ids"})
    # A frame that stores the field and a header value that contradicts it.
    stored = dict(small_text_batch((2,)), policy_version=torch.tensor([4]))
    both = py_wire.encode(stored, "text_grpo", metadata={"policy_version": "5"})
    with pytest.raises(py_wire.WireError, match="another value in row 0"):
        py_wire.concat([both], per_row=per_row)
    agreeing = py_wire.encode(stored, "text_grpo", metadata={"policy_version": "4"})
    out = py_wire.concat([agreeing, _frame(6, (1,))], per_row=per_row)
    assert py_wire.decode(out)["policy_version"].tolist() == [4, 6]
