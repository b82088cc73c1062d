"""Issue 40, items 1-4 and 7, on real TransferQueue (``TQStream`` and ``StalenessSampler``): a
group or sample of another schema is refused at its put, by name, its reservation still
usable; a second put of a key is refused and the first group kept; a put must hold a
reservation, so that the window holds; the default policy never trains a group past the
staleness bound (dropped, counted in ``stats()``, cleared from TQ); concurrent producers keep
the stored bytes within the bound docs/streaming.md gives."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import ray
import transfer_queue as tq

import py_wire
from py_wire.streaming import AdmissionTimeout, StreamConfig, StreamError
from py_wire.streaming.tq import TQStream, versions_of
from tests.helpers import small_text_batch, small_vlm_batch
from tests.streaming.conftest import tq_running
from tests.streaming.test_hardening_round4 import text_group, vlm_sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]  # spawned processes: see markers

#: The sampler's rules (pace, the default); each test's stream may add a budget or window.
CONFIG = StreamConfig(max_staleness=1, batch_groups=1, lease_s=1.0, reservation_s=60.0)


@pytest.fixture(scope="module", autouse=True)
def tq_session() -> Iterator[None]:
    with tq_running(CONFIG):
        yield


def rewards(frame: py_wire.Frame | None) -> list[float]:
    assert frame is not None
    return [float(r) for r in py_wire.decode(frame)["reward"].tolist()]


def dropped_so_far() -> int:
    """The sampler's count of groups dropped as stale, read in TQ's controller."""
    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    return int(ray.get(controller.__ray_call__.remote(lambda c: c.sampler.counts.dropped_stale)))


def listed(partition: str) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = tq.kv_list(partition_id=partition).get(partition, {})
    return out


def test_a_group_or_sample_of_another_schema_is_refused_at_put_by_name() -> None:
    stream = TQStream(CONFIG, partition_id="schema")
    stream.reserve("a", 0)
    stream.reserve("b", 0)
    stream.put(["a"], [text_group(0.0)], [0])  # the partition's schema: text_grpo
    other = py_wire.encode(small_vlm_batch(), "qwen2_5_vl", metadata={"policy_version": "0"})
    with pytest.raises(py_wire.SchemaError, match=r"group b: .*'qwen2_5_vl'.*'text_grpo'"):
        stream.put(["b"], [other], [0])
    assert listed("schema")["b"]["state"] == "reserved"  # its reservation stands
    # A stream in another process (no memory of its own) reads the schema from TQ.
    with pytest.raises(py_wire.SchemaError, match=r"group b: .*'qwen2_5_vl'"):
        TQStream(CONFIG, partition_id="schema").put(["b"], [other], [0])
    stream.put(["b"], [text_group(1.0)], [0])
    for step in (0, 1):  # every step taken is a step of one schema
        meta, frame = stream.take(0, step, timeout_s=30.0)
        assert rewards(frame) == [float(step)] * 2
        stream.ack(meta)

    stream.reserve("c", 1, samples=2)
    with pytest.raises(py_wire.SchemaError, match=r"group c, sample 0: .*'qwen2_5_vl'"):
        stream.put_sample("c", 0, vlm_sample(0), 1)
    assert "c#0" not in listed("schema")


def test_a_second_put_of_a_key_is_refused_and_the_first_group_kept() -> None:
    stream = TQStream(CONFIG, partition_id="twice")
    stream.reserve("g", 0)
    stream.put(["g"], [text_group(1.0)], [0])
    with pytest.raises(StreamError, match="group g: put already"):
        stream.put(["g"], [text_group(2.0)], [0])
    meta, frame = stream.take(0, 0, timeout_s=30.0)
    assert rewards(frame) == [1.0, 1.0]
    stream.ack(meta)

    row = py_wire.encode(
        {k: v[:1] for k, v in small_text_batch((3,)).items()},  # type: ignore[index]
        "text_grpo",
    )
    stream.reserve("s", 0, samples=2)
    stream.put_sample("s", 0, row, 0)
    with pytest.raises(StreamError, match="group s: sample 0 was put already"):
        TQStream(CONFIG, partition_id="twice").put_sample("s", 0, row, 0)


def test_ten_puts_without_a_reservation_are_refused_so_a_window_of_four_holds() -> None:
    window = StreamConfig(max_staleness=1, batch_groups=2, admission_timeout_s=0.3)
    stream = TQStream(window, partition_id="window")
    for i in range(10):
        with pytest.raises(StreamError, match=f"group u{i}: not reserved.*= 4 groups"):
            stream.put([f"u{i}"], [text_group(float(i))], [0])
    assert listed("window") == {}
    for i in range(4):
        stream.reserve(f"r{i}", 0)
    with pytest.raises(AdmissionTimeout, match="4 groups are open"):
        stream.reserve("r4", 0)
    stream.put([f"r{i}" for i in range(4)], [text_group(float(i)) for i in range(4)], [0] * 4)
    with pytest.raises(StreamError, match="given twice in one put"):
        stream.put(["r0", "r0"], [text_group(), text_group()], [0, 0])


def test_pace_on_tq_drops_a_group_whose_lease_lapsed_until_it_was_five_versions_old() -> None:
    """k = 1: a trainer took the version-0 group and died; the group came back when the
    trainer was at version 5. It trained at lag 5; now it is dropped, counted, cleared."""
    import time

    stream = TQStream(CONFIG, partition_id="lapse")
    before = dropped_so_far()
    stream.reserve("old", 0)
    stream.put(["old"], [text_group(0.0)], [0])
    stream.take(0, 0, timeout_s=30.0)  # this trainer dies: no ack
    time.sleep(CONFIG.lease_s + 0.3)
    stream.reserve("new", 5)
    stream.put(["new"], [text_group(5.0, version=5)], [5])
    meta, frame = stream.take(5, 1, timeout_s=30.0)
    assert versions_of(meta) == [5] and rewards(frame) == [5.0, 5.0]
    stream.ack(meta)
    assert dropped_so_far() == before + 1
    stats = stream.stats()  # lists the partition: the dropped group's row is cleared
    assert stats["dropped_stale"] == 1 and stats["delivered"] == 2
    assert stats["lease_returns"] == 1
    assert stats["open_groups"] == 0 and stats["stored_bytes"] == 0
    assert "old" not in listed("lapse")


def test_pace_on_tq_never_trains_a_group_reserved_ten_versions_behind_the_trainer() -> None:
    stream = TQStream(CONFIG, partition_id="late")
    before = dropped_so_far()
    stream.reserve("old", 0)  # the trainer is at 10 (TQ's producers cannot know it)
    stream.put(["old"], [text_group(0.0)], [0])
    with pytest.raises(AdmissionTimeout, match="take step 0"):
        stream.take(10, 0, timeout_s=1.0)
    stream.reserve("new", 10)
    stream.put(["new"], [text_group(10.0, version=10)], [10])
    meta, _ = stream.take(10, 0, timeout_s=30.0)
    assert versions_of(meta) == [10]
    stream.ack(meta)
    assert dropped_so_far() == before + 1
    assert stream.stats()["dropped_stale"] == 1


def test_four_racing_producers_stay_within_the_documented_byte_bound(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The budget is checked, not reserved: each producer admits its put on the bytes stored,
    and puts of others in flight land after. Worst case here: all four producers check
    before any of them writes. Stored bytes then end at most ``max(max_bytes, largest put) +
    (producers - 1) * largest put`` (docs/streaming.md), and never further."""
    group = text_group()
    n = group.nbytes
    budget = StreamConfig(max_staleness=8, batch_groups=1, max_bytes=3 * n)
    streams = [TQStream(budget, partition_id="bytes") for _ in range(4)]
    for i in range(7):
        streams[0].reserve(f"g{i}", 0)
    streams[0].put(["g0", "g1"], [group, group], [0, 0])  # 2 of the budget's 3 groups
    real_put = tq.kv_batch_put
    waiting = list(range(1, 4))

    def racing_put(*args: object, **kwargs: object) -> object:
        # Before this producer's bytes land, the next one checks the budget and puts.
        if waiting:
            p = waiting.pop(0)
            streams[p].put([f"g{p + 2}"], [group], [0])
        return real_put(*args, **kwargs)

    monkeypatch.setattr(tq, "kv_batch_put", racing_put)
    streams[0].put(["g2"], [group], [0])
    stored = streams[0].stored_bytes()
    assert stored == 6 * n  # every producer saw 2 groups stored, and added its own
    assert stored <= max(3 * n, n) + (len(streams) - 1) * n
    monkeypatch.setattr(tq, "kv_batch_put", real_put)
    with pytest.raises(AdmissionTimeout, match="budget"):  # a put checked after them waits
        streams[0].put(["g6"], [group], [0], timeout_s=0.3)
