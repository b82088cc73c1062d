"""Micro-batches staged onto a device (``iter_micro_batches(..., device=, pin_memory=)``): the
logic, run on the host here (a CUDA machine runs the same path with a side stream and pinned
buffers; see docs/trainer.md for what ran where)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

import py_wire
from py_wire import _staging
from py_wire.synth.registry import generate

SCHEMA = "qwen2_5_vl"


@pytest.fixture(scope="module")
def vlm() -> py_wire.Frame:
    return py_wire.encode(generate(SCHEMA, 10, seed=3), SCHEMA)


def _leaves(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value.values(), value.offsets()] if value.is_nested else [value]
    if isinstance(value, py_wire.PackedTensor):
        return value.segments
    if isinstance(value, dict):
        return [t for v in value.values() for t in _leaves(v)]
    if isinstance(value, list):
        return [t for v in value for t in _leaves(v)]
    return []


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) and a.is_nested:
        return torch.equal(a.values(), b.values()) and torch.equal(a.offsets(), b.offsets())
    if isinstance(a, torch.Tensor):
        return a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, py_wire.PackedTensor):
        ra, rb = a.rows(), b.rows()
        return len(ra) == len(rb) and all(
            (x is None) == (y is None)
            and (x is None or all(torch.equal(s, t) for s, t in zip(x, y, strict=True)))
            for x, y in zip(ra, rb, strict=True)
        )
    if isinstance(a, list):
        return all(_equal(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


@pytest.mark.parametrize(
    "options", [{}, {"layout": "padded", "attention_mask": True}, {"layout": "list"}], ids=str
)
def test_staged_micro_batches_are_views_of_one_buffer_each(
    vlm: py_wire.Frame, options: dict
) -> None:
    plain = list(py_wire.trainer.iter_micro_batches(vlm, 4, **options))
    staged = list(py_wire.trainer.iter_micro_batches(vlm, 4, device="cpu", **options))
    assert len(staged) == len(plain) == 3
    buffers = set()
    for want, got in zip(plain, staged, strict=True):
        assert got.keys() == want.keys()
        for k in want:
            assert _equal(got[k], want[k]), k
        storages = {t.untyped_storage().data_ptr() for t in _leaves(got)}
        assert len(storages) == 1  # one buffer per micro-batch
        buffers |= storages
        for t in _leaves(got):
            assert t.data_ptr() % _staging.ALIGN == 0
    assert len(buffers) == 3


def test_jagged_fields_keep_one_ragged_dim(vlm: py_wire.Frame) -> None:
    mb = next(iter(py_wire.trainer.iter_micro_batches(vlm, 4, device="cpu")))
    ids, adv = mb["input_ids"], mb["advantages"]
    assert ids.offsets() is adv.offsets()
    assert ids.shape[:2] == adv.shape[:2]


def test_the_next_micro_batch_is_staged_before_the_current_is_handed_out(
    vlm: py_wire.Frame, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[int] = []
    original = _staging.Stager.stage

    def stage(self: _staging.Stager, batch: dict) -> Any:
        calls.append(len(batch["reward"]))
        return original(self, batch)

    monkeypatch.setattr(_staging.Stager, "stage", stage)
    it = iter(py_wire.trainer.iter_micro_batches(vlm, 4, device="cpu"))
    next(it)
    assert calls == [4, 4]  # the second micro-batch's copy is issued already
    next(it)
    assert calls == [4, 4, 2]
    next(it)
    with pytest.raises(StopIteration):
        next(it)
    assert len(calls) == 3


def test_staging_arguments(vlm: py_wire.Frame) -> None:
    with pytest.raises(py_wire.WireError, match="device"):
        py_wire.trainer.iter_micro_batches(vlm, 4, device="bogus")
    with pytest.raises(TypeError, match="device"):
        py_wire.trainer.iter_micro_batches(vlm, 4, device=1.5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="pin_memory"):
        py_wire.trainer.iter_micro_batches(vlm, 4, device="cpu", pin_memory="yes")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(py_wire.WireError, match="pin_memory needs CUDA"):
            py_wire.trainer.iter_micro_batches(vlm, 4, device="cpu", pin_memory=True)
    with pytest.raises(py_wire.WireError, match="pass device="):
        py_wire.trainer.iter_micro_batches(vlm, 4, pin_memory=True)
