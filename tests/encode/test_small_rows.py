"""Per-token rows of many small tensors (issue 10, "tiny rows"): encode reads them through the
fast path and stages their bytes, and must produce the frame the full reader produces, byte
for byte, with the same errors, for every kind of row the full reader takes or refuses.

The reference is ``encode_parts(..., min_borrow=0)``: it borrows every payload, so it stages
nothing and reads every row with the full reader."""

from __future__ import annotations

import gc
import re
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.overrides import TorchFunctionMode

import py_wire
from py_wire import BatchError

TEXT = py_wire.load_schema("text_grpo")
EDGES = (0, 1023, 1024, 1025, 2999)  # rows around where a chunked reader would cut


def text_batch(lengths: list[int], seed: int = 0) -> dict[str, Any]:
    gen = torch.Generator().manual_seed(seed)
    return {
        "input_ids": [torch.randint(0, 151000, (n,), generator=gen) for n in lengths],
        "advantages": [torch.randn(n, generator=gen) for n in lengths],
        "generation_logprobs": [-torch.rand(n, generator=gen) for n in lengths],
        "token_mask": [torch.rand(n, generator=gen) > 0.5 for n in lengths],
        "input_lengths": torch.tensor(lengths, dtype=torch.int64),
        "loss_multiplier": torch.ones(len(lengths)),
        "reward": torch.randn(len(lengths), generator=gen),
    }


def tiny_lengths(rows: int = 3000, seed: int = 0) -> list[int]:
    return np.random.default_rng(seed).integers(0, 17, rows).tolist()


def reference(batch: dict[str, Any], schema: py_wire.Schema = TEXT) -> bytes:
    parts = py_wire.encode_parts(batch, schema)
    return b"".join(bytes(memoryview(p)) for p in parts)  # type: ignore[arg-type]


def same_error(batch: dict[str, Any], schema: py_wire.Schema = TEXT) -> str:
    """Both readers refuse the batch with the same message; returns it."""
    with pytest.raises(BatchError) as fast:
        py_wire.encode(batch, schema)
    with pytest.raises(BatchError) as full:
        py_wire.encode_parts(batch, schema)
    assert str(fast.value) == str(full.value)
    assert (fast.value.field, fast.value.row) == (full.value.field, full.value.row)
    return str(fast.value)


def test_staged_frame_is_the_full_readers_frame() -> None:
    batch = text_batch(tiny_lengths())
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)
    # A jagged nested input of the same rows makes the same frame too.
    nested = dict(batch)
    for name in ("input_ids", "advantages", "generation_logprobs", "token_mask"):
        nested[name] = torch.nested.as_nested_tensor(batch[name], layout=torch.jagged)
    assert bytes(py_wire.encode(nested, TEXT)) == bytes(frame)
    decoded = py_wire.decode(frame, TEXT, layout="list")
    for name in ("input_ids", "advantages", "token_mask"):
        assert all(torch.equal(a, b) for a, b in zip(decoded[name], batch[name], strict=True))
    assert py_wire.encoded_nbytes(batch, TEXT) == len(frame)


def test_large_rows_among_small_ones() -> None:
    lengths = tiny_lengths(2000)
    for r in (0, 7, 1024, 1999):
        lengths[r] = 600  # 4800 bytes of int64: read with its storage held, not staged
    batch = text_batch(lengths)
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)
    got = py_wire.decode(frame, TEXT, layout="list")["input_ids"]
    assert all(torch.equal(a, b) for a, b in zip(got, batch["input_ids"], strict=True))


# Row lengths around the staging limit: int64 rows of up to 512 items (4 KiB) are staged, longer
# ones are held and copied as their own sources; runs of either, at either end, and empty rows.
_ROW_LENGTHS = st.lists(st.sampled_from([0, 1, 3, 511, 512, 513, 900]), min_size=1, max_size=40)


@given(lengths=_ROW_LENGTHS, picks=st.lists(st.integers(0, 39), max_size=12))
def test_staged_and_large_rows_make_the_full_readers_frame(
    lengths: list[int], picks: list[int]
) -> None:
    batch = text_batch(lengths)
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)
    # Frame ops on it: the rows picked (repeats allowed) are the frame of those rows.
    rows = [p % len(lengths) for p in picks]
    picked = {
        name: [value[r] for r in rows] if isinstance(value, list) else value[rows]
        for name, value in batch.items()
    }
    assert bytes(py_wire.take_rows(frame, rows)) == reference(picked)


def test_every_row_large() -> None:
    batch = text_batch([1000, 2000, 700])
    assert bytes(py_wire.encode(batch, TEXT)) == reference(batch)


def test_empty_rows() -> None:
    batch = text_batch([0] * 1500)
    assert bytes(py_wire.encode(batch, TEXT)) == reference(batch)
    batch = text_batch([0, 3, 0, 0, 5, 0])
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)
    assert [len(r) for r in py_wire.decode(frame, TEXT, layout="list")["advantages"]] == [
        0, 3, 0, 0, 5, 0
    ]  # fmt: skip


@pytest.mark.parametrize("row", EDGES)
def test_wrong_dtype_names_the_row(row: int) -> None:
    batch = text_batch(tiny_lengths())
    batch["input_ids"][row] = batch["input_ids"][row].to(torch.int32)
    message = same_error(batch)
    assert f'field "input_ids", row {row}: dtype int32 but the schema declares int64' in message


@pytest.mark.parametrize("row", EDGES)
def test_mixed_dtypes_are_refused(row: int) -> None:
    # float64 among float32 rows (not castable silently), and an int64 row among bools.
    batch = text_batch(tiny_lengths())
    batch["advantages"][row] = batch["advantages"][row].double()
    assert f'field "advantages", row {row}: dtype float64' in same_error(batch)
    batch = text_batch(tiny_lengths())
    batch["token_mask"][row] = batch["token_mask"][row].long()
    assert f'field "token_mask", row {row}: dtype int64' in same_error(batch)


@pytest.mark.parametrize("row", EDGES)
def test_wrong_rank_names_the_row(row: int) -> None:
    batch = text_batch(tiny_lengths())
    batch["advantages"][row] = batch["advantages"][row].unsqueeze(1)
    assert f'field "advantages", row {row}' in same_error(batch)


@pytest.mark.parametrize("row", EDGES)
def test_length_mismatches_name_the_row(row: int) -> None:
    lengths = [n + 1 for n in tiny_lengths()]
    batch = text_batch(lengths)
    batch["generation_logprobs"][row] = batch["generation_logprobs"][row][:-1]
    message = same_error(batch)
    assert f'field "generation_logprobs", row {row}: sequence length {lengths[row] - 1}' in message
    batch = text_batch(lengths)
    batch["input_lengths"][row] += 1
    assert f'field "input_lengths", row {row}: {lengths[row] + 1} but' in same_error(batch)


@pytest.mark.parametrize("row", EDGES)
def test_none_row_names_the_row(row: int) -> None:
    batch = text_batch(tiny_lengths())
    batch["advantages"][row] = None
    assert f'field "advantages", row {row}: a per-token field needs exactly one' in same_error(
        batch
    )


@pytest.mark.parametrize("row", EDGES)
def test_lazy_and_odd_rows_name_the_row(row: int) -> None:
    lengths = [n + 2 for n in tiny_lengths()]
    cases = {
        "negative bit": (torch._neg_view, r"resolve_neg"),
        "meta": (lambda t: torch.empty_like(t, device="meta"), r"meta tensor"),
        "sparse": (lambda t: t.to_sparse(), r"layout torch.sparse_coo"),
        "nested": (lambda t: torch.nested.nested_tensor(list(t)), r"nested"),
    }
    for make, match in cases.values():
        batch = text_batch(lengths)
        batch["advantages"][row] = make(batch["advantages"][row])
        message = same_error(batch)
        assert f'field "advantages", row {row}' in message
        assert re.search(match, message), message


def test_negative_bit_after_bool_and_int_rows() -> None:
    # A negative bit is refused wherever it is, bool rows included (torch._neg_view sets it on
    # a bool tensor too), also after rows of the same dtype.
    batch = text_batch([3] * 10)
    batch["token_mask"][6] = torch._neg_view(batch["token_mask"][6])
    assert batch["token_mask"][6].dtype == torch.bool and batch["token_mask"][6].is_neg()
    assert 'field "token_mask", row 6: tensor has a pending negation' in same_error(batch)
    batch = text_batch([3] * 10)
    batch["input_ids"][6] = torch._neg_view(batch["input_ids"][6])
    assert "row 6" in same_error(batch)
    batch = text_batch([3] * 10)
    batch["token_mask"][6] = torch._neg_view(torch.arange(3))
    assert 'field "token_mask", row 6: tensor has a pending negation' in same_error(batch)


def test_non_contiguous_and_subclass_rows_encode() -> None:
    lengths = tiny_lengths()
    batch = text_batch(lengths)
    for r in (0, 1024, 2999):
        wide = torch.randn(2 * lengths[r])
        batch["advantages"][r] = wide[::2]  # a strided view
        batch["generation_logprobs"][r] = torch.nn.Parameter(-torch.rand(lengths[r]))
        batch["input_ids"][r] = torch.arange(lengths[r]).requires_grad_(False)
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)
    got = py_wire.decode(frame, TEXT, layout="list")
    assert torch.equal(got["advantages"][1024], batch["advantages"][1024])


def test_numpy_rows_and_tuples() -> None:
    lengths = tiny_lengths(500)
    batch = text_batch(lengths)
    batch["advantages"] = tuple(t.numpy() for t in batch["advantages"])
    frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == reference(batch)


def test_trailing_dims_and_wire_dtypes() -> None:
    schema = py_wire.Schema.from_toml(
        """
name = "tiny_dims"
version = 1
sequence_field = "ids"

[fields.ids]
tier = "per_token"
dtype = "int64"
shape = []

[fields.pos]
tier = "per_token"
dtype = "int32"
shape = [3]

[fields.logits]
tier = "per_token"
dtype = "float32"
wire_dtype = "bfloat16"
lossy = true
shape = []
"""
    )
    lengths = tiny_lengths(2000)
    batch = {
        "ids": [torch.arange(n) for n in lengths],
        "pos": [torch.arange(3 * n, dtype=torch.int32).reshape(n, 3) for n in lengths],
        "logits": [torch.randn(n) for n in lengths],
    }
    assert bytes(py_wire.encode(batch, schema)) == reference(batch, schema)
    # Rows already in the wire dtype, and a mix of both.
    batch["logits"] = [t.bfloat16() for t in batch["logits"]]
    assert bytes(py_wire.encode(batch, schema)) == reference(batch, schema)
    batch["logits"][1024] = batch["logits"][1024].float()
    assert bytes(py_wire.encode(batch, schema)) == reference(batch, schema)
    batch["pos"][1025] = torch.zeros(lengths[1025], 4, dtype=torch.int32)
    assert 'field "pos", row 1025' in same_error(batch, schema)


def test_complex_rows_keep_the_conjugate_check() -> None:
    schema = py_wire.Schema.from_toml(
        """
name = "tiny_complex"
version = 1
sequence_field = "z"

[fields.z]
tier = "per_token"
dtype = "complex64"
shape = []
"""
    )
    rows = [torch.randn(n, dtype=torch.complex64) for n in tiny_lengths(1100)]
    assert bytes(py_wire.encode({"z": rows}, schema)) == reference({"z": rows}, schema)
    rows[1024] = rows[1024].conj()
    assert "row 1024" in same_error({"z": rows}, schema)


def test_rows_overlapping_out_are_refused_and_out_is_untouched() -> None:
    batch = text_batch([4] * 8)
    first = py_wire.encode(batch, TEXT)
    out = np.zeros(len(first) + 4096, dtype=np.uint8)
    start = (-out.ctypes.data) % 64
    window = out[start : start + len(first)]
    window[:] = np.frombuffer(bytes(first), dtype=np.uint8)
    decoded = py_wire.decode(window, TEXT, layout="list")
    again = dict(batch)
    again["advantages"] = list(reversed(decoded["advantages"]))
    before = out.copy()
    with pytest.raises(BatchError, match=r"field .advantages., row 0.*overlaps `out`"):
        py_wire.encode(again, TEXT, out=window)
    assert np.array_equal(out, before), "a refused encode wrote into out"


def test_torch_function_mode_cannot_answer_for_rows() -> None:
    class Lying(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            name = getattr(func, "__name__", "")
            if name in ("data_ptr", "nbytes", "__get__") or "data_ptr" in str(func):
                return 1 << 40
            return func(*args, **(kwargs or {}))

    batch = text_batch(tiny_lengths(300))
    want = reference(batch)
    with Lying():
        frame = py_wire.encode(batch, TEXT)
    assert bytes(frame) == want


def test_tiny_rows_reset_after_encode_read_them_keep_the_bytes_read() -> None:
    """Staged rows are copied while encode reads them. A later field's row (whose
    ``untyped_storage()`` runs code at that moment, after ``input_ids`` was read and before
    the frame is written) ``set_()``s every ``input_ids`` row to new storage, freeing the
    old: the frame holds the rows as they were read. (Another thread could not do this
    safely: torch does not make ``set_()`` safe against a concurrent read of the tensor.)"""
    from tests.encode.test_input_safety import _RunsMidEncode

    batch = text_batch(tiny_lengths(300))
    want = [t.clone() for t in batch["input_ids"]]

    def reset(_: object) -> None:
        for t in batch["input_ids"]:
            t.set_(torch.full((t.numel(),), -1, dtype=torch.int64).untyped_storage())
        gc.collect()

    _RunsMidEncode.hook = reset
    batch["reward"] = batch["reward"].as_subclass(_RunsMidEncode)
    frame = py_wire.encode(batch, TEXT)
    assert _RunsMidEncode.hook is None, "the reset never ran"
    assert all(bool((t == -1).all()) for t in batch["input_ids"])
    got = py_wire.decode(frame, TEXT, layout="list")["input_ids"]
    assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_a_row_whose_storage_was_shrunk_is_refused_on_both_paths() -> None:
    # The tiny-row path once copied such a row in full: heap bytes past the 16-byte storage
    # went into the frame.
    lengths = [n + 4 for n in tiny_lengths(64)]
    for row in (0, 17, 63):
        for size in (0, 16):
            batch = text_batch(lengths)
            batch["input_ids"][row].untyped_storage().resize_(size)
            message = same_error(batch)
            assert f'field "input_ids", row {row}' in message and "storage" in message, message
    # Rows split from one allocation whose storage then shrank: every row past the new end.
    batch = text_batch(lengths)
    base = torch.arange(sum(lengths))
    batch["input_ids"] = list(base.split(lengths))
    base.untyped_storage().resize_(8 * lengths[0])
    assert 'field "input_ids", row 1' in same_error(batch)


def _hostile(kind: str, t: torch.Tensor) -> Any:
    """One hostile or odd kind of row, made from a well-formed row ``t``."""
    n = t.numel()
    if kind == "shrunk":
        t.untyped_storage().resize_(min(t.untyped_storage().nbytes(), 8) // 2)
        return t
    if kind == "emptied":
        t.untyped_storage().resize_(0)
        return t
    if kind == "offset view":
        return torch.cat([t[:1], t, t[:1]])[1 : n + 1]
    if kind == "strided":
        return torch.stack([t, t], dim=1)[:, 0]
    if kind == "negative bit":
        return torch._neg_view(t) if t.dtype != torch.bool else t
    if kind == "other dtype":
        return t.to(torch.int32) if t.dtype != torch.int32 else t.to(torch.int64)
    if kind == "rank 2":
        return t.reshape(1, n)
    if kind == "subclass":
        return torch.nn.Parameter(t, requires_grad=False) if t.is_floating_point() else t
    if kind == "numpy":
        return t.numpy()
    if kind == "none":
        return None
    if kind == "meta":
        return torch.empty_like(t, device="meta")
    if kind == "empty":
        return t[:0]
    raise AssertionError(kind)


KINDS = (
    "shrunk",
    "emptied",
    "offset view",
    "strided",
    "negative bit",
    "other dtype",
    "rank 2",
    "subclass",
    "numpy",
    "none",
    "meta",
    "empty",
)


@given(
    lengths=st.lists(st.integers(0, 40), min_size=1, max_size=12),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["input_ids", "advantages", "token_mask"]),
            st.integers(0, 11),
            st.sampled_from(KINDS),
        ),
        max_size=3,
    ),
    seed=st.integers(0, 2**16),
)
def test_fast_and_full_readers_agree_on_every_kind_of_row(
    lengths: list[int], edits: list[tuple[str, int, str]], seed: int
) -> None:
    """Differential: the tiny-row path and the full reader give the same frame, or the same
    error (message, field and row), for any mix of hostile rows."""
    batch = text_batch(lengths, seed)
    edited: set[tuple[str, int]] = set()
    for field, row, kind in edits:
        # One edit per row: a second one would act on an already hostile tensor (torch itself
        # refuses a view of a shrunk storage), which tests torch, not the readers.
        if (field, row) in edited or row >= len(lengths) or batch[field][row] is None:
            continue
        edited.add((field, row))
        batch[field][row] = _hostile(kind, batch[field][row])
    try:
        fast = bytes(py_wire.encode(batch, TEXT))
    except BatchError as e:
        fast_error: BatchError | None = e
    else:
        fast_error = None
    try:
        full = reference(batch)
    except BatchError as e:
        assert fast_error is not None, f"only the full reader refused: {e}"
        assert (str(fast_error), fast_error.field, fast_error.row) == (str(e), e.field, e.row)
        return
    assert fast_error is None, f"only the fast path refused: {fast_error}"
    assert fast == full
