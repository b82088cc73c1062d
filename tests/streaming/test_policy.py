"""The buffer rules, without Ray: oldest first, whole groups, pace or drop, admission, balance,
and the single-process buffer state (leases, reservations, the schema and metadata checks at
put, the staleness a step reports) the Ray actor wraps; the same guarantees on both backends
are in ``test_contract.py``."""

from __future__ import annotations

import time
from typing import Any

import pytest

import py_wire
from py_wire.streaming import AdmissionTimeout, StreamConfig, StreamError, _samples
from py_wire.streaming._policy import Group, admits, balance, choose, wait_until
from py_wire.streaming._step import step_frame
from py_wire.streaming.ray_buffer import VERSION_KEY, _Buffer, _tokens
from py_wire.synth.registry import generate
from tests.helpers import small_text_batch, small_vlm_batch


def _frame() -> py_wire.Frame:
    return py_wire.encode(small_text_batch((2,)), "text_grpo")


def _g(gid: str, version: int, seq: int, ready: bool = True, tokens: int = 0) -> Group:
    return Group(gid, version, seq, ready=ready, tokens=tokens)


def test_oldest_first_whole_groups() -> None:
    config = StreamConfig(max_staleness=2, batch_groups=2)
    groups = [_g("c", 3, 0), _g("a", 1, 5), _g("b", 1, 2), _g("d", 2, 1)]
    assert choose(groups, 3, config).take == ["b", "a"]
    assert choose(groups[:1], 3, config).wait


def test_pace_waits_for_a_group_due_now_and_drop_counts() -> None:
    pace = StreamConfig(max_staleness=1, batch_groups=1, policy="pace")
    groups = [_g("slow", 0, 0, ready=False), _g("fast", 1, 1)]
    # At trainer version 1, the version-0 group must train now: pace waits for it.
    assert choose(groups, 1, pace).wait
    assert choose(groups, 0, pace).take == ["fast"]
    groups[0].ready = True
    assert choose(groups, 1, pace).take == ["slow"]
    # Past the bound a group is dropped under either policy (and the caller counts it).
    got = choose(groups, 5, pace)
    assert got.drop == ["slow", "fast"] and got.wait
    drop = StreamConfig(max_staleness=1, batch_groups=1, policy="drop")
    got = choose(groups, 3, drop)
    assert got.drop == ["slow", "fast"] and got.wait


def test_admission_window_and_bytes() -> None:
    config = StreamConfig(max_staleness=1, batch_groups=2, max_bytes=100)
    assert admits(3, 0, 0, config) is None
    assert "staleness bound" in str(admits(4, 0, 0, config))
    assert admits(1, 60, 40, config) is None
    assert "budget of 100" in str(admits(1, 70, 40, config))
    # A group larger than the whole budget still goes into an empty buffer (no deadlock).
    assert admits(0, 0, 500, config) is None
    # A group that reserves and stores at once: the window and the bytes in one check.
    assert "staleness bound" in str(admits(4, 0, 40, config, new_group=True))
    assert "budget of 100" in str(admits(1, 70, 40, config, new_group=True))
    assert admits(3, 60, 40, config, new_group=True) is None


def test_reserve_and_put_admits_by_window_and_bytes_and_a_refusal_reserves_nothing() -> None:
    """``_Buffer.reserve_and_put``: a full window and a byte budget the frame would pass are
    each its answer (why it waits), and a refusal leaves no reservation or count behind; an
    admitted frame is committed at once, ready for a take, its bytes counted."""
    frame = py_wire.encode(small_text_batch((3, 4)), "text_grpo", metadata={VERSION_KEY: "0"})
    # The window (1 group) holds the first; the second waits for it.
    buffer = _Buffer(StreamConfig(max_staleness=0, batch_groups=1))
    gid, version = _admitted(buffer.reserve_and_put(0, frame, 7, inline=True))
    assert version == 0 and buffer.groups[gid].ready and buffer.groups[gid].tokens == 7
    assert buffer.stored_bytes == frame.nbytes and gid not in buffer.reserved_until
    assert "staleness bound" in str(buffer.reserve_and_put(0, frame, 7, inline=True))
    # Room in the window, not in the byte budget: the byte reason.
    budget = StreamConfig(max_staleness=1, batch_groups=2, max_bytes=frame.nbytes + 1)
    buffer = _Buffer(budget)
    _admitted(buffer.reserve_and_put(0, frame, 7, inline=True))
    assert f"budget of {frame.nbytes + 1}" in str(buffer.reserve_and_put(0, frame, 7, inline=True))
    counts = buffer.stats()
    assert (counts["reserved"], counts["stored"], counts["open_groups"]) == (1, 1, 1)
    taken = buffer.take(1, None)
    assert taken is None  # a step of 2 groups, one stored
    # A frame larger than the whole budget still goes into an empty buffer.
    buffer = _Buffer(StreamConfig(max_staleness=0, batch_groups=1, max_bytes=1))
    _admitted(buffer.reserve_and_put(0, frame, 7, inline=True))
    taken = buffer.take(1, None)
    assert taken is not None and [v for _, v, _ in taken[1][0]] == [0]


def _admitted(out: tuple[str, int] | str) -> tuple[str, int]:
    assert not isinstance(out, str), out
    return out


def test_wait_until_times_out_with_the_reason() -> None:
    with pytest.raises(AdmissionTimeout, match="still nope"):
        wait_until(lambda: "nope", 0.02, "reserve")


def test_balance_whole_groups_by_tokens() -> None:
    groups = [_g(str(i), 0, i, tokens=t) for i, t in enumerate([100, 10, 10, 80, 20, 60])]
    parts = balance(groups, 2)
    assert sorted(g for p in parts for g in p) == [str(i) for i in range(6)]
    loads = [sum(groups[int(g)].tokens for g in p) for p in parts]
    assert [len(p) for p in parts] == [3, 3] and abs(loads[0] - loads[1]) <= 20


def test_config_refuses_nonsense() -> None:
    with pytest.raises(StreamError, match="max_staleness"):
        StreamConfig(max_staleness=-1, batch_groups=1)
    with pytest.raises(StreamError, match="policy"):
        StreamConfig(max_staleness=1, batch_groups=1, policy="lifo")  # type: ignore[arg-type]


def test_buffer_lease_returns_groups_and_late_ack_is_refused() -> None:
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=2, lease_s=0.05))
    slots = [buf.reserve(0) for _ in range(4)]
    assert buf.reserve(0) is None  # the window: (k + 1) * batch_groups
    for slot in slots:
        assert slot is not None
        assert buf.put(slot[0], _frame(), 5) is None
    first = buf.take(1, None)
    assert first is not None
    lease, parts = first
    time.sleep(0.1)  # the consumer died: its groups return
    second = buf.take(1, 10.0)
    assert second is not None
    assert {g for g, _, _ in parts[0]} == {g for g, _, _ in second[1][0]}
    assert not buf.ack(lease)
    assert buf.ack(second[0])
    stats = buf.stats()
    assert stats["lease_returns"] == 2 and stats["acked"] == 2 and stats["delivered"] == 4


def test_buffer_reservation_lapses_when_the_producer_dies() -> None:
    buf = _Buffer(StreamConfig(max_staleness=0, batch_groups=1, reservation_s=0.05))
    slot = buf.reserve(None)
    assert slot is not None and slot[1] == 0 and buf.reserve(0) is None
    time.sleep(0.1)
    assert buf.reserve(0) is not None
    assert buf.stats()["abandoned"] == 1
    with pytest.raises(StreamError, match="no open reservation"):
        buf.put(slot[0], _frame(), 1)


# -- the buffer state: checks at put, staleness, one version a step ----------------------------


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
    """k = 1, a trainer took the group at version 0, died, and the group
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
    """``reserve(version=0)`` with the trainer at 10 trained at lag 10."""
    buf = _Buffer(StreamConfig(max_staleness=1, batch_groups=1))
    buf.set_version(10)
    with pytest.raises(StreamError, match=r"version 0 is past the staleness bound.*version 10"):
        buf.reserve(0)
    assert buf.stats()["reserved"] == 0 and buf.stats()["open_groups"] == 0
    assert buf.reserve(9) is not None  # at the bound: still trainable


def test_a_group_of_other_caller_metadata_is_refused_at_put_and_never_stalls_a_take() -> None:
    """On the buffer state: the second producer's ``worker="b"`` group is
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
    """Stats count what reached the trainer; a take refused after its lease
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
    """Groups ready of versions 0 and 1 under a schema without a per-row
    version make no step; the reason says so (it said "too few groups are ready")."""
    config = StreamConfig(max_staleness=1, batch_groups=2)
    groups = [Group("a", 0, 0, ready=True), Group("b", 1, 1, ready=True)]
    choice = choose(groups, 1, config, one_version=True)
    assert choice.wait
    assert "2 groups are ready (1 of version 0, 1 of version 1), but of different" in (
        choice.reason
    )
    assert "too few groups are ready" in choose(groups[:1], 1, config).reason


def _commit(buffer: _Buffer, frame: py_wire.Frame, version: int) -> str:
    reserved = buffer.reserve(version)
    assert reserved is not None
    gid = reserved[0]
    assert buffer.put(gid, frame, _tokens(frame)) is None
    return gid


def _step_frames(parts: list[list[tuple[str, int, Any]]]) -> py_wire.Frame:
    return step_frame([stored[0] for part in parts for _, _, stored in part])


def test_staleness_is_the_lag_at_take_when_the_trainer_updates_before_it_acks() -> None:
    """The documented order: take, train, update the version, ack. Under a bound of 1 every
    group trained at lag 0 or 1; a lag of 2 never happened."""
    buffer = _Buffer(StreamConfig(max_staleness=1, batch_groups=1))
    frame = py_wire.encode(small_text_batch((3, 4)), "text_grpo")
    trained_at = []
    for step in range(4):
        _commit(buffer, frame, max(step - 1, 0))  # generated one version behind
        taken = buffer.take(1, None)
        assert taken is not None
        lease, parts = taken
        trained_at += [buffer.trainer_version - version for _, version, _ in parts[0]]
        buffer.set_version(step + 1)  # the weight update, then the ack
        assert buffer.ack(lease)
    assert trained_at == [0, 1, 1, 1]
    assert buffer.stats()["staleness"] == {0: 1, 1: 3}


def test_a_step_of_nemo_rls_schema_takes_groups_of_one_version() -> None:
    """NeMo-RL's bundled schema has no per-row ``policy_version``: a step of versions 0 and 1
    (both within a bound of 1) could not be joined, so the step takes the two groups of
    version 1 and leaves the group of version 0 for a later step."""
    buffer = _Buffer(StreamConfig(max_staleness=1, batch_groups=2))
    batch = generate("nemo_rl/text", 3, seed=1)

    def frame(version: int) -> py_wire.Frame:
        return py_wire.encode(batch, "nemo_rl/text", metadata={VERSION_KEY: str(version)})

    old = _commit(buffer, frame(0), 0)
    buffer.set_version(1)
    _commit(buffer, frame(1), 1)
    assert buffer.take(1, None) is None  # one group per version: no step of one version yet
    _commit(buffer, frame(1), 1)
    taken = buffer.take(1, None)
    assert taken is not None
    lease, parts = taken
    assert [version for _, version, _ in parts[0]] == [1, 1]
    assert _step_frames(parts).metadata[VERSION_KEY] == "1"
    assert buffer.ack(lease)
    assert list(buffer.groups) == [old]


def test_a_step_of_a_schema_with_per_row_versions_still_mixes_them() -> None:
    """``text_grpo`` declares ``policy_version``: the oldest groups train first, whatever
    their versions, each row carrying its own."""
    buffer = _Buffer(StreamConfig(max_staleness=1, batch_groups=2))
    for version in (0, 1):
        buffer.set_version(version)
        metadata = {VERSION_KEY: str(version)}
        _commit(
            buffer, py_wire.encode(small_text_batch((2,)), "text_grpo", metadata=metadata), version
        )
    taken = buffer.take(1, None)
    assert taken is not None
    assert [version for _, version, _ in taken[1][0]] == [0, 1]
    assert py_wire.decode(_step_frames(taken[1]))["policy_version"].tolist() == [0, 1]
