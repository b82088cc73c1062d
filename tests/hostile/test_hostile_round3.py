"""Issue 27, findings 5 to 11: one regression test each (each failed on the code before it).

5 a selection's ``len()`` never sizes an allocation; 6 recorded widths bounded by the frame;
7 pad values the dtype cannot hold; 8 ``as_tensor`` padding and ``device``; 9 the escapes of
the argument sweep; 10 one row rule; 11 reserved metadata keys.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire import PackedTensor, RowIndexError, WireError, trainer
from py_wire.interop import nemo_rl
from py_wire.interop import verl as pw_verl
from tests.helpers import HugeLen, HugeLenPlain, small_text_batch

TEN = py_wire.encode(small_text_batch(tuple(range(1, 11))), "text_grpo")


def _user_metadata(frame: py_wire.Frame) -> dict[str, str]:
    return {k: v for k, v in frame.metadata.items() if not k.startswith("py_wire.")}


def _with_metadata(frame: py_wire.Frame, **extra: str) -> py_wire.Frame:
    """``frame`` re-encoded with its caller metadata, ``extra`` written over it."""
    metadata = {**_user_metadata(frame), **extra}
    return py_wire.encode(py_wire.decode(frame), frame.schema, metadata=metadata)


# -- 5: a len() of 2**62 is never a Vec's capacity --------------------------------------------


def test_take_rows_never_sizes_from_len() -> None:
    with pytest.raises(WireError, match=r"rows: a selection of 4611686018427387904 rows"):
        py_wire.take_rows(TEN, HugeLen())
    with pytest.raises(WireError, match=r"rows must be"):
        py_wire.take_rows(TEN, HugeLenPlain())
    # The list-of-spans path still reads its spans.
    assert py_wire.take_rows(TEN, [range(0, 2), *([range(0, 1)] * 3)]).num_rows == 5


def test_take_rows_refuses_a_sequence_longer_than_its_len() -> None:
    class Liar(Sequence[int]):
        def __len__(self) -> int:
            return 2

        def __getitem__(self, i: Any) -> Any:
            if i >= 5:
                raise IndexError(i)
            return 0

    with pytest.raises(WireError, match="more than the 2 rows its len"):
        py_wire.take_rows(TEN, Liar())


# -- 6: recorded widths are hostile -----------------------------------------------------------


def _verl_frame(rows: int) -> py_wire.Frame:
    return pw_verl.to_frame(
        {
            "input_ids": torch.tensor([[5, 6, 7, 8]] * rows),
            "attention_mask": torch.ones(rows, 4, dtype=torch.int64),
            "position_ids": torch.tensor([[0, 1, 2, 3]] * rows),
            "responses": torch.tensor([[7, 8]] * rows),
            "prompts": torch.tensor([[5, 6]] * rows),
            "response_mask": torch.ones(rows, 2, dtype=torch.int64),
            "old_log_probs": torch.full((rows, 2), -0.5),
            "advantages": torch.full((rows, 2), 0.5),
            "uid": np.array(["a"] * rows, dtype=object),
        },
        "verl/text",
    )


def test_verl_recorded_prompt_length_is_bounded_by_the_frame() -> None:
    frame = _with_metadata(_verl_frame(64), **{"verl.prompt_length": str(2**24)})
    assert len(frame) < 64 * 1024
    with pytest.raises(py_wire.FrameError, match=r"verl\.prompt_length") as info:
        pw_verl.from_frame(frame)
    assert info.value.field == "verl.prompt_length"
    # The record of an honest frame still rebuilds the source's widths.
    out = pw_verl.from_frame(_with_metadata(_verl_frame(64), **{"verl.prompt_length": "100"}))
    batch = out["batch"] if isinstance(out, dict) else out.batch
    assert tuple(batch["input_ids"].shape) == (64, 102)


def test_nemo_rl_recorded_width_is_bounded_by_the_frame() -> None:
    rows = py_wire.encode(small_text_batch((3,) * 64), "text_grpo")
    frame = _with_metadata(rows, **{nemo_rl.PADDED_WIDTH_KEY: str(2**20)})
    with pytest.raises(py_wire.FrameError, match=r"nemo_rl\.padded_width") as info:
        nemo_rl.from_frame(frame)
    assert info.value.field == nemo_rl.PADDED_WIDTH_KEY
    honest = _with_metadata(rows, **{nemo_rl.PADDED_WIDTH_KEY: "16"})
    assert tuple(nemo_rl.from_frame(honest)["input_ids"].shape) == (64, 16)


# -- 7: pad values the dtype cannot hold ------------------------------------------------------


@pytest.mark.parametrize("value", [1e39, -1e39, 2**80 * 2**300, 2**1100])
def test_a_float32_pad_value_out_of_range_names_the_field(value: float) -> None:
    with pytest.raises(WireError, match=r"pad_values\['advantages'\]"):
        py_wire.decode(TEN, layout="padded", pad_values={"advantages": value})


@pytest.mark.parametrize("value", [2**80, math.inf, -math.inf, math.nan, 3.4e38])
def test_a_float32_pad_value_it_holds_pads(value: float) -> None:
    out = py_wire.decode(TEN, layout="padded", pad_values={"advantages": value})
    got = float(out["advantages"][0, -1])
    assert (math.isnan(got) and math.isnan(value)) or got == float(
        torch.tensor(float(value)).float()
    )


def test_verl_recorded_pad_value_out_of_range_is_a_frame_error() -> None:
    frame = _with_metadata(_verl_frame(2), **{"verl.pad_values": '{"advantages":1e39}'})
    with pytest.raises(py_wire.FrameError, match=r"verl\.pad_values"):
        pw_verl.from_frame(frame)


# -- 8: as_tensor padding and device -----------------------------------------------------------


def test_as_tensor_pad_to_max_shape_is_bounded() -> None:
    pt = PackedTensor([torch.empty(2**40, 0), torch.empty(0, 2**40)])
    with pytest.raises(WireError, match="pad_to_max_shape"):
        pt.as_tensor(pad_to_max_shape=True)
    small = PackedTensor([torch.ones(1, 2), torch.ones(2, 3)])
    assert tuple(small.as_tensor(pad_to_max_shape=True).shape) == (3, 3)


@pytest.mark.parametrize(
    ("device", "error"),
    [("bogus", WireError), (-1, WireError), (2**63, WireError), (1.5, TypeError)],
)
def test_as_tensor_device_is_checked(device: Any, error: type[Exception]) -> None:
    pt = PackedTensor([torch.ones(2, 3)])
    with pytest.raises(error, match="device"):
        pt.as_tensor(device=device)
    with pytest.raises(error, match="device"):
        pt.to(device)


# -- 9: the escapes of the sweep ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("call", "error", "names"),
    [
        (lambda: py_wire.decode(TEN, layout=np.zeros(2)), WireError, "layout"),
        (lambda: py_wire.encode([1, 2], "text_grpo"), TypeError, "batch"),
        (lambda: py_wire.encoded_nbytes(3, "text_grpo"), TypeError, "batch"),
        (lambda: PackedTensor([torch.ones(1)])[torch.tensor([[0]]) * 1.5], TypeError, "indices"),
        (lambda: PackedTensor([torch.ones(1)])[::0], WireError, "indices"),
        (lambda: PackedTensor([torch.ones(1)])[np.float32(0.0)], TypeError, "index"),
        (lambda: PackedTensor(HugeLen()), WireError, "rows"),
        (lambda: py_wire.placeholder_runs(HugeLen(), 3), WireError, "input_ids"),
        (lambda: nemo_rl.to_frame("text", "nemo_rl/qwen2_5_vl"), TypeError, "batched_data_dict"),
        (lambda: py_wire.load_schema("a" * 300), py_wire.SchemaError, "schema"),
        (lambda: py_wire.load(1), TypeError, "path"),
        (lambda: py_wire.save(TEN, 1), TypeError, "path"),
        (lambda: py_wire.concat(1), TypeError, "frames"),
        (lambda: PackedTensor(1), TypeError, "rows"),
    ],
)
def test_the_sweep_escapes(call: Any, error: type[Exception], names: str) -> None:
    with pytest.raises(error, match=names):
        call()


def test_packed_tensor_indexing_by_tensors_and_arrays() -> None:
    pt = PackedTensor([torch.zeros(2, 3), None, torch.ones(1, 3)])
    assert pt[torch.tensor(2)][0].shape == (1, 3)
    assert len(pt[torch.tensor([0, 1])]) == 2
    assert len(pt[np.array([2, 0])]) == 2
    with pytest.raises(IndexError, match="index: PackedTensor row 3 is out of range for 3 rows"):
        pt[3]
    with pytest.raises(RowIndexError):
        pt.slice([0, 5])


# -- 10: one row rule --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "call",
    [
        lambda: py_wire.decode(TEN, rows=range(0, 20)),
        lambda: list(trainer.iter_micro_batches(TEN, [range(15, 20)])),
        lambda: py_wire.take_rows(TEN, range(0, 20)),
        lambda: py_wire.take_rows(TEN, [3, 10]),
        lambda: py_wire.take_rows(TEN, np.array([10], dtype=np.uint64)),
        lambda: list(trainer.iter_micro_batches(TEN, [[0, 10]])),
    ],
)
def test_rows_out_of_range_are_refused_alike(call: Any) -> None:
    with pytest.raises(RowIndexError, match=r"row \d+ is out of range for 10 rows") as info:
        call()
    assert info.value.kind == "row_index"
    assert "rows" in str(info.value) or "groups" in str(info.value)


def test_slices_clamp_like_python() -> None:
    assert len(py_wire.decode(TEN, rows=slice(0, 20))["reward"]) == 10
    assert py_wire.take_rows(TEN, slice(5, 99)).num_rows == 5
    assert len(py_wire.decode(TEN, rows=range(3, 3))["reward"]) == 0


# -- 11: reserved metadata keys ----------------------------------------------------------------


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
