"""Pad values at decode: a value the field's dtype cannot hold is refused naming the field; one
it holds (infinities, nan, large floats) pads exactly as torch stores it."""

from __future__ import annotations

import math

import pytest
import torch

import py_wire
from py_wire import WireError
from tests.helpers import small_text_batch

TEN = py_wire.encode(small_text_batch(tuple(range(1, 11))), "text_grpo")


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
