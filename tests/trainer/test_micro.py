"""``py_wire.trainer.iter_micro_batches`` (py_wire/_micro.py): fixed-size micro-batches cut for
every row range in one pass, and ``pad_on_device=True`` (the jagged bytes copied to the device
once, padded there by torch), run on the host here with ``device="cpu"`` (the same ops) and on
CUDA where a device exists."""

from __future__ import annotations

import pickle
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import py_wire
from py_wire import _micro, _native
from py_wire.synth.registry import generate


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(-1).view(torch.uint8) if t.dtype != torch.bool else t.cpu()


def _same(a: dict[str, Any], b: dict[str, Any]) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        w = b[k]
        if isinstance(v, torch.Tensor) and v.is_nested:
            assert w.is_nested and torch.equal(v.offsets().cpu(), w.offsets().cpu()), k
            assert torch.equal(_bits(v.values().cpu()), _bits(w.values().cpu())), k
        elif isinstance(v, torch.Tensor):
            assert v.shape == w.shape and torch.equal(_bits(v.cpu()), _bits(w.cpu())), k
        elif isinstance(v, py_wire.PackedTensor):
            for x, y in zip(v.rows(), w.rows(), strict=True):
                assert (x is None) == (y is None), k
                for s, t in zip(x or [], y or [], strict=True):
                    assert torch.equal(s.cpu(), t.cpu()), k


@pytest.fixture(scope="module")
def text() -> py_wire.Frame:
    return py_wire.encode(generate("text_grpo", 21, seed=7), "text_grpo")


@pytest.mark.parametrize(
    "options", [{"layout": "padded"}, {"layout": "padded", "attention_mask": True}, {}]
)
def test_fixed_size_micro_batches_are_each_window_s_own_rows(
    text: py_wire.Frame, options: dict
) -> None:
    """``groups=n`` cuts every field for all micro-batches in one pass: the same values as each
    row window decoded alone, the last micro-batch shorter, each tensor its rows' bytes only."""
    mbs = list(py_wire.trainer.iter_micro_batches(text, 4, **options))
    assert [len(mb["reward"]) for mb in mbs] == [4, 4, 4, 4, 4, 1]
    whole = py_wire.decode(text, **options)
    for i, mb in enumerate(mbs):
        a, b = 4 * i, min(4 * i + 4, 21)
        for k, v in mb.items():
            if isinstance(v, torch.Tensor) and not v.is_nested:
                assert torch.equal(
                    v, whole[k][a:b, : v.shape[1]] if v.dim() > 1 else whole[k][a:b]
                ), k
                # Its rows' bytes only (a narrowed view: at most NARROW_VIEW x its cells).
                assert v.untyped_storage().nbytes() <= _micro.NARROW_VIEW * v.nbytes, k
        assert len(pickle.dumps(mb["reward"], protocol=5)) < 1024 + mb["reward"].nbytes


@pytest.mark.parametrize("schema", ["text_grpo", "qwen2_5_vl"])
@pytest.mark.parametrize(
    "options",
    [{}, {"attention_mask": True, "pad_to_multiple_of": 8}, {"stage": "train"}],
    ids=str,
)
@pytest.mark.parametrize("groups", [4, [[0, 3, 1], range(4, 9)]], ids=["fixed", "gathered"])
def test_padded_on_the_device_is_the_host_s_padding(
    schema: str, options: dict, groups: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    frame = py_wire.encode(generate(schema, 10, seed=3), schema)
    host = list(py_wire.trainer.iter_micro_batches(frame, groups, layout="padded", **options))

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("padded by the codec on the host, not by torch where the bytes are")

    monkeypatch.setattr(_native, "pad_fields", refused)
    monkeypatch.setattr(_native, "pad_rows", refused)
    on_device = list(
        py_wire.trainer.iter_micro_batches(
            frame, groups, layout="padded", device="cpu", pad_on_device=True, **options
        )
    )
    assert len(host) == len(on_device)
    for a, b in zip(host, on_device, strict=True):
        _same(a, b)


def test_pad_on_device_arguments(text: py_wire.Frame) -> None:
    with pytest.raises(py_wire.WireError, match="pass device= and layout='padded'"):
        py_wire.trainer.iter_micro_batches(text, 4, layout="padded", pad_on_device=True)
    with pytest.raises(py_wire.WireError, match="pass device= and layout='padded'"):
        py_wire.trainer.iter_micro_batches(text, 4, device="cpu", pad_on_device=True)
    with pytest.raises(py_wire.WireError, match=r"not \['verify'\]"):
        py_wire.trainer.iter_micro_batches(
            text, 4, layout="padded", device="cpu", pad_on_device=True, verify=True
        )
    with pytest.raises(TypeError, match="pad_on_device"):
        py_wire.trainer.iter_micro_batches(text, 4, layout="padded", device="cpu", pad_on_device=1)


needs_cuda = pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device (docs/trainer.md: what ran where)"
)


@needs_cuda
@pytest.mark.parametrize("pin_memory", [False, True])
def test_cuda_padded_on_the_device_is_the_host_s_padding(pin_memory: bool) -> None:
    frame = py_wire.encode(generate("qwen2_5_vl", 10, seed=3), "qwen2_5_vl")
    host = list(py_wire.trainer.iter_micro_batches(frame, 4, layout="padded", attention_mask=True))
    cuda = list(
        py_wire.trainer.iter_micro_batches(
            frame,
            4,
            layout="padded",
            attention_mask=True,
            device="cuda",
            pin_memory=pin_memory,
            pad_on_device=True,
        )
    )
    for a, b in zip(host, cuda, strict=True):
        assert b["input_ids"].is_cuda and b["attention_mask"].is_cuda
        _same(a, b)


def _small_frame(name: str) -> py_wire.Frame:
    from tests.hostile.seeds import SMALL

    gen = py_wire.synth.registry.GENERATORS[name]
    return py_wire.encode(gen(5, seed=2, group_size=2, **SMALL.get(name, {})), name)


@pytest.mark.parametrize("name", py_wire.bundled_schemas())
@pytest.mark.parametrize(
    "options",
    [{}, {"layout": "padded"}, {"layout": "padded", "attention_mask": True}],
    ids=["jagged", "padded", "padded+mask"],
)
def test_every_bundled_schema_s_micro_batches_are_its_rows_decoded_alone(
    name: str, options: dict
) -> None:
    """Every bundled schema, fixed and gathered groups, on the host and padded by torch: each
    micro-batch is, field for field and bit for bit, the decode of its rows taken alone."""
    frame = _small_frame(name)
    plans: list[tuple[Any, list[list[int]]]] = [
        (2, [[0, 1], [2, 3], [4]]),
        ([[3, 0], range(1, 3), [4]], [[3, 0], [1, 2], [4]]),
    ]
    for groups, rows in plans:
        runs = [py_wire.trainer.iter_micro_batches(frame, groups, **options)]
        if options.get("layout") == "padded":
            runs.append(
                py_wire.trainer.iter_micro_batches(
                    frame, groups, device="cpu", pad_on_device=True, **options
                )
            )
        for run in runs:
            mbs = list(run)
            assert len(mbs) == len(rows)
            for mb, picked in zip(mbs, rows, strict=True):
                _same(mb, py_wire.decode(py_wire.take_rows(frame, picked), **options))


def _text_frame(lengths: list[int]) -> py_wire.Frame:
    """text_grpo rows of ``lengths`` tokens, each value distinct (a cut in the wrong place, or a
    cell of another row, shows)."""
    gen = torch.Generator().manual_seed(sum(lengths) + len(lengths))
    return py_wire.encode(
        {
            "input_ids": [torch.randint(1, 1000, (n,), generator=gen) for n in lengths],
            "advantages": [torch.randn(n, generator=gen) for n in lengths],
            "generation_logprobs": [torch.randn(n, generator=gen) for n in lengths],
            "input_lengths": torch.tensor(lengths, dtype=torch.int64),
            "loss_multiplier": torch.rand(len(lengths), generator=gen),
            "reward": torch.randn(len(lengths), generator=gen),
        },
        "text_grpo",
    )


def test_a_narrow_micro_batch_is_padded_at_its_own_width_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On the host every micro-batch's padded fields and mask are written at its own width by
    one codec call for the whole step (never padded at the batch's width and cut): each
    tensor's storage is exactly its own cells, and the values are its rows decoded alone."""
    lengths = [3, 1, 0, 2, 30, 29, 5, 5, 7]
    frame = _text_frame(lengths)
    calls: list[int] = []
    pad = _native.pad_micro_batches

    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return pad(*args, **kwargs)

    def refused(*args: object, **kwargs: object) -> None:
        raise AssertionError("padded at the batch's width")

    monkeypatch.setattr(_native, "pad_micro_batches", counted)
    monkeypatch.setattr(_native, "pad_fields", refused)
    monkeypatch.setattr(_native, "pad_rows", refused)
    options: dict[str, Any] = {"layout": "padded", "attention_mask": True, "pad_to_multiple_of": 4}
    batches = py_wire.trainer.iter_micro_batches(frame, 2, **options)
    mbs = list(batches)
    assert len(calls) == 1
    assert [mb["input_ids"].shape[1] for mb in mbs] == [4, 4, 32, 8, 8]
    monkeypatch.undo()
    for i, mb in enumerate(mbs):
        alone = py_wire.decode(py_wire.take_rows(frame, range(2 * i, min(2 * i + 2, 9))), **options)
        _same(mb, alone)
        for k, v in mb.items():
            assert v.untyped_storage().nbytes() == v.nbytes, k  # its own cells, nothing more
    # The whole batch is still there, decoded on first use (the micro-batches are narrower).
    _same(batches.decoded, py_wire.decode(frame, **options))


def test_micro_batches_at_the_batch_s_width_are_views_of_the_decoded_batch() -> None:
    """Not narrowed (NeMo-RL's default): the micro-batches are the rows of ``decoded``, over
    the same bytes (one buffer written once), each tensor over exactly its rows' bytes."""
    frame = _text_frame([3, 1, 0, 2, 30, 29, 5])
    batches = py_wire.trainer.MicroBatches(frame, 3, {"layout": "padded"}, narrow=False)
    mbs = list(batches)
    whole = batches.decoded["input_ids"]
    assert whole.shape == (7, 30)
    for a, mb in zip(range(0, 7, 3), mbs, strict=True):
        ids = mb["input_ids"]
        assert ids.data_ptr() == whole[a].data_ptr() and torch.equal(ids, whole[a : a + 3])
        assert ids.untyped_storage().nbytes() == ids.nbytes


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    lengths=st.lists(st.integers(0, 9), min_size=0, max_size=7),
    size=st.integers(1, 4),
    multiple=st.sampled_from([None, 1, 3]),
    mask=st.booleans(),
)
def test_padded_micro_batches_are_their_rows_decoded_alone_property(
    lengths: list[int], size: int, multiple: int | None, mask: bool
) -> None:
    """Any row lengths (no rows, one row, rows without tokens), any micro-batch size and
    multiple: each padded micro-batch is its rows decoded alone, bit for bit, and at the
    batch's width (``narrow=False``) it is the batch's rows."""
    frame = _text_frame(lengths)
    options: dict[str, Any] = {"layout": "padded", "attention_mask": mask}
    if multiple is not None:
        options["pad_to_multiple_of"] = multiple
    rows = len(lengths)
    groups = [range(a, min(a + size, rows)) for a in range(0, rows, size)]
    mbs = list(py_wire.trainer.iter_micro_batches(frame, size, **options))
    assert len(mbs) == len(groups)
    for mb, group in zip(mbs, groups, strict=True):
        _same(mb, py_wire.decode(py_wire.take_rows(frame, group), **options))
    wide = py_wire.trainer.MicroBatches(frame, size, options, narrow=False)
    whole = py_wire.decode(frame, **options)
    for mb, group in zip(wide, groups, strict=True):
        _same(mb, {k: v[group.start : group.stop] for k, v in whole.items()})
