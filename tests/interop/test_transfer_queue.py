"""py_wire frames through the real TransferQueue (PyPI ``transferqueue``): its controller and
storage on a local Ray, every test run once on each of two backends: SimpleStorage (TQ's
default: frames as jagged ``uint8`` columns through its storage units) and RayStore (each
group's frame one object in Ray's object store).

TQ's controller and each storage unit take one Ray CPU (``num_cpus=4``: with fewer,
``transfer_queue.init()`` hangs silently), so a watchdog ends the process, with tracebacks,
if the module runs past its budget instead of blocking CI forever."""

from __future__ import annotations

import faulthandler
import logging
import sys
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf

import py_wire
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.registry import generate
from tests.helpers import mapping_of

SCHEMA = "qwen2_5_vl"
GROUP = 4
#: Seconds the whole module may take (init included) before the watchdog fires.
WATCHDOG_S = 240


@pytest.fixture(scope="module", autouse=True, params=["SimpleStorage", "RayStore"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    faulthandler.dump_traceback_later(WATCHDOG_S, exit=True, file=sys.stderr)
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    # TQ logs an error that RayStore has no bootstrap (it needs none: its client makes its actor).
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    tq.init(OmegaConf.create({"backend": {"storage_backend": request.param}}))
    # TQ warns once per get that it caps threads at the core count: noise here.
    logging.getLogger("transfer_queue").setLevel(logging.ERROR)
    assert ptq.stores_frames_as_objects() == (request.param == "RayStore")
    try:
        yield request.param
    finally:
        tq.close()
        ray.shutdown()
        faulthandler.cancel_dump_traceback_later()


@pytest.fixture(scope="module")
def batch() -> dict[str, Any]:
    return generate(SCHEMA, 12)


def assert_same(want: dict[str, Any], got: dict[str, Any]) -> None:
    assert list(got) == list(want) or set(got) == set(want)
    for name, a in want.items():
        b = got[name]
        if isinstance(a, py_wire.PackedTensor):
            assert len(a) == len(b), name
            for i, (ra, rb) in enumerate(zip(a.rows(), b.rows(), strict=True)):
                assert (ra is None) == (rb is None), (name, i)
                for sa, sb in zip(ra or [], rb or [], strict=True):
                    assert sa.dtype == sb.dtype and torch.equal(sa, sb), (name, i)
        elif a.is_nested:
            assert torch.equal(a.offsets(), b.offsets()), name
            assert a.dtype == b.dtype and torch.equal(a.values(), b.values()), name
        else:
            assert a.dtype == b.dtype and torch.equal(a, b), name


def column_nbytes(value: Any) -> int:
    """The payload bytes TQ's get returned for one column, in either backend's form."""
    if isinstance(value, torch.Tensor):
        return value.values().numel()
    return sum(len(frame) for frame in value.tolist())


def keys(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_rows_come_back_bit_exact(batch: dict[str, Any]) -> None:
    want = py_wire.decode(py_wire.encode(batch, SCHEMA))
    meta = ptq.put(batch, SCHEMA, keys("exact", 3), "p", group_size=GROUP)
    assert meta.size == 3
    assert_same(want, ptq.get(keys("exact", 3), "p"))
    # any subset of groups, in any order: a group's rows in order, groups as asked
    got = ptq.get(["exact2", "exact0"], "p")
    assert_same(
        py_wire.decode(
            py_wire.take_rows(py_wire.encode(batch, SCHEMA), [8, 9, 10, 11, 0, 1, 2, 3])
        ),
        got,
    )


def test_media_stored_once_per_group(batch: dict[str, Any]) -> None:
    frames = ptq.get_frames(keys("exact", 3), "p", (ptq.MEDIA,))[ptq.MEDIA]
    shared_groups = 0
    for g, frame in enumerate(frames):
        pixels = py_wire.decode(frame)["pixel_values"]
        rows = batch["pixel_values"][g * GROUP : (g + 1) * GROUP]
        unique = {id(r): r for r in rows if r is not None}
        # the group's rows reference the same tensor: one physical segment on the wire
        values, _, seg_offsets, _, _ = pixels._csr()
        assert seg_offsets.numel() - 1 == len(unique)
        assert values.numel() == sum(r.numel() for r in unique.values())
        with_media = [r for r in rows if r is not None]
        if len(with_media) > len(unique):
            shared_groups += 1
            assert len(frame) < sum(r.numel() * 4 for r in with_media)
    # Else the test would pass without storing anything once: the batch must have such groups.
    assert shared_groups > 0, "no group of this batch shares an image"


def test_text_stage_fetch_moves_no_media(batch: dict[str, Any]) -> None:
    assert ptq.columns_for(SCHEMA, "generation") == (ptq.TEXT,)
    assert ptq.columns_for(SCHEMA, "train") == ptq.COLUMNS
    calls: list[Any] = []
    real = tq.kv_batch_get

    def spy(**kw: Any) -> Any:
        out = real(**kw)
        calls.append((kw["select_fields"], sum(column_nbytes(out[c]) for c in kw["select_fields"])))
        return out

    tq_get, tq.kv_batch_get = tq.kv_batch_get, spy
    try:
        got = ptq.get(keys("exact", 3), "p", stage="generation")
    finally:
        tq.kv_batch_get = tq_get
    assert [c for c, _ in calls] == [[ptq.TEXT]]
    text_bytes = calls[0][1]
    assert text_bytes < 2_000_000  # the media column of this batch is tens of MB
    schema = py_wire.load_schema(SCHEMA)
    assert set(got) == set(schema.fields_for("generation")) & set(got)
    assert "pixel_values" not in got
    want = py_wire.decode(py_wire.encode(batch, SCHEMA), stage="generation")
    assert_same(want, got)


def test_dtype_drift_refused_at_the_producer(batch: dict[str, Any]) -> None:
    drifted = dict(batch, reward=batch["reward"].to(torch.bfloat16))
    before = tq.kv_list("p").get("p", {})
    with pytest.raises(py_wire.BatchError, match="reward"):
        ptq.put(drifted, SCHEMA, keys("drift", 3), "p", group_size=GROUP)
    assert not any(k.startswith("drift") for k in tq.kv_list("p").get("p", before))


def test_all_text_batch_has_text_column_only() -> None:
    text = generate("text_grpo", 6)
    ptq.put(text, "text_grpo", keys("text", 3), "p", group_size=2)
    assert ptq.columns_for("text_grpo") == (ptq.TEXT,)
    assert_same(py_wire.decode(py_wire.encode(text, "text_grpo")), ptq.get(keys("text", 3), "p"))


def test_text_only_groups_of_a_multimodal_schema() -> None:
    b = generate(SCHEMA, 8)
    b["pixel_values"] = [None] * 8
    b["image_grid_thw"] = [None] * 8
    b["input_ids"] = [torch.where(r == 151655, 0, r) for r in b["input_ids"]]
    b["input_ids"] = [torch.where((r == 151652) | (r == 151653), 0, r) for r in b["input_ids"]]
    b["mm_token_type_ids"] = [torch.zeros_like(r) for r in b["mm_token_type_ids"]]
    ptq.put(b, SCHEMA, keys("notext", 2), "p", group_size=4)
    got = ptq.get(keys("notext", 2), "p")
    assert got["pixel_values"].num_segments == 0
    assert_same(py_wire.decode(py_wire.encode(b, SCHEMA)), got)


def test_empty_batch_stores_nothing() -> None:
    empty = {k: v[:0] for k, v in generate("text_grpo", 2).items()}
    assert ptq.put(empty, "text_grpo", [], "p", group_size=2) is None
    with pytest.raises(py_wire.BatchError, match="keys") as err:
        ptq.get([], "p")
    assert err.value.field == "keys"


def test_bad_groups_and_keys_are_named(batch: dict[str, Any]) -> None:
    with pytest.raises(py_wire.BatchError, match="group_size") as err:
        ptq.put(batch, SCHEMA, keys("bad", 3), "p", group_size=5)
    assert err.value.field == "group_size"
    with pytest.raises(py_wire.BatchError, match="keys") as err:
        ptq.put(batch, SCHEMA, keys("bad", 2), "p", group_size=GROUP)
    assert err.value.field == "keys"
    # uneven groups (prompts with different n) are fine
    ptq.put(batch, SCHEMA, keys("uneven", 2), "p", group_size=[4, 8])
    assert_same(py_wire.decode(py_wire.encode(batch, SCHEMA)), ptq.get(keys("uneven", 2), "p"))


def test_tags_and_samplers_stay_tqs(batch: dict[str, Any]) -> None:
    ptq.put(
        batch, SCHEMA, keys("tag", 3), "q", group_size=GROUP, tags=[{"step": i} for i in range(3)]
    )
    listed = tq.kv_list("q")["q"]
    assert {k: v.get("step") for k, v in listed.items()} == {"tag0": 0, "tag1": 1, "tag2": 2}
    tq.kv_clear(keys=keys("tag", 3), partition_id="q")
    assert not tq.kv_list("q").get("q")


def test_a_foreign_column_is_a_frame_error(batch: dict[str, Any], backend: str) -> None:
    from tensordict import NonTensorStack, TensorDict

    if backend == "RayStore":
        text = NonTensorStack(*ptq.encode_group_frames(batch, SCHEMA, GROUP)[ptq.TEXT])
    else:
        text = ptq.encode_groups(batch, SCHEMA, GROUP)[ptq.TEXT]

    tq.kv_batch_put(
        keys=keys("swap", 3), partition_id="p", fields=TensorDict({ptq.MEDIA: text}, batch_size=[3])
    )
    with pytest.raises(py_wire.FrameError, match="column"):
        ptq.get_frames(keys("swap", 3), "p", (ptq.MEDIA,))


def test_raystore_frames_decode_in_the_object_store(batch: dict[str, Any], backend: str) -> None:
    """On RayStore a group's frame is read where Ray's object store holds it: the default decode
    maps it copy-on-write (no copy), and a write to a decoded view stays in this process."""
    if backend != "RayStore":
        assert not ptq.stores_frames_as_objects()
        return
    ptq.put(batch, SCHEMA, keys("cow", 3), "p", group_size=GROUP)
    (frame,) = ptq.get_frames(["cow1"], "p", (ptq.TEXT,))[ptq.TEXT]
    assert frame.storage == "readonly-buffer" and frame.copy_on_write_refusal() is None
    got = ptq.get(["cow1"], "p")
    reward = got["reward"]
    perms, inode = mapping_of(reward.data_ptr()).split()[1:5:3]
    assert perms[3] == "p" and inode != "0"  # a private mapping of the store's file: no copy
    before = reward.clone()
    reward.add_(1.0)  # writable views, private pages
    (again,) = ptq.get_frames(["cow1"], "p", (ptq.TEXT,))[ptq.TEXT]
    assert torch.equal(py_wire.decode(again, writable="copy")["reward"], before)
    tq.kv_clear(keys=keys("cow", 3), partition_id="p")
