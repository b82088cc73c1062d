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


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
def test_every_bundled_schemas_staged_micro_batches_equal_the_whole_batch_decoded(
    name: str,
) -> None:
    """Each staged micro-batch, concatenated in order, gives back every field of the whole
    frame's decode, value for value (images included, so an empty image cannot pass)."""
    from tests.schemas.golden import file_name, read

    whole = py_wire.Frame.from_buffer(read(file_name(name)))
    want = py_wire.decode(whole, layout="list")
    staged = list(py_wire.trainer.iter_micro_batches(whole, 2, device="cpu", layout="list"))
    assert sum(len(mb["input_ids"]) for mb in staged) == whole.num_rows
    for field, rows in want.items():
        got = [row for mb in staged for row in _rows(mb[field])]
        assert _equal(got, _rows(rows)), field


def _rows(value: Any) -> list[Any]:
    """A field's rows as a list (a scalar field's tensor split into its rows)."""
    if isinstance(value, torch.Tensor):
        return list(value.unbind(0))
    return list(value)


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


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (docs/trainer.md: what ran where)"
)


@needs_cuda
@pytest.mark.parametrize("pin_memory", [False, True], ids=["pageable", "pinned"])
@pytest.mark.parametrize(
    "options", [{}, {"layout": "padded", "attention_mask": True}, {"layout": "list"}], ids=str
)
def test_cuda_staged_micro_batches_equal_the_host_ones(
    vlm: py_wire.Frame, options: dict, pin_memory: bool
) -> None:
    plain = list(py_wire.trainer.iter_micro_batches(vlm, 4, **options))
    staged = py_wire.trainer.iter_micro_batches(
        vlm, 4, device="cuda", pin_memory=pin_memory, **options
    )
    count = 0
    for want, got in zip(plain, staged, strict=True):
        leaves = _leaves(got)
        assert leaves and all(t.is_cuda for t in leaves)
        assert len({t.untyped_storage().data_ptr() for t in leaves}) == 1
        back = py_wire.trainer.to(got, "cpu")
        assert back.keys() == want.keys()
        for k in want:
            assert _equal(back[k], want[k]), k
        count += 1
    assert count == len(plain) == 3


@needs_cuda
@pytest.mark.parametrize("pin_memory", [False, True], ids=["pageable", "pinned"])
def test_each_micro_batch_is_read_whole_while_later_copies_are_in_flight(
    vlm: py_wire.Frame, pin_memory: bool
) -> None:
    """The trainer's stream is kept busy (matmuls queued before each read), so the copies run
    ahead of it and each micro-batch is dropped before its read has run. Without the wait on
    the copy's event the read could see bytes not yet copied; without ``record_stream`` the
    caching allocator could hand the freed buffer to the next copy under the read. The sums
    read on the device at the end equal the host's."""
    want = [
        mb["input_ids"].values().sum().item() for mb in py_wire.trainer.iter_micro_batches(vlm, 2)
    ]
    busy = torch.randn(2048, 2048, device="cuda")
    sums = []
    for mb in py_wire.trainer.iter_micro_batches(vlm, 2, device="cuda", pin_memory=pin_memory):
        for _ in range(20):
            busy = busy @ busy / 2048**0.5
        sums.append(mb["input_ids"].values().sum())
        del mb
    torch.cuda.synchronize()
    assert [s.item() for s in sums] == want


def test_strided_and_large_leaves_are_packed_in_c_order_on_several_threads() -> None:
    strided = torch.arange(12, dtype=torch.int32).view(3, 4).t()  # not contiguous
    large = torch.randn(6 << 20)  # 24 MiB: past the copy threads' 8 MiB-per-thread threshold
    batch = {"strided": strided, "large": large, "rows": [strided[1:], None]}
    got, _, buffer = _staging.Stager("cpu", threads=4).stage(batch)
    assert torch.equal(got["strided"], strided) and got["strided"].is_contiguous()
    assert torch.equal(got["large"], large)
    assert torch.equal(got["rows"][0], strided[1:]) and got["rows"][1] is None
    assert {t.untyped_storage().data_ptr() for t in _leaves(got)} == {buffer.data_ptr()}


def test_pack_into_refuses_offsets_and_buffers_it_cannot_honour() -> None:
    from py_wire._native import pack_into

    t = torch.arange(4, dtype=torch.int64)  # 32 bytes
    out = torch.zeros(64, dtype=torch.uint8)
    with pytest.raises(py_wire.WireError, match="tensor 1 starts at offset 16, inside the piece"):
        pack_into([t, t], [0, 16], out.numpy())
    with pytest.raises(py_wire.WireError, match=r"tensor 0 \(32 bytes at offset 40\) does not fit"):
        pack_into([t], [40], out.numpy())
    with pytest.raises(py_wire.WireError, match="2 tensors but 1 offsets"):
        pack_into([t, t], [0], out.numpy())
    with pytest.raises(py_wire.BatchError, match="tensor 0 overlaps `out`"):
        pack_into([out[:8]], [16], out.numpy())
    with pytest.raises(py_wire.BatchError, match="writable"):
        pack_into([t], [0], bytes(64))
    assert out.eq(0).all()  # nothing written by a refused call
    pack_into([t, t], [0, 32], out.numpy())
    assert torch.equal(out.view(torch.int64), torch.cat([t, t]))
