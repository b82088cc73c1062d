"""A key's data is only ever its own (py_wire/interop/transfer_queue/get.py, write_back.py,
put.py): a fetch of many keys returns each key's latest values, write-backs included, as a
fetch of that key alone would; a sample's shared media are bound to its group by identity.
Run on both of TQ's backends (the module fixture of test_transfer_queue.py)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import transfer_queue as tq

import py_wire
from py_wire.interop import nemo_rl
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.registry import generate
from tests.interop.test_nemo_rl import assert_same_nemo, nemo_batch, with_nemo_rl
from tests.interop.test_transfer_queue import SCHEMA, assert_same, backend, keys
from tests.nemo_rl_model import PackedTensor as Nemo

#: the module fixture (Ray and TQ up, once per backend) and NeMo-RL's PackedTensor importable
__all__ = ["backend", "with_nemo_rl"]

GROUP = 4


@pytest.fixture(scope="module")
def batch() -> dict[str, Any]:
    return generate(SCHEMA, 2 * GROUP, seed=11)


def _groups(names: list[str], per_sample: bool) -> tuple[list[str], list[str]]:
    """The keys of g0 and of g1."""
    return (names[:GROUP], names[GROUP:]) if per_sample else (names[:1], names[1:])


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_a_write_back_to_some_keys_is_theirs_when_fetched_with_others(
    batch: dict[str, Any], per_sample: bool
) -> None:
    """The driver filters g1 (replace=True of a stored field) and writes an optional field
    back to g1 alone: a fetch of g0 and g1 returns g1's new values and g0's stored ones, in
    either order, as the fetch of each alone does."""
    part = f"wb-some-{per_sample}"
    names = keys(part, 2 * GROUP if per_sample else 2)
    ptq.put(batch, SCHEMA, names, part, group_size=GROUP)
    g0, g1 = _groups(names, per_sample)
    zeros = torch.zeros(GROUP, dtype=torch.float32)
    ptq.write_back(g1, part, {"loss_multiplier": zeros}, replace=True)
    assert torch.equal(ptq.get(g1, part)["loss_multiplier"], zeros)
    want = {**batch, "loss_multiplier": torch.cat([batch["loss_multiplier"][:GROUP], zeros])}
    frame = py_wire.encode(want, SCHEMA)
    assert_same(py_wire.decode(frame), ptq.get(names, part))
    assert_same(py_wire.decode(frame, stage="train"), ptq.get(names, part, stage="train"))
    back = list(range(GROUP, 2 * GROUP)) + list(range(GROUP))
    assert_same(py_wire.decode(py_wire.take_rows(frame, back)), ptq.get(g1 + g0, part))
    got = ptq.get_by_meta(_kv_meta(names, part), stage="train")
    assert torch.equal(got["loss_multiplier"], want["loss_multiplier"])
    got = ptq.get_samples([(g1[0], 0), (g0[0], 0)], part, stage="train")
    assert torch.equal(got["loss_multiplier"], torch.tensor([0.0, 1.0]))

    # an optional field that is not stored, written back to g1 alone: g1's own fetch has it,
    # a fetch with g0 (which holds none) says so by name rather than dropping it
    versions = torch.arange(GROUP, dtype=torch.int64)
    ptq.write_back(g1, part, {"policy_version": versions})
    assert torch.equal(ptq.get(g1, part)["policy_version"], versions)
    with pytest.raises(py_wire.FrameError, match="policy_version") as err:
        ptq.get(names, part)
    assert err.value.field == "policy_version"
    # a fetch that does not want it is unaffected
    got = ptq.get(names, part, fields=["input_ids", "loss_multiplier"])
    assert torch.equal(got["loss_multiplier"], want["loss_multiplier"])
    ptq.write_back(g0, part, {"policy_version": versions + 10})
    got = ptq.get(names, part)
    assert torch.equal(got["policy_version"], torch.cat([versions + 10, versions]))
    assert torch.equal(got["loss_multiplier"], want["loss_multiplier"])
    # a field written back to g1 cannot be written again without replace, even with g0
    with pytest.raises(py_wire.BatchError, match="written back already"):
        ptq.write_back(names, part, {"policy_version": torch.cat([versions, versions])})
    tq.kv_clear(keys=names, partition_id=part)


def _kv_meta(names: list[str], part: str) -> Any:
    return tq.get_client().kv_retrieve_meta(keys=names, partition_id=part, create=False)


def _twins() -> dict[str, Any]:
    """Two groups whose rows are alike (one prompt template, equal-size images) but whose
    images differ: only identity tells their media apart."""
    one = generate(SCHEMA, GROUP, seed=7)  # every row one image, shared by the group
    assert all(row is not None for row in one["pixel_values"])
    brighter = one["pixel_values"][0] + 1
    twin = {
        k: torch.cat([v, v]) if isinstance(v, torch.Tensor) else [*v, *v] for k, v in one.items()
    }
    twin["pixel_values"] = [*one["pixel_values"], *[brighter] * GROUP]
    return twin


def test_a_put_over_a_media_key_that_samples_read_is_refused() -> None:
    """A per-group put over a group's first per-sample key (which holds the group's media)
    while the group's other samples remain is refused, naming the key and those samples;
    putting the whole group again is not."""
    twin, part = _twins(), "media-over"
    a = keys("oa", 2 * GROUP)
    ptq.put(twin, SCHEMA, a, part, group_size=GROUP)
    with pytest.raises(py_wire.FrameError, match=r"'oa0'.*'oa1'") as err:
        ptq.put(_rows(twin, GROUP, 2 * GROUP), SCHEMA, a[:1], part, group_size=GROUP)
    assert err.value.field == "keys"
    assert_same(py_wire.decode(py_wire.encode(twin, SCHEMA)), ptq.get(a, part))
    ptq.put(_rows(twin, GROUP, 2 * GROUP), SCHEMA, a[:GROUP], part, group_size=GROUP)
    again = _rows(twin, GROUP, 2 * GROUP)
    assert_same(py_wire.decode(py_wire.encode(again, SCHEMA)), ptq.get(a[:GROUP], part))
    tq.kv_clear(keys=a, partition_id=part)


def test_a_media_key_cleared_and_reused_by_another_group_is_a_frame_error() -> None:
    """The group's first key consumed and cleared alone, then put again by another group with
    the same tokens: its other samples' fetch is a FrameError naming the sample."""
    twin, part = _twins(), "media-reuse"
    a = keys("ra", 2 * GROUP)
    ptq.put(twin, SCHEMA, a, part, group_size=GROUP)
    tq.kv_clear(keys=a[:1], partition_id=part)
    ptq.put(_rows(twin, GROUP, 2 * GROUP), SCHEMA, a[:1], part, group_size=GROUP)
    with pytest.raises(py_wire.FrameError, match="key 'ra1'") as err:
        ptq.get(a[1:3], part)
    assert err.value.field == ptq.MEDIA
    tq.kv_clear(keys=a, partition_id=part)


def test_a_key_with_tags_copied_from_another_group_is_a_frame_error() -> None:
    """A requeue that copies another group's sample's custom meta onto a key: the key's fetch
    is a FrameError naming it. py_wire's own put of a key owns py_wire's tags, so a put with
    such tags reads the key's own media."""
    twin, part = _twins(), "media-tags"
    b = keys("tb", 2 * GROUP)
    ptq.put(twin, SCHEMA, b, part, group_size=GROUP)
    copied = dict(_kv_meta([b[GROUP + 1]], part).custom_meta[0])
    tq.kv_batch_put(keys=[b[1]], partition_id=part, tags=[copied])
    with pytest.raises(py_wire.FrameError, match="key 'tb1'") as err:
        ptq.get(b[:2], part)
    assert err.value.field == ptq.GROUP
    requeued = _rows(twin, 0, GROUP)
    ptq.put(requeued, SCHEMA, ["tc0"], part, group_size=GROUP, tags=[copied])
    assert_same(py_wire.decode(py_wire.encode(requeued, SCHEMA)), ptq.get(["tc0"], part))
    tq.kv_clear(keys=[*b, "tc0"], partition_id=part)


def _rows(batch: dict[str, Any], start: int, stop: int) -> dict[str, Any]:
    from py_wire.interop.transfer_queue.put import group_rows

    return {k: group_rows(k, v, start, stop) for k, v in batch.items()}


def test_nemo_rl_fetch_keeps_a_filter_of_some_samples() -> None:
    """NeMo-RL's driver zeroes sample_mask of the samples it filters out (docs/interop.md):
    its fetch of every sample, per-sample keys, trains on the filtered ones with mask 0."""
    schema = "nemo_rl/qwen2_5_vl"
    full = generate(schema, 2 * GROUP, seed=5)
    part = "nemo-filter"
    names = keys(part, 2 * GROUP)
    ptq.put(full, schema, names, part, group_size=GROUP)
    zeros = torch.zeros(GROUP, dtype=torch.float32)
    ptq.write_back(names[GROUP:], part, {"sample_mask": zeros}, replace=True)
    want = torch.cat([full["sample_mask"][:GROUP], zeros])
    fetched = (
        (nemo_rl.get(names, part, stage="logprob"), want),
        (nemo_rl.get_by_meta(_kv_meta(names, part), stage="logprob"), want),
        (nemo_rl.get(names[::-1], part, stage="logprob"), want.flip(0)),
    )
    for got, expected in fetched:
        assert torch.equal(got["sample_mask"], expected)
    tq.kv_clear(keys=names, partition_id=part)


@pytest.mark.parametrize("per_sample", [False, True], ids=["per-group", "per-sample"])
def test_two_fetches_of_one_group_store_its_shared_image_once(
    with_nemo_rl: None, per_sample: bool
) -> None:
    """NeMo-RL's gather of two fetches of one group (its samples in two fetches per-sample, the
    group fetched twice per-group) stores each image the group shares once, bit for bit what
    its gather of the source rows gives (the provenance travels in the media frame)."""
    schema = "nemo_rl/qwen2_5_vl"
    batch = nemo_batch(schema, 2 * GROUP, True)
    part = f"identity-{per_sample}"
    names = keys(part, 2 * GROUP if per_sample else 2)
    nemo_rl.put(batch, schema, names, part, group_size=GROUP)
    if per_sample:
        fetches, rows = [names[:2], names[2:GROUP]], [[0, 1], [2, 3]]
    else:
        fetches, rows = [names[:1], names[:1]], [list(range(GROUP))] * 2
    got = [nemo_rl.get(f, part) for f in fetches]
    for k, v in batch.items():
        if isinstance(v, Nemo):
            joined = Nemo.concat([g[k] for g in got])
            assert len(joined.tensors) == 1, k  # the group's one prompt image, stored once
            assert_same_nemo(joined, Nemo.concat([v.slice(r) for r in rows]))
    tq.kv_clear(keys=names, partition_id=part)


def test_a_fetch_copies_no_keys_tags(batch: dict[str, Any], monkeypatch: Any) -> None:
    """TQ's ``BatchMeta.select_fields`` deep-copies every key's tags each call (py_wire's seven
    a key, O(keys) per fetch) though ``get_data`` reads none: a fetch of per-sample keys hands
    ``get_data`` a selection of its columns without them, and returns the same batch."""
    import copy

    import transfer_queue.metadata as tq_metadata

    part = "fetch-tags"
    names = keys(part, 2 * GROUP)
    ptq.put(batch, SCHEMA, names, part, group_size=GROUP)
    ptq.write_back(names, part, {"loss_multiplier": torch.zeros(2 * GROUP)}, replace=True)
    copied: list[Any] = []
    real = copy.deepcopy

    def spy(value: Any, *args: Any) -> Any:
        if isinstance(value, list) and any(isinstance(t, dict) and ptq.GROUP in t for t in value):
            copied.append(value)
        return real(value, *args)

    monkeypatch.setattr(tq_metadata.copy, "deepcopy", spy)
    got = ptq.get(names, part)
    monkeypatch.undo()
    assert copied == []
    want = py_wire.decode(
        py_wire.encode({**batch, "loss_multiplier": torch.zeros(2 * GROUP)}, SCHEMA)
    )
    assert_same(want, got)
    tq.kv_clear(keys=names, partition_id=part)
