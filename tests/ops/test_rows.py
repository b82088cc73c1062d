"""One row rule for every call that selects rows (``decode(rows=)``, ``take_rows``, the
trainer's micro-batches): out-of-range rows are a ``RowIndexError`` naming the row and the
count, slices clamp like Python's, and a selection's ``len()`` never sizes an allocation."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest

import py_wire
from py_wire import RowIndexError, WireError, trainer
from tests.helpers import HugeLen, HugeLenPlain, small_text_batch

TEN = py_wire.encode(small_text_batch(tuple(range(1, 11))), "text_grpo")


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
