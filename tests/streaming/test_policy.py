"""The buffer rules, without Ray: oldest first, whole groups, pace or drop, admission, balance,
and the single-process buffer state (leases, reservations) the Ray actor wraps."""

from __future__ import annotations

import time

import pytest

import py_wire
from py_wire.streaming import AdmissionTimeout, StreamConfig, StreamError
from py_wire.streaming._policy import Group, admits, balance, choose, wait_until
from py_wire.streaming.ray_buffer import _Buffer
from tests.helpers import small_text_batch


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
