"""The hostile-argument sweep of issue 27: every public callable (``py_wire.__all__``,
``py_wire.trainer``, :class:`PackedTensor`'s methods, ``Frame.from_buffer`` and the interop
modules), called with one generated hostile argument while the others stay valid.

The rule: a call works, or raises a :class:`WireError` (any subclass) or a ``TypeError`` whose
message names the hostile argument (or one of its listed aliases: ``frame`` for a ``data``
argument, say). Nothing else escapes: no ``PanicException``, ``MemoryError``, ``OverflowError``,
torch ``RuntimeError``, plain ``ValueError``, no crash. Two documented exceptions: a ``path``
may also raise the ``OSError`` the file system answers (it names the file), and the pydantic
schema models (``FieldDef``, ``Schema``, ``PlaceholderContract``) raise pydantic's
``ValidationError`` (a ``ValueError`` naming the field).

``test_every_public_callable_is_swept`` fails when a public callable is neither swept nor
listed in :data:`EXCLUDED` with a reason.

Profiles: CI makes ``PY_WIRE_HOSTILE_EXAMPLES`` (default 3) examples per target, a few hundred
calls. A campaign runs chunks in separate processes, e.g.
``PY_WIRE_HOSTILE_EXAMPLES=100 PY_WIRE_HOSTILE_REPORT=/tmp/r.json pytest
tests/hostile/test_hostile_sweep.py -p no:cacheprovider --hypothesis-seed=N`` (see
``scripts/hostile_campaign.py``): each chunk writes its outcome counts as JSON.
"""

from __future__ import annotations

import atexit
import contextlib
import inspect
import json
import os
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pydantic
import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

import py_wire
from py_wire import PackedTensor, trainer
from py_wire.interop import nemo_rl
from py_wire.interop import transfer_queue as ptq
from py_wire.interop import verl as pw_verl
from tests.helpers import HugeLen, HugeLenPlain
from tests.hostile.test_hostile_arguments import (
    CALLS,
    FRAME,
    HOSTILE,
    TEXT,
    VERL_FRAME,
    VLM,
    VLM_FRAME,
)

ONE = torch.ones(1)
EXAMPLES = int(os.environ.get("PY_WIRE_HOSTILE_EXAMPLES", "3"))
TMP = Path(tempfile.mkdtemp(prefix="py_wire_sweep_"))
SAVED = TMP / "frame"
atexit.register(shutil.rmtree, TMP, ignore_errors=True)
py_wire.save(FRAME, SAVED)
#: A column as TQ's SimpleStorage returns it: one frame.
TQ_COLUMN = ptq.frames_column([FRAME])


#: Values of the kinds the first sweep lacked: lying lengths, arrays and tensors of every
#: shape, frames of other schemas, long strings, paths.
OBJECTS = st.sampled_from(
    [
        HugeLen(),
        HugeLenPlain(),
        np.zeros(2),
        np.zeros((2, 2), dtype=np.int64),
        np.array([2**63], dtype=np.uint64),
        np.array([], dtype=np.int64),
        torch.zeros(2, 2),
        torch.tensor([[0]]),
        torch.tensor([1, 0], dtype=torch.bool),
        torch.empty(0, 2**40),
        "a" * 300,
        "text",
        b"\x00" * 16,
        bytes(FRAME)[:40],
        Path("/nonexistent/x"),
        VLM_FRAME,
        {"input_ids": [torch.arange(3)]},
        [FRAME, 1],
        [range(0, 2), 3],
        (x for x in range(3)),
        slice(None, None, 0),
        range(0, 2**62),
        range(2**70),
        torch.tensor([0, 1], device="meta"),
        float("nan"),
        PackedTensor([torch.ones(1)]),
    ]
)
VALUES = st.one_of(HOSTILE, OBJECTS)


@dataclass(frozen=True)
class Target:
    """``call(**{argument: value})`` with every other argument valid."""

    name: str
    call: Callable[..., Any]
    argument: str
    aliases: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.name}-{self.argument}"


def _targets(name: str, call: Callable[..., Any], *arguments: str, **aliases: str) -> list[Target]:
    return [Target(name, call, a, tuple(aliases.get(a, "").split())) for a in arguments]


def _pt() -> PackedTensor:
    return PackedTensor([torch.zeros(2, 3), None, [torch.ones(1, 3), torch.ones(2, 3)]])


def _decoded_pt() -> PackedTensor:
    value = py_wire.decode(VLM_FRAME)["pixel_values"]
    assert isinstance(value, PackedTensor)
    return value


@contextlib.contextmanager
def _in_tmp() -> Iterator[None]:
    """A relative hostile path lands in the scratch folder, never in the repository."""
    with contextlib.chdir(TMP):
        yield


def _save(frame: Any = FRAME, path: Any = "scratch", **kw: Any) -> None:
    with _in_tmp():
        py_wire.save(frame, path, **kw)


def _load(path: Any = SAVED, **kw: Any) -> Any:
    with _in_tmp():
        return py_wire.load(path, **kw)


FRAME_ALIASES = {"frame": "Frame data bytes buffer", "data": "frame Frame bytes buffer"}
SCHEMA_ALIASES = {"schema": "Schema", "name_or_path": "schema"}
#: A batch's errors name what in it is wrong: its fields.
BATCH_ALIASES = {"batch": "field", "batched_data_dict": "batch field", "data": "batch field"}

TARGETS: list[Target] = [
    # The first sweep's targets (issue 15), kept.
    *(Target(n, c, a) for n, c, args in CALLS for a in args),
    # py_wire.__all__: every argument of every function.
    *_targets("decode", lambda data=FRAME, **kw: py_wire.decode(data, **kw), "data", "schema",
              "pad_values", **FRAME_ALIASES, **SCHEMA_ALIASES),
    *_targets("encode", lambda batch=TEXT, schema="text_grpo", **kw: py_wire.encode(
        batch, schema, **kw), "batch", "schema", "out", "compact",
        **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("encode_parts", lambda batch=TEXT, schema="text_grpo", **kw: py_wire.encode_parts(
        batch, schema, **kw), "batch", "schema", "compact", **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("encoded_nbytes", lambda batch=TEXT, schema="text_grpo", **kw: (
        py_wire.encoded_nbytes(batch, schema, **kw)), "batch", "schema", "compact",
        **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("frame_nbytes", lambda prefix: py_wire.frame_nbytes(prefix), "prefix",
              prefix="frame Frame bytes"),
    *_targets("check_contracts", lambda frame=VLM_FRAME: py_wire.check_contracts(frame),
              "frame", **FRAME_ALIASES),
    *_targets("chunk", lambda frame=FRAME: py_wire.chunk(frame, 2), "frame", **FRAME_ALIASES),
    *_targets("concat", lambda frames=(FRAME,), **kw: py_wire.concat(frames, **kw), "frames",
              "compact", frames="frame Frame"),
    *_targets("split", lambda frame=FRAME: py_wire.split(frame, [2, 2]), "frame",
              **FRAME_ALIASES),
    *_targets("shard", lambda frame=FRAME: py_wire.shard(frame, 0, 2), "frame", **FRAME_ALIASES),
    *_targets("take_rows", lambda frame=FRAME: py_wire.take_rows(frame, [0]), "frame",
              **FRAME_ALIASES),
    *_targets("truncate", lambda frame=FRAME: py_wire.truncate(frame, 2), "frame",
              **FRAME_ALIASES),
    *_targets("load", _load, "path", "verify"),
    *_targets("save", _save, "frame", "path", "fsync", **FRAME_ALIASES),
    *_targets("load_schema", lambda name_or_path: py_wire.load_schema(name_or_path),
              "name_or_path", **SCHEMA_ALIASES),
    *_targets("placeholder_runs", lambda input_ids: py_wire.placeholder_runs(input_ids, 3),
              "input_ids"),
    *_targets("Frame.from_buffer", lambda data: py_wire.Frame.from_buffer(data), "data",
              **FRAME_ALIASES),
    *_targets("FieldDef", lambda **kw: py_wire.FieldDef(**{"tier": "scalar", "dtype": "int64",
              **kw}), "tier", "dtype", "shape", "pad_value", "pack_dim", "stages"),
    *_targets("Schema", lambda **kw: py_wire.Schema(**{"name": "s", "fields": {}, **kw}), "name",
              "version", "fields", "stages", "sequence_field", "contracts"),
    # A schema text's errors name its source (``<frame>``, ``<string>``) and the key.
    *_targets("Schema.from_json", lambda text: py_wire.Schema.from_json(text), "text",
              text="frame schema"),
    *_targets("Schema.from_toml", lambda text: py_wire.Schema.from_toml(text), "text",
              text="string schema"),
    *_targets("PlaceholderContract", lambda **kw: py_wire.PlaceholderContract(**{
        "name": "c", "media_field": "m", "token_id": 1, "count": "fixed",
        "tokens_per_image": 1, **kw}), "token_id", "count", "merge_size", "downsample_ratio"),
    # PackedTensor: the constructor and every method that takes an argument.
    *_targets("PackedTensor", lambda rows=ONE, **kw: PackedTensor(
        [ONE] if rows is ONE else rows, **kw), "rows", "dim_to_pack"),
    *_targets("PackedTensor.from_csr", lambda segments=None, row_offsets=(0, 1),
              row_segments=(0,), **kw: PackedTensor.from_csr(
        [ONE] if segments is None else segments, row_offsets, row_segments, **kw),
        "segments", "row_offsets", "row_segments", "dim_to_pack"),
    *_targets("PackedTensor[]", lambda index: _pt()[index], "index", index="indices"),
    *_targets("decoded PackedTensor[]", lambda index: _decoded_pt()[index], "index",
              index="indices"),
    *_targets("PackedTensor.slice", lambda indices: _pt().slice(indices), "indices"),
    *_targets("decoded PackedTensor.slice", lambda indices: _decoded_pt().slice(indices),
              "indices"),
    *_targets("PackedTensor.as_tensor", lambda **kw: _pt().as_tensor(**kw), "device",
              "pad_to_max_shape"),
    *_targets("decoded PackedTensor.as_tensor", lambda **kw: _decoded_pt().as_tensor(**kw),
              "device", "pad_to_max_shape"),
    *_targets("PackedTensor.to", lambda device="cpu", **kw: _pt().to(device, **kw), "device",
              "non_blocking"),
    *_targets("PackedTensor.concat", lambda values: PackedTensor.concat(values), "values"),
    *_targets("nemo_rl.from_nemo_packed", lambda value: nemo_rl.from_nemo_packed(value),
              "value"),
    *_targets("nemo_rl.from_nemo", lambda batched_data_dict: nemo_rl.from_nemo(
        batched_data_dict), "batched_data_dict", **BATCH_ALIASES),
    # py_wire.trainer: the frame arguments (the others are in CALLS).
    *_targets("trainer.micro_batches", lambda frame: trainer.micro_batches(frame, 8), "frame",
              **FRAME_ALIASES),
    *_targets("trainer.pack_sequences", lambda frame: trainer.pack_sequences(frame, 8), "frame",
              **FRAME_ALIASES),
    *_targets("trainer.iter_micro_batches", lambda data=FRAME, **kw: list(
        trainer.iter_micro_batches(data, 2, **kw)), "data", "layout", "stage", "writable",
        **FRAME_ALIASES),
    *_targets("trainer.to", lambda decoded: trainer.to(decoded, "cpu"), "decoded"),
    # The interop modules.
    *_targets("nemo_rl.to_frame", lambda batched_data_dict=TEXT, schema="text_grpo", **kw: (
        nemo_rl.to_frame(batched_data_dict, schema, **kw)), "batched_data_dict", "schema",
        "stage", **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("nemo_rl.from_frame", lambda frame=FRAME, **kw: nemo_rl.from_frame(frame, **kw),
              "frame", "stage", "pad_to_multiple_of", "writable", **FRAME_ALIASES),
    *_targets("nemo_rl.iter_micro_batches", lambda frame=FRAME, groups=2: list(
        nemo_rl.iter_micro_batches(frame, groups)), "frame", "groups", **FRAME_ALIASES),
    *_targets("verl.to_frame", lambda data=None, **kw: pw_verl.to_frame(
        pw_verl.from_frame(VERL_FRAME) if data is None else data, **{
            "schema": "verl/text", **kw}), "data", "schema", "stage", "drop_meta_info",
        **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("verl.from_frame", lambda frame=VERL_FRAME, **kw: pw_verl.from_frame(frame, **kw),
              "frame", "stage", **FRAME_ALIASES),
    *_targets("verl.to_fields", lambda data=None, **kw: pw_verl.to_fields(
        pw_verl.from_frame(VERL_FRAME) if data is None else data, **{
            "schema": "verl/text", **kw}), "data", "schema", "drop_meta_info",
        **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("verl.from_fields", lambda fields=None, frame=VERL_FRAME, **kw: pw_verl.from_fields(
        py_wire.decode(VERL_FRAME) if fields is None else fields, frame, **kw), "fields",
        "frame", "record", "meta_info", **FRAME_ALIASES),
    *_targets("transfer_queue.media_fields", lambda schema: ptq.media_fields(schema), "schema",
              **SCHEMA_ALIASES),
    *_targets("transfer_queue.columns_for", lambda schema="qwen2_5_vl", **kw: ptq.columns_for(
        schema, **kw), "schema", "stage", **SCHEMA_ALIASES),
    *_targets("transfer_queue.encode_groups", lambda batch=VLM, schema="qwen2_5_vl", **kw: (
        ptq.encode_groups(batch, schema, **kw)), "batch", "schema", "group_size",
        **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("transfer_queue.encode_group_frames", lambda batch=VLM, schema="qwen2_5_vl",
              **kw: ptq.encode_group_frames(batch, schema, **kw), "batch", "schema",
              "group_size", **SCHEMA_ALIASES, **BATCH_ALIASES),
    *_targets("transfer_queue.frames_column", lambda frames: ptq.frames_column(frames),
              "frames"),
    # A value TQ returned that holds no frames is refused naming the column it was read for.
    *_targets("transfer_queue.stored_frames", lambda value=TQ_COLUMN, column="text",
              keys=("k",): ptq.stored_frames(value, column, keys), "value", "column", "keys",
              value="column"),
]  # fmt: skip

#: Public callables the sweep does not call, each with the reason.
EXCLUDED = {
    "bundled_schemas": "takes no argument",
    "trainer.Bin": "a plain dataclass: holds what it is given, read by iter_micro_batches",
    "trainer.MicroBatches": "built by iter_micro_batches (swept), not by callers",
    "transfer_queue.put": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.get": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.get_frames": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.get_samples": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.get_by_meta": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.write_back": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.decode_columns": "swept against a running TQ: test_hostile_tq.py",
    "transfer_queue.meta_keys": "swept against a running TQ: test_hostile_tq.py",
    "nemo_rl.get": "swept against a running TQ: test_hostile_tq.py",
    "nemo_rl.put": "swept against a running TQ: test_hostile_tq.py",
    "nemo_rl.get_by_meta": "swept against a running TQ: test_hostile_tq.py",
    "nemo_rl.batched_data_dict_class": "takes no argument",
    "transfer_queue.stores_frames_as_objects": "takes no argument",
    "transfer_queue.with_field": "annotates an error py_wire raised; any str is a field name",
    "verl.dataproto_class": "takes no argument",
    "nemo_rl.nemo_packed_class": "takes no argument",
    "PackedTensor.csr": "takes no argument",
    "PackedTensor.rows": "takes no argument",
    "PackedTensor.segment_counts": "takes no argument",
}

#: Outcomes per target, for the campaign report (``PY_WIRE_HOSTILE_REPORT=path``).
OUTCOMES: Counter[str] = Counter()
PYDANTIC_MODELS = ("FieldDef", "Schema", "PlaceholderContract")


def check(target: Target, value: Any) -> str:
    """Calls ``target`` with ``value`` and returns the outcome; fails on anything the rule
    forbids."""
    OUTCOMES["calls"] += 1
    names = (target.argument, *target.aliases)
    where = f"{target.name}({target.argument}={value!r:.120})"
    try:
        target.call(**{target.argument: value})
    except (py_wire.WireError, TypeError) as e:
        kind = "WireError" if isinstance(e, py_wire.WireError) else "TypeError"
        OUTCOMES[kind] += 1
        assert any(n.lower() in str(e).lower() for n in names), (
            f"{where}: {type(e).__name__} does not name {names}: {e}"
        )
        return kind
    except OSError as e:
        OUTCOMES["OSError"] += 1
        assert target.argument == "path", f"{where} raised {type(e).__name__}: {e}"
        return "OSError"
    except pydantic.ValidationError as e:
        OUTCOMES["ValidationError"] += 1
        assert target.name in PYDANTIC_MODELS, f"{where} raised ValidationError: {e}"
        assert target.argument in str(e), f"{where}: ValidationError does not name it: {e}"
        return "ValidationError"
    except Exception as e:  # the rule: nothing else escapes
        OUTCOMES["outside the rule"] += 1
        pytest.fail(f"{where} raised {type(e).__name__}: {e}")
    OUTCOMES["ok"] += 1
    return "ok"


#: The sweep's hypothesis settings (test_hostile_tq.py uses them too).
SWEEP_SETTINGS = settings(
    phases=[Phase.explicit, Phase.generate],  # no shrinking: the failing value is printed
    max_examples=EXAMPLES,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


@pytest.mark.parametrize("target", TARGETS, ids=[t.id for t in TARGETS])
@SWEEP_SETTINGS
@given(value=VALUES)
def test_sweep(target: Target, value: Any) -> None:
    check(target, value)


def _public() -> set[str]:
    """Every public callable the sweep must cover."""
    names: set[str] = set()
    for name in py_wire.__all__:
        obj = getattr(py_wire, name)
        if inspect.ismodule(obj) or (isinstance(obj, type) and issubclass(obj, BaseException)):
            continue
        if name in ("Frame", "FrameLayout", "FieldLayout", "TensorLoc"):
            continue  # not built by callers (Frame's entry point is from_buffer, below)
        names.add(name)
    names.add("Frame.from_buffer")
    names.update(f"trainer.{n}" for n in trainer.__all__)
    for method, _ in inspect.getmembers(PackedTensor, callable):
        if not method.startswith("_") or method == "__getitem__":
            names.add("PackedTensor[]" if method == "__getitem__" else f"PackedTensor.{method}")
    for module, short in ((nemo_rl, "nemo_rl"), (pw_verl, "verl"), (ptq, "transfer_queue")):
        for n in module.__all__:
            if inspect.isfunction(getattr(module, n)):
                names.add(f"{short}.{n}")
    return names


def test_every_public_callable_is_swept() -> None:
    swept = {t.name for t in TARGETS}
    missing = _public() - swept - EXCLUDED.keys()
    assert not missing, f"public callables neither swept nor excluded: {sorted(missing)}"


@pytest.mark.parametrize(
    ("name", "argument", "value", "want"),
    [
        ("take_rows", "rows", HugeLen(), "WireError"),
        ("PackedTensor", "rows", HugeLen(), "WireError"),
        ("placeholder_runs", "input_ids", HugeLen(), "WireError"),
        ("decode", "layout", np.zeros(2), "WireError"),
        ("encode", "batch", [1, 2], "TypeError"),
        ("encoded_nbytes", "batch", 3, "TypeError"),
        ("PackedTensor[]", "index", torch.tensor([[0]]), "TypeError"),
        ("PackedTensor[]", "index", slice(None, None, 0), "WireError"),
        ("nemo_rl.to_frame", "batched_data_dict", "text", "TypeError"),
        ("load_schema", "name_or_path", "a" * 300, "WireError"),
        ("load", "path", 1, "TypeError"),
        ("save", "path", 1, "TypeError"),
        ("concat", "frames", 1, "TypeError"),
        ("PackedTensor", "rows", 1, "TypeError"),
        ("PackedTensor.as_tensor", "device", "bogus", "WireError"),
        ("PackedTensor.as_tensor", "device", 2**63, "WireError"),
        ("PackedTensor[]", "index", torch.tensor([0], device="meta"), "WireError"),
        ("PackedTensor.slice", "indices", torch.tensor([0], device="meta"), "WireError"),
        ("decoded PackedTensor.slice", "indices", torch.tensor([0], device="meta"), "WireError"),
        ("PackedTensor.from_csr", "row_offsets", torch.tensor([0], device="meta"), "WireError"),
        ("take_rows", "rows", torch.tensor([0], device="meta"), "WireError"),
        ("Schema.from_json", "text", range(2**70), "TypeError"),
        ("Schema.from_json", "text", 12, "TypeError"),
        ("Schema.from_toml", "text", range(2**70), "TypeError"),
    ],
)
def test_the_reported_escapes(name: str, argument: str, value: Any, want: str) -> None:
    target = next(t for t in TARGETS if (t.name, t.argument) == (name, argument))
    assert check(target, value) == want


@pytest.mark.parametrize(
    ("model", "argument"),
    [
        ("FieldDef", "shape"),
        ("FieldDef", "stages"),
        ("FieldDef", "accept"),
        ("Schema", "stages"),
        ("Schema", "fields"),
        ("Schema", "contracts"),
    ],
)
@pytest.mark.parametrize(
    "value",
    [range(0, 2**62), HugeLen(), HugeLenPlain(), iter(range(3))],
    ids=["range-2**62", "HugeLen", "HugeLenPlain", "iterator"],
)
def test_declared_lists_are_never_iterated_into_memory(
    model: str, argument: str, value: Any
) -> None:
    """CI was killed for memory (24 GB) by ``FieldDef(shape=range(0, 2**62))``: pydantic turned
    any iterable into a tuple before a rule could look. Only lists and tables, bounded."""
    valid: dict[str, Any] = (
        {"tier": "scalar", "dtype": "int64"} if model == "FieldDef" else {"name": "s", "fields": {}}
    )
    with pytest.raises(pydantic.ValidationError, match=argument):
        getattr(py_wire, model)(**{**valid, argument: value})
    too_many = {str(i): None for i in range(4097)} if argument == "fields" else ["x"] * 4097
    with pytest.raises(pydantic.ValidationError, match="4097"):
        getattr(py_wire, model)(**{**valid, argument: too_many})


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(OUTCOMES), sort_keys=True) + "\n")
