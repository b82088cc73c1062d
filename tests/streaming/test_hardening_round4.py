"""Issue 40, items 1 and 4, on the buffer state without Ray (the Ray actor wraps it; the same
on both backends in ``test_contract.py``): a group of another schema is refused at its put, by name,
its reservation still usable; a group past the staleness bound is dropped and counted, or
refused at reserve, never trained, under the default policy too."""

from __future__ import annotations

import time
from typing import Any

import pytest

import py_wire
from py_wire.streaming import StreamConfig, StreamError, _samples
from py_wire.streaming._policy import Group, choose
from py_wire.streaming._step import step_frame
from py_wire.streaming.ray_buffer import _Buffer, _tokens
from tests.helpers import small_text_batch, small_vlm_batch


def text_group(reward: float = 0.0, version: int = 0) -> py_wire.Frame:
    batch: dict[str, Any] = small_text_batch((3, 4))
    batch["reward"].fill_(reward)
    return py_wire.encode(batch, "text_grpo", metadata={"policy_version": str(version)})


def vlm_sample(row: int = 0) -> py_wire.Frame:
    batch = small_vlm_batch()
    return py_wire.encode({k: v[row : row + 1] for k, v in batch.items()}, "qwen2_5_vl")  # type: ignore[index]


def slot_of(buf: _Buffer, version: int | None = None, samples: int | None = None) -> str:
    slot = buf.reserve(version, samples)
    assert slot is not None
    return slot[0]


def put_sample(buf: _Buffer, gid: str, index: int, frame: py_wire.Frame) -> str | None:
    """What ``RayBuffer.put(gid, frame, sample=index)`` sends the actor, media included."""
    text, media, digest = _samples.split(frame)
    return buf.put_sample(gid, index, text, digest, media, _tokens(frame), None)


def taken_versions(buf: _Buffer) -> list[int] | None:
    got = buf.take(1, None)
    if got is None:
        return None
    lease, parts = got
    assert buf.ack(lease)
    return [version for _, version, _ in parts[0]]


def test_a_group_of_another_schema_is_refused_at_put_and_its_reservation_stays_usable() -> None:
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=2))
    first, second = slot_of(buf, 0), slot_of(buf, 0)
    assert buf.put(first, text_group(), 7) is None  # the stream's schema: text_grpo
    with pytest.raises(py_wire.SchemaError) as err:
        buf.put(second, py_wire.encode(small_vlm_batch(), "qwen2_5_vl"), 7)
    message = str(err.value)
    assert f"group {second}" in message
    assert "'qwen2_5_vl' version" in message and "'text_grpo' version" in message
    assert buf.stats()["stored"] == 1 and buf.stats()["open_groups"] == 2  # nothing lost
    assert buf.put(second, text_group(1.0), 7) is None  # the same reservation, the right frame
    got = buf.take(1, None)
    assert got is not None and len(got[1][0]) == 2


def test_a_sample_of_another_schema_is_refused_at_put_and_the_group_stays_usable() -> None:
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=1))
    gid = slot_of(buf, 0, samples=2)
    assert put_sample(buf, gid, 0, vlm_sample(0)) is None
    text_row = py_wire.encode(
        {k: v[:1] for k, v in small_text_batch((3,)).items()},  # type: ignore[index]
        "text_grpo",
    )
    with pytest.raises(py_wire.SchemaError, match=f"group {gid}, sample 1: .*'text_grpo'"):
        put_sample(buf, gid, 1, text_row)
    assert put_sample(buf, gid, 1, vlm_sample(1)) is None
    assert taken_versions(buf) == [0]


def test_pace_never_takes_a_ready_group_past_the_bound() -> None:
    pace = StreamConfig(max_staleness=1, batch_groups=1)  # "pace", the default
    groups = [Group("old", 0, 0, ready=True), Group("new", 5, 1, ready=True)]
    got = choose(groups, 5, pace)
    assert got.drop == ["old"] and got.take == ["new"]
    # A reservation already past the bound will be dropped when it arrives: no waiting for it.
    assert choose([Group("late", 0, 0), Group("new", 5, 1, ready=True)], 5, pace).take == ["new"]


def test_pace_drops_a_group_whose_lease_lapsed_until_it_was_five_versions_old() -> None:
    """The issue's scenario: k = 1, a trainer took the group at version 0, died, and the group
    came back when the trainer was at version 5: it trained at lag 5."""
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=1, lease_s=0.05))
    assert buf.put(slot_of(buf, 0), text_group(), 7) is None
    assert buf.take(1, None) is not None  # the trainer dies before its ack
    buf.set_version(5)
    time.sleep(0.1)  # the lease lapses
    assert buf.put(slot_of(buf, None), text_group(5.0, version=5), 7) is None
    assert taken_versions(buf) == [5]  # lag 0; the version-0 group is never trained
    stats = buf.stats()
    assert stats["dropped_stale"] == 1 and stats["lease_returns"] == 1
    assert stats["open_groups"] == 0 and stats["stored_bytes"] == 0


def test_reserve_with_a_version_ten_behind_the_trainer_is_refused() -> None:
    """The issue's scenario: ``reserve(version=0)`` with the trainer at 10 trained at lag 10."""
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=1))
    buf.set_version(10)
    with pytest.raises(StreamError, match=r"version 0 is past the staleness bound.*version 10"):
        buf.reserve(0)
    assert buf.stats()["reserved"] == 0 and buf.stats()["open_groups"] == 0
    assert buf.reserve(9) is not None  # at the bound: still trainable


def test_a_group_of_other_caller_metadata_is_refused_at_put_and_never_stalls_a_take() -> None:
    """Issue 46, item 4, on the buffer state: the second producer's ``worker="b"`` group is
    refused at its put, naming the group and the key (it was accepted, and every take of a
    step holding both failed in step_frame's concat, for ever); its reservation stays usable.
    A frame stating another version than its group's is refused too."""
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=2))
    first, second = slot_of(buf, 0), slot_of(buf, 0)
    worker_a = py_wire.encode(small_text_batch((3, 4)), "text_grpo",
                              metadata={"policy_version": "0", "worker": "a"})  # fmt: skip
    worker_b = py_wire.encode(small_text_batch((3, 4)), "text_grpo",
                              metadata={"policy_version": "0", "worker": "b"})  # fmt: skip
    assert buf.put(first, worker_a, 7) is None
    with pytest.raises(StreamError, match=rf"group {second}: .*'worker' is 'b', but 'a'"):
        buf.put(second, worker_b, 7)
    with pytest.raises(StreamError, match=rf"group {second}: .*policy_version='1', but the"):
        buf.put(second, text_group(version=1), 7)
    assert buf.stats()["stored"] == 1 and buf.stats()["open_groups"] == 2
    assert buf.put(second, worker_a, 7) is None
    got = buf.take(1, None)
    assert got is not None
    step_frame([f for _, _, (f,) in got[1][0]])  # the step joins: one metadata


def test_a_released_lease_counts_nothing_delivered() -> None:
    """Issue 46, item 4: stats count what reached the trainer; a take refused after its lease
    (released) counted its groups as delivered, for ever."""
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=1))
    assert buf.put(slot_of(buf, 0), text_group(), 7) is None
    got = buf.take(1, None)
    assert got is not None and buf.stats()["delivered"] == 1
    buf.release(got[0])
    assert buf.stats()["delivered"] == 0 and buf.stats()["lease_returns"] == 1
    again = buf.take(1, None)
    assert again is not None and buf.ack(again[0])
    assert buf.stats()["delivered"] == buf.stats()["acked"] == 1


def test_a_one_version_step_that_waits_says_the_versions_differ() -> None:
    """Issue 46, item 6: groups ready of versions 0 and 1 under a schema without a per-row
    version make no step; the reason says so (it said "too few groups are ready")."""
    config = StreamConfig(max_staleness=1, batch_groups=2)
    groups = [Group("a", 0, 0, ready=True), Group("b", 1, 1, ready=True)]
    choice = choose(groups, 1, config, one_version=True)
    assert choice.wait
    assert "2 groups are ready (1 of version 0, 1 of version 1), but of different" in (
        choice.reason
    )
    assert "too few groups are ready" in choose(groups[:1], 1, config).reason
