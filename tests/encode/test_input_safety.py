"""Encode inputs can neither crash the process nor return wrong data (issue 7, input side):
freed or reset inputs, lying array interfaces, inputs that overlap ``out``, torch's lazy
tensor flags, dtype-blind segment dedup, NeMo-RL's deduplicated PackedTensor, argument types."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from typing import Any

import numpy as np
import pytest
import torch

import py_wire
from py_wire import BatchError
from py_wire.interop import nemo_rl
from tests.helpers import END, PAD, START
from tests.nemo_rl_model import PackedTensor as NemoPacked

S = py_wire.Schema.from_toml(
    """
name = "safety"
version = 1

[fields.x]
tier = "packed"
dtype = "float32"
shape = ["*"]

[fields.w]
tier = "packed"
dtype = "float32"
wire_dtype = "bfloat16"
lossy = true
shape = ["*"]
required = false

[fields.m]
tier = "packed"
dtype = "float32"
shape = ["*", "*"]
required = false

[fields.n]
tier = "packed"
dtype = "int64"
shape = ["*"]
required = false
"""
)
QWEN = py_wire.load_schema("qwen2_5_vl")


def rows(packed: object) -> list[list[torch.Tensor]]:
    """Each row's segments as a list ([] for a row without media)."""
    return [list(r) if r is not None else [] for r in packed.rows()]  # type: ignore[attr-defined]


def joined(parts: list[object]) -> bytes:
    return b"".join(bytes(memoryview(p)) for p in parts)  # type: ignore[arg-type]


# 1. Freed input memory -------------------------------------------------------------------------


@pytest.mark.parametrize("free", ["set_", "resize_0", "storage_of_other"])
def test_encode_parts_hold_the_storage_not_the_tensor(free: str) -> None:
    n = 1 << 20  # 4 MiB: glibc serves it with mmap, so a freed part would fault or read zeros
    t = torch.arange(n, dtype=torch.float32)
    parts = py_wire.encode_parts({"x": [t]}, S)
    want = bytes(py_wire.encode({"x": [t.clone()]}, S))
    if free == "set_":
        t.set_()
    elif free == "resize_0":
        t.set_(torch.empty(0).untyped_storage())
    else:
        t.set_(torch.zeros(n).untyped_storage())
    del t
    gc.collect()
    # Churn the allocator so freed pages would be reused or unmapped.
    junk = [torch.full((n,), 7.0) for _ in range(4)]
    assert joined(parts) == want
    del junk


def test_encode_parts_hold_numpy_exports() -> None:
    a = np.arange(1 << 20, dtype=np.float32)
    parts = py_wire.encode_parts({"x": [a]}, S)
    want = bytes(py_wire.encode({"x": [a.copy()]}, S))
    # The export references the array: numpy refuses to resize it while the parts live.
    with pytest.raises(ValueError):
        a.resize(10)
    del a
    gc.collect()
    assert joined(parts) == want


class _RunsMidEncode(torch.Tensor):
    """A row whose ``untyped_storage()`` (which encode calls while it reads the batch, after
    the rows before it and before it copies any byte) runs ``hook`` once it has its storage,
    before returning it: a storage swap placed at one known moment, where another thread's
    would land at a random one."""

    hook: Any = None

    def untyped_storage(self) -> Any:
        storage = super().untyped_storage()
        hook, type(self).hook = type(self).hook, None
        if hook is not None:
            hook(self)
        return storage


def test_encode_copies_the_storage_it_captured_after_the_tensor_was_set_to_another() -> None:
    """Row 0 is captured (its storage held), then, before the copy, its tensor is ``set_()``
    to a new storage and nothing else references the old one; the allocator is churned so
    that freed pages would be reused or unmapped. The frame holds row 0's bytes as they were
    at capture: py_wire kept the storage alive. (In a child process: reading freed memory
    can crash.)"""
    proc = run_isolated(
        """
        import gc
        import torch
        import py_wire
        from tests.encode.test_input_safety import S, _RunsMidEncode, rows

        n = 1 << 20  # 4 MiB: glibc serves it with mmap, so freed pages are unmapped
        victim = torch.full((n,), 3.0)
        churn = []

        def swap(_: object) -> None:
            victim.set_(torch.full((n,), 9.0).untyped_storage())
            gc.collect()
            churn.extend(torch.full((n,), 7.0) for _ in range(4))

        _RunsMidEncode.hook = swap
        second = torch.full((16,), 5.0).as_subclass(_RunsMidEncode)
        frame = py_wire.encode({"x": [victim, second]}, S)
        assert _RunsMidEncode.hook is None and churn, "the swap never ran"
        assert bool((victim == 9.0).all()), "the tensor was not swapped"
        got = rows(py_wire.decode(frame, S)["x"])
        print("row 0:", sorted(set(got[0][0].tolist())), "row 1:", sorted(set(got[1][0].tolist())))
        """
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "row 0: [3.0] row 1: [5.0]", proc.stdout


def test_a_row_whose_storage_is_swapped_between_its_storage_and_pointer_reads_is_refused() -> None:
    """The storage is read first, then the data pointer: a ``set_()`` landing between the two
    (here placed there by the row's own ``untyped_storage()``) leaves a pointer outside the
    storage held, which encode refuses with a BatchError rather than copy unheld memory."""
    other = torch.full((64,), 9.0)

    def swap(row: torch.Tensor) -> None:
        row.set_(other.untyped_storage())

    _RunsMidEncode.hook = swap
    row = torch.full((64,), 3.0).as_subclass(_RunsMidEncode)
    with pytest.raises(BatchError, match=r'field "x", row 1.*do not lie inside its storage'):
        py_wire.encode({"x": [torch.ones(2), row]}, S)
    assert _RunsMidEncode.hook is None


# 2. Lying __array_interface__ --------------------------------------------------------------------


def run_isolated(code: str) -> subprocess.CompletedProcess[str]:
    """Runs `code` in a fresh interpreter, so a regression crashes it rather than pytest."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_lying_array_interface_is_refused_not_read() -> None:
    proc = run_isolated(
        """
        import py_wire
        from tests.encode.test_input_safety import S

        class Liar:
            __array_interface__ = {
                "version": 3, "typestr": "<f4", "shape": (1 << 20,), "data": (8, False),
            }

        try:
            py_wire.encode({"x": [Liar()]}, S)
        except py_wire.BatchError as e:
            print("refused:", e)
        else:
            print("accepted")
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert "refused:" in proc.stdout, proc.stdout
    assert 'field "x", row 0' in proc.stdout
    assert "__array_interface__" in proc.stdout


def test_buffer_protocol_inputs() -> None:
    """numpy goes through the buffer protocol: dtype from the format, strides from the export."""
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    one = [np.ones(1, dtype=np.float32)] * 3
    f = py_wire.encode({"x": one, "m": [a[:, ::2].copy(), a[:, ::2], a[1:3]]}, S)
    got = rows(py_wire.decode(f, S)["m"])
    assert torch.equal(got[0][0], torch.from_numpy(a[:, ::2].copy()))
    assert torch.equal(got[1][0], torch.from_numpy(a[:, ::2].copy()))
    assert torch.equal(got[2][0], torch.from_numpy(a[1:3].copy()))
    n = np.array([1, -2, 3], dtype=np.int64)
    f = py_wire.encode({"x": [a[0]], "n": [n]}, S)
    assert rows(py_wire.decode(f, S)["n"])[0][0].tolist() == [1, -2, 3]
    for bad, what in [
        (np.arange(4, dtype=">f4"), "format"),
        (np.arange(4, dtype=np.float32)[::-1], "negative"),
        (np.array(["a"], dtype=object), "format|buffer"),
    ]:
        with pytest.raises(BatchError, match=rf"field .x., row 0.*({what})"):
            py_wire.encode({"x": [bad]}, S)


# 3. Inputs overlapping out -------------------------------------------------------------------


def test_reencode_reversed_rows_into_own_buffer_is_refused() -> None:
    batch = {"x": [torch.tensor([100.0, 101, 102]), torch.tensor([200.0, 201, 202, 203, 204, 205])]}
    first = py_wire.encode(batch, S)
    buf = bytearray(len(first) + 4096)
    view = np.frombuffer(buf, dtype=np.uint8)
    # An aligned base inside buf, so decode borrows instead of copying.
    start = (-view.ctypes.data) % 64
    window = view[start : start + len(first)]
    window[:] = np.frombuffer(bytes(first), dtype=np.uint8)
    decoded = rows(py_wire.decode(window, S)["x"])
    reversed_batch = {"x": [decoded[1][0], decoded[0][0]]}
    before = bytes(buf)
    with pytest.raises(BatchError, match=r"field .x., row 0, segment 0: the input overlaps `out`"):
        py_wire.encode(reversed_batch, S, out=window)
    assert bytes(buf) == before, "a refused encode wrote into out"
    # The same rows copied out first encode fine into the same buffer.
    safe = {"x": [decoded[1][0].clone(), decoded[0][0].clone()]}
    got = rows(py_wire.decode(py_wire.encode(safe, S, out=window), S)["x"])
    assert got[0][0].tolist() == [200, 201, 202, 203, 204, 205]
    assert got[1][0].tolist() == [100, 101, 102]


def test_dense_input_overlapping_out_is_refused() -> None:
    text = py_wire.load_schema("text_grpo")
    out = np.zeros(1 << 16, dtype=np.uint8)
    reward = torch.from_numpy(out[64:80]).view(torch.float32)
    batch = {
        "input_ids": [torch.arange(3)] * 4,
        "advantages": [torch.zeros(3)] * 4,
        "generation_logprobs": [torch.zeros(3)] * 4,
        "input_lengths": torch.full((4,), 3),
        "loss_multiplier": torch.ones(4),
        "reward": reward,
    }
    with pytest.raises(BatchError, match=r"field .reward.: the input overlaps `out`"):
        py_wire.encode(batch, text, out=out)


# 4. Lazy and odd tensor states -----------------------------------------------------------------


def lazy_cases() -> list[tuple[str, object, str]]:
    z = torch.tensor([1 + 2j, 3 - 4j])
    cases: list[tuple[str, object, str]] = [
        ("neg-bit imag of conj", z.conj().imag, r"resolve_neg"),
        ("neg view", torch._neg_view(torch.arange(4.0)), r"resolve_neg"),
        ("sparse coo", torch.eye(3).to_sparse(), r"layout torch.sparse_coo.*to_dense"),
        ("sparse csr", torch.eye(3).to_sparse_csr(), r"layout torch.sparse_csr.*to_dense"),
        ("sparse csc", torch.eye(3).to_sparse_csc(), r"layout torch.sparse_csc.*to_dense"),
        ("sparse bsr", torch.eye(4).to_sparse_bsr((2, 2)), r"layout torch.sparse_bsr"),
        ("sparse bsc", torch.eye(4).to_sparse_bsc((2, 2)), r"layout torch.sparse_bsc"),
        ("meta", torch.empty(3, device="meta"), r"meta tensor has no data"),
        (
            "nested strided",
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)]),
            r"nested tensor",
        ),
        (
            "nested jagged",
            torch.nested.nested_tensor([torch.ones(2), torch.ones(3)], layout=torch.jagged),
            r"__torch_dispatch__|layout",
        ),
        (
            "functional",
            torch._to_functional_tensor(torch.arange(3.0)),
            r"cannot read the tensor",
        ),
    ]
    if torch.backends.mkldnn.is_available():
        cases.append(("mkldnn", torch.ones(3).to_mkldnn(), r"layout torch._mkldnn.*to_dense"))
    return cases


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("case", lazy_cases(), ids=lambda c: c[0])
def test_lazy_tensor_states_are_refused(case: tuple[str, object, str]) -> None:
    _, t, match = case
    with pytest.raises(BatchError, match=rf"field .x., row 1.*{match}"):
        py_wire.encode({"x": [torch.ones(2), t]}, S)


def test_conj_and_fake_and_quantized_are_refused() -> None:
    with pytest.raises(BatchError, match=r"row 0.*resolve_conj"):
        py_wire.encode({"x": [torch.tensor([1 + 2j]).conj()]}, S)
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        fake = torch.empty(4)
    with pytest.raises(BatchError, match=r"row 0.*FakeTensor.*__torch_dispatch__"):
        py_wire.encode({"x": [fake]}, S)
    with pytest.warns(UserWarning):
        q = torch.quantize_per_tensor(torch.ones(3), 0.1, 0, torch.qint8)
    with pytest.raises(BatchError, match=r"row 0.*dequantize"):
        py_wire.encode({"x": [q]}, S)


def test_resolved_neg_bit_round_trips_and_parameters_pass() -> None:
    imag = torch.tensor([1 + 2j, 3 - 4j]).conj().imag
    f = py_wire.encode({"x": [imag.resolve_neg(), torch.nn.Parameter(torch.ones(2))]}, S)
    got = rows(py_wire.decode(f, S)["x"])
    assert got[0][0].tolist() == [-2.0, 4.0]
    assert got[1][0].tolist() == [1.0, 1.0]


# 5. Segment dedup keys on dtype ------------------------------------------------------------------


def test_dedup_key_includes_dtype() -> None:
    x = torch.tensor([1.5, 2.5, 3.5, 4.5])
    y = x.view(torch.bfloat16)[:4]  # same address, shape and strides; other bytes on the wire
    assert y.data_ptr() == x.data_ptr() and y.shape == x.shape and y.stride() == x.stride()
    f = py_wire.encode({"x": [x, x], "w": [x, y]}, S)
    got = rows(py_wire.decode(f, S)["w"])
    assert torch.equal(got[0][0], x.to(torch.bfloat16))
    assert torch.equal(got[1][0], y)
    layout = {d.name: d for d in f.layout.fields}
    assert layout["w"].num_segments == 2
    assert layout["x"].num_segments == 1  # the same tensor twice is still stored once


# 6. NeMo-RL's deduplicated PackedTensor, through py_wire.interop.nemo_rl.from_nemo ----------


def test_core_encode_points_nemo_rl_s_packed_tensor_to_the_interop() -> None:
    with pytest.raises(BatchError, match=r"field 'x'.*nemo_rl\.from_nemo"):
        py_wire.encode({"x": NemoPacked([torch.randn(3)], 0)}, S)


def test_nemo_dedup_csr_reproducer_round_trips() -> None:
    """Row 0 has two images, row 1 is text-only: as many physical tensors as rows, the case
    that misaligned silently when only ``.tensors`` was read."""
    a, b = torch.randn(4, 1176), torch.randn(8, 1176)
    ga, gb = torch.tensor([[1, 2, 2]]), torch.tensor([[1, 2, 4]])
    ids = [torch.tensor([1, START, PAD, END, START, PAD, PAD, END]), torch.tensor([3, 4, 5])]
    batch = {
        "input_ids": ids,
        "advantages": [torch.zeros(len(t)) for t in ids],
        "generation_logprobs": [torch.zeros(len(t)) for t in ids],
        "input_lengths": torch.tensor([len(t) for t in ids]),
        "loss_multiplier": torch.ones(2),
        "reward": torch.zeros(2),
        "pixel_values": NemoPacked([a, b], 0, _row_offsets=[0, 2, 2], _segment_indices=[0, 1]),
        # A None physical entry referenced by a row is no media for that row.
        "image_grid_thw": NemoPacked(
            [ga, gb, None], 0, _row_offsets=[0, 2, 3], _segment_indices=[0, 1, 2]
        ),
    }
    decoded = py_wire.decode(py_wire.encode(nemo_rl.from_nemo(batch), QWEN), QWEN)
    pv = rows(decoded["pixel_values"])
    assert [len(r) for r in pv] == [2, 0]
    assert torch.equal(pv[0][0], a) and torch.equal(pv[0][1], b)
    grid = rows(decoded["image_grid_thw"])
    assert [len(r) for r in grid] == [2, 0]
    assert torch.equal(grid[0][0], ga) and torch.equal(grid[0][1], gb)


def test_nemo_dedup_shared_media_is_stored_once() -> None:
    a, b = torch.randn(3), torch.randn(5)
    packed = NemoPacked([a, b], 0, _row_offsets=[0, 1, 3, 3, 4], _segment_indices=[0, 0, 1, 1])
    f = py_wire.encode(nemo_rl.from_nemo({"x": packed}), S)
    got = rows(py_wire.decode(f, S)["x"])
    assert [len(r) for r in got] == [1, 2, 0, 1]
    assert torch.equal(got[0][0], a) and torch.equal(got[1][0], a)
    assert torch.equal(got[1][1], b) and torch.equal(got[3][0], b)
    fields = {d.name: d for d in f.layout.fields}
    assert fields["x"].num_segments == 2


def test_nemo_offsets_as_tensors() -> None:
    a = torch.randn(3)
    packed = NemoPacked([a], 0)
    # NeMo-RL's slicing can leave the CSR lists as tensors.
    packed._row_offsets = torch.tensor([0, 1, 1])  # type: ignore[assignment]
    packed._segment_indices = torch.tensor([0])  # type: ignore[assignment]
    got = rows(py_wire.decode(py_wire.encode(nemo_rl.from_nemo({"x": packed}), S), S)["x"])
    assert [len(r) for r in got] == [1, 0]


def test_nemo_len_mismatch_is_refused() -> None:
    class Lying(NemoPacked):
        def __len__(self) -> int:
            return 3

    a = torch.randn(3)
    with pytest.raises(BatchError, match=r"field .x..*len\(\) is 3.*describe 2 rows"):
        py_wire.encode(
            nemo_rl.from_nemo({"x": Lying([a], 0, _row_offsets=[0, 1, 1], _segment_indices=[0])}), S
        )
    with pytest.raises(BatchError, match=r"field .x..*len\(\) is 3.*holds 2 rows"):
        py_wire.encode(nemo_rl.from_nemo({"x": Lying([a, a], 0)}), S)
    with pytest.raises(BatchError, match=r"field .x..*names segment 5 of 1"):
        py_wire.encode(
            nemo_rl.from_nemo({"x": NemoPacked([a], 0, _row_offsets=[0, 1], _segment_indices=[5])}),
            S,
        )
    with pytest.raises(BatchError, match=r"field .x..*only one of"):
        py_wire.encode(nemo_rl.from_nemo({"x": NemoPacked([a], 0, _row_offsets=[0, 1])}), S)


# 7. Argument errors --------------------------------------------------------------------------


@pytest.mark.parametrize("threads", ["2", 1.5, True])
def test_threads_of_another_type_is_a_type_error(threads: object) -> None:
    with pytest.raises(TypeError, match=r"threads must be an int"):
        py_wire.encode({"x": [torch.ones(2)]}, S, threads=threads)  # type: ignore[arg-type]


@pytest.mark.parametrize("threads", [-1, 0, 10**30])
def test_threads_out_of_range_is_a_wire_error(threads: int) -> None:
    with pytest.raises(
        py_wire.WireError, match=rf"threads must be between 1 and 1024, got {threads}"
    ):
        py_wire.encode({"x": [torch.ones(2)]}, S, threads=threads)


def test_bad_min_borrow_names_it() -> None:
    for bad, error in (("2", TypeError), (2.0, TypeError), (-1, py_wire.WireError)):
        with pytest.raises(error, match=r"min_borrow must be"):
            py_wire.encode_parts({"x": [torch.ones(2)]}, S, min_borrow=bad)  # type: ignore[arg-type]
