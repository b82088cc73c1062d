"""py_wire._tiers: one implementation per tier, chosen in one place."""

from __future__ import annotations

import subprocess
import sys
import typing

import pytest
import torch

import py_wire
from py_wire import _tiers as tiers
from py_wire._native import BatchError
from py_wire._tiers.names import Tier


def test_every_tier_a_schema_names_has_one_implementation() -> None:
    names = typing.get_args(Tier)
    assert set(names) == {"packed", "per_token", "scalar"}
    codecs = [tiers.of(name) for name in names]
    assert len({id(c) for c in codecs}) == len(names)
    assert {c.items for c in codecs} == {"rows", "tokens", "segments"}


#: Imports each first module anew (py_wire's own ``__init__`` left out, so that its order
#: decides nothing), then the rest: an import circle between the schema views and the tiers
#: fails the first order that enters it from the wrong side.
_ANY_ORDER = """
import importlib, sys, types
import py_wire._native as native
for first in sys.argv[1:]:
    for name in [m for m in sys.modules if m.startswith("py_wire")]:
        del sys.modules[name]
    package = types.ModuleType("py_wire")
    package.__path__ = [native.__file__.rsplit("/", 1)[0]]
    sys.modules["py_wire"] = package
    sys.modules["py_wire._native"] = package._native = native
    for name in (first, "py_wire._schema", "py_wire._tiers"):
        importlib.import_module(name)
"""


def test_the_schema_views_and_the_tiers_import_in_any_order() -> None:
    """The tier names live in the tiers' folder (``_tiers/names.py``) and the schema views read
    them, while the tiers read the views for types only: no import circle, whichever of the
    two a process imports first."""
    first = ["py_wire._schema", "py_wire._tiers", "py_wire._tiers.names", "py_wire._dtypes"]
    run = subprocess.run(
        [sys.executable, "-c", _ANY_ORDER, *first], capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr[-2000:]


def test_what_a_tiers_rows_are_is_its_implementations_answer() -> None:
    """Code that acts by tier asks ``items`` (adapters: ``py_wire.adapters.tier_items``), never
    the tier's name; each tier's answer is its implementation's."""
    import py_wire.adapters

    assert py_wire.adapters.tier_items is tiers.items
    expected = {"packed": "segments", "per_token": "tokens", "scalar": "rows"}
    assert {t: tiers.items(t) for t in typing.get_args(Tier)} == expected
    assert all(tiers.items(t) == tiers.of(t).items for t in expected)


@pytest.mark.parametrize(
    ("tier", "value", "kind"),
    [
        ("packed", [torch.zeros(2, 3), None], "rows"),
        ("per_token", [torch.zeros(2), torch.zeros(1)], "rows"),
        (
            "per_token",
            torch.nested.as_nested_tensor([torch.zeros(2)], layout=torch.jagged),
            "jagged",
        ),
        ("scalar", torch.zeros(2), "dense"),
    ],
)
def test_each_tier_names_the_input_kind_the_codec_is_handed(
    tier: str, value: object, kind: str
) -> None:
    field = py_wire.load_schema("text_grpo").fields["input_ids"]
    assert tiers.of(tier).input_kind("x", field, value, None)[0] == kind


@pytest.mark.parametrize("tier", ["packed", "per_token", "scalar"])
def test_a_value_a_tier_does_not_take_is_a_batch_error_naming_the_field(tier: str) -> None:
    field = py_wire.load_schema("text_grpo").fields["input_ids"]
    with pytest.raises(BatchError, match="field 'x'"):
        tiers.of(tier).input_kind("x", field, object(), None)
