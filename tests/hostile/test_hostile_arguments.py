"""Every public function, called with generated hostile arguments (issue 15, finding 9).

The rule: a call either works, or raises a :class:`WireError` (any subclass) or a
``TypeError`` whose message names the argument that was made hostile. Nothing else escapes:
no ``OverflowError`` from an integer conversion, no ``RuntimeError`` from torch, no
``ValueError`` outside the hierarchy, no crash. One argument is hostile per call; the others
are valid, so the error can only be about that one.

The ``ci`` hypothesis profile makes a few hundred calls; ``PY_WIRE_HYPOTHESIS_PROFILE=long``
(2,000 examples per function) is the campaign the closing note of issue 15 reports.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

import py_wire
from py_wire import PackedTensor, WireError, distributed, trainer
from py_wire.interop import nemo_rl
from py_wire.interop import verl as pw_verl
from tests.helpers import HugeLen, small_text_batch, small_vlm_batch

TEXT = small_text_batch((3, 4, 5, 6))
VLM = small_vlm_batch()
FRAME = py_wire.encode(TEXT, "text_grpo")
VLM_FRAME = py_wire.encode(VLM, "qwen2_5_vl")
DECODED = py_wire.decode(FRAME)
TEN = py_wire.encode(small_text_batch(tuple(range(1, 11))), "text_grpo")
TMP = Path(tempfile.mkdtemp(prefix="py_wire_hostile_args_"))
SAVED = TMP / "frame"
# Removed when the interpreter exits, not at this module's teardown: test_hostile_sweep imports
# these targets and runs them after this module is done.
atexit.register(shutil.rmtree, TMP, ignore_errors=True)


def _save_scratch(fsync: object) -> None:
    py_wire.save(FRAME, TMP / "scratch", fsync=fsync)  # type: ignore[arg-type]


py_wire.save(FRAME, SAVED)

#: Hostile values of every kind: integers far outside any range, non-finite floats, wrong
#: types, containers of hostile members, slices of anything.
INTS = st.one_of(
    st.integers(-(2**80), 2**80),
    st.sampled_from([-1, 0, 1, 2**31, 2**32, 2**63 - 1, 2**63, 2**64, -(2**63) - 1]),
)
SCALARS = st.one_of(
    INTS,
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.just(object()),
    st.just(np.int64(3)),
    st.just(np.float32(1.5)),
    st.just(torch.tensor(2)),
    st.just(torch.tensor([1.0, 2.0])),
)
HOSTILE = st.one_of(
    SCALARS,
    st.lists(SCALARS, max_size=4),
    st.tuples(SCALARS, SCALARS),
    st.builds(slice, SCALARS, SCALARS, SCALARS),
    st.builds(range, INTS, INTS, st.integers(1, 3) | st.integers(-3, -1)),
    st.dictionaries(st.text(max_size=3) | st.just("input_ids"), SCALARS, max_size=2),
)


def _decode(**kw: Any) -> Any:
    return py_wire.decode(FRAME, **kw)


def _padded(**kw: Any) -> Any:
    return py_wire.decode(FRAME, layout="padded", **kw)


def _verl_from_frame(**kw: Any) -> Any:
    return pw_verl.from_frame(VERL_FRAME, **kw)


VERL_FRAME = pw_verl.to_frame(
    {
        "input_ids": torch.tensor([[5, 6, 7, 8]]),
        "attention_mask": torch.tensor([[1, 1, 1, 1]]),
        "position_ids": torch.tensor([[0, 1, 2, 3]]),
        "responses": torch.tensor([[7, 8]]),
        "prompts": torch.tensor([[5, 6]]),
        "response_mask": torch.tensor([[1, 1]]),
        "old_log_probs": torch.tensor([[-0.5, -0.25]]),
        "advantages": torch.tensor([[0.5, 0.5]]),
        "uid": np.array(["a"], dtype=object),
    },
    "verl/text",
)

#: (name, call taking the hostile argument as a keyword, the arguments it may corrupt).
CALLS: list[tuple[str, Callable[..., Any], list[str]]] = [
    (
        "decode",
        _decode,
        ["stage", "layout", "source_dtype", "rows", "attention_mask", "writable", "verify"],
    ),
    ("decode(padded)", _padded, ["pad_to_multiple_of", "pad_values"]),
    (
        "encode",
        lambda **kw: py_wire.encode(TEXT, "text_grpo", **kw),
        ["stage", "threads", "checksum", "metadata"],
    ),
    (
        "encode_parts",
        lambda **kw: py_wire.encode_parts(TEXT, "text_grpo", **kw),
        ["stage", "min_borrow", "checksum"],
    ),
    (
        "encoded_nbytes",
        lambda **kw: py_wire.encoded_nbytes(TEXT, "text_grpo", **kw),
        ["stage", "checksum"],
    ),
    ("chunk", lambda chunks: py_wire.chunk(FRAME, chunks), ["chunks"]),
    ("split", lambda sections: py_wire.split(FRAME, sections), ["sections"]),
    (
        "shard",
        lambda rank=0, world_size=2, **kw: py_wire.shard(FRAME, rank, world_size, **kw),
        ["rank", "world_size", "batch_size", "allow_uneven"],
    ),
    ("take_rows", lambda rows: py_wire.take_rows(FRAME, rows), ["rows"]),
    ("truncate", lambda max_len: py_wire.truncate(FRAME, max_len), ["max_len"]),
    ("check_contracts", lambda stage: py_wire.check_contracts(VLM_FRAME, stage), ["stage"]),
    (
        "placeholder_runs",
        lambda token_id: py_wire.placeholder_runs(TEXT["input_ids"], token_id),
        ["token_id"],
    ),
    ("load", lambda verify: py_wire.load(SAVED, verify=verify), ["verify"]),
    ("save", lambda fsync: _save_scratch(fsync), ["fsync"]),
    ("ReceiveBuffer", lambda nbytes: py_wire.ReceiveBuffer(nbytes), ["nbytes"]),
    (
        "trainer.micro_batches",
        lambda max_tokens=8, **kw: trainer.micro_batches(FRAME, max_tokens, **kw),
        ["max_tokens", "sort", "padded", "pad_to_multiple_of"],
    ),
    (
        "trainer.pack_sequences",
        lambda max_tokens=8, **kw: trainer.pack_sequences(FRAME, max_tokens, **kw),
        ["max_tokens", "pad_to_multiple_of"],
    ),
    (
        "trainer.shard_rows",
        lambda num_rows=4, rank=0, world_size=2, **kw: trainer.shard_rows(
            num_rows, rank, world_size, **kw
        ),
        ["num_rows", "rank", "world_size", "batch_size", "allow_uneven"],
    ),
    (
        "trainer.iter_micro_batches",
        lambda groups: list(trainer.iter_micro_batches(FRAME, groups)),
        ["groups"],
    ),
    (
        "trainer.to",
        lambda device="cpu", **kw: trainer.to(DECODED, device, **kw),
        ["device", "non_blocking", "pin_memory"],
    ),
    (
        "verl.from_frame",
        _verl_from_frame,
        ["meta_info", "pad_token_id", "prompt_length", "response_length", "writable"],
    ),
    (
        "distributed.recv",
        lambda verify: distributed._to_frame(
            torch.frombuffer(bytearray(bytes(FRAME)), dtype=torch.uint8),
            None,
            len(FRAME),
            "rank 0",
            verify=verify,
        ),
        [],  # verify is checked in _receive; covered by the gloo tests
    ),
]

TARGETS = [(name, call, arg) for name, call, args in CALLS for arg in args]


#: Outcomes per function, for the campaign report (``PY_WIRE_HOSTILE_REPORT=path``).
OUTCOMES: Counter[tuple[str, str]] = Counter()


def _mentions(message: str, argument: str) -> bool:
    return argument in message


def check_rule(name: str, call: Callable[..., Any], argument: str, value: Any) -> str:
    """Calls ``call(argument=value)`` and returns the outcome; fails on anything the rule
    forbids."""
    OUTCOMES[(name, "calls")] += 1
    try:
        call(**{argument: value})
    except py_wire.WireError as e:
        OUTCOMES[(name, "WireError")] += 1
        assert _mentions(str(e), argument), (
            f"{name}({argument}={value!r}): {type(e).__name__} does not name it: {e}"
        )
        return "WireError"
    except TypeError as e:
        OUTCOMES[(name, "TypeError")] += 1
        assert _mentions(str(e), argument), (
            f"{name}({argument}={value!r}): TypeError does not name it: {e}"
        )
        return "TypeError"
    except Exception as e:  # the rule: nothing else escapes
        pytest.fail(f"{name}({argument}={value!r}) raised {type(e).__name__}: {e}")
    return "ok"


@pytest.mark.parametrize(
    ("name", "call", "argument"), TARGETS, ids=[f"{n}-{a}" for n, _, a in TARGETS]
)
@given(value=HOSTILE)
def test_every_bad_argument_is_named(
    name: str, call: Callable[..., Any], argument: str, value: Any
) -> None:
    check_rule(name, call, argument, value)


@pytest.mark.parametrize(
    ("name", "argument", "value", "want"),
    [
        # The findings, one by one: each was an OverflowError, ValueError or RuntimeError.
        ("trainer.micro_batches", "max_tokens", -1, "WireError"),
        ("trainer.micro_batches", "max_tokens", None, "TypeError"),
        ("trainer.pack_sequences", "max_tokens", 2**70, "WireError"),
        ("trainer.shard_rows", "rank", -1, "WireError"),
        ("trainer.shard_rows", "world_size", 2**64, "WireError"),
        ("ReceiveBuffer", "nbytes", 2**70, "WireError"),
        ("placeholder_runs", "token_id", 2**64, "WireError"),
        ("decode(padded)", "pad_values", {"input_ids": math.nan}, "WireError"),
        ("decode(padded)", "pad_values", {"input_ids": 1.5}, "WireError"),
        ("decode(padded)", "pad_to_multiple_of", 2**62, "WireError"),
        ("decode", "rows", slice("a", "b"), "TypeError"),
        ("take_rows", "rows", slice(None, None, 0), "WireError"),
        ("trainer.to", "device", "bogus", "WireError"),
        ("verl.from_frame", "response_length", -3, "WireError"),
        ("verl.from_frame", "pad_token_id", 2**64, "WireError"),
        ("verl.from_frame", "meta_info", 3, "TypeError"),
        ("truncate", "max_len", 2**63, "ok"),
        ("truncate", "max_len", 2**100, "ok"),
    ],
)
def test_the_reported_arguments(name: str, argument: str, value: Any, want: str) -> None:
    call = next(c for n, c, _ in CALLS if n == name)
    assert check_rule(name, call, argument, value) == want


def test_truncate_past_every_row_keeps_every_token() -> None:
    out = py_wire.decode(py_wire.truncate(FRAME, 2**63))
    assert torch.equal(out["input_ids"].values(), DECODED["input_ids"].values())


def test_an_integral_float_pad_value_pads_exactly() -> None:
    out = _padded(pad_values={"input_ids": 7.0, "token_mask": True})
    assert out["input_ids"].dtype == torch.int64 and int(out["input_ids"][0, -1]) == 7


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:
        calls = sum(n for (_, kind), n in OUTCOMES.items() if kind == "calls")
        lines = [f"{calls} calls, 0 outside the rule (a failure stops the run)"]
        for (name, kind), n in sorted(OUTCOMES.items()):
            lines.append(f"{name:28} {kind:10} {n}")
        Path(report).write_text("\n".join(lines) + "\n")


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


def test_an_int_argument_given_a_tensor_without_values_is_a_type_error_naming_it() -> None:
    """A 0-d tensor on torch's meta device has ``__index__`` but no value: reading it raises
    torch's RuntimeError, which must come out as a TypeError naming the argument (found by
    the TQ sweep for ``nemo_rl.put(group_size=...)``)."""
    meta = torch.tensor(2, device="meta")
    with pytest.raises(TypeError, match="chunks must be an int"):
        py_wire.chunk(FRAME, meta)
    with pytest.raises(TypeError, match="rows: slice bounds"):
        py_wire.decode(FRAME, rows=slice(meta, None))
