"""Issue 43, items 3 and 4, on the buffer's rules (no Ray): the staleness a step reports is the
lag its groups were trained at, and a step of a schema without a per-row ``policy_version``
field never mixes versions (its step frame could not join them); and item 2's placement
arguments, checked before Ray is called."""

from __future__ import annotations

from typing import Any

import pytest

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig, StreamError
from py_wire.streaming import tq as _tq  # noqa: F401  (imported before offline() patches Ray)
from py_wire.streaming.ray_buffer import VERSION_KEY, _Buffer, _tokens, step_frame
from py_wire.synth.registry import generate
from tests.helpers import small_text_batch
from tests.streaming.offline import ReachedBackend, offline


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


@pytest.mark.parametrize(
    ("placement", "error"),
    [
        ({"num_cpus": -1}, StreamError),
        ({"num_cpus": "1"}, TypeError),
        ({"resources": {"CPU": 1}}, StreamError),
        ({"resources": {"head": float("nan")}}, StreamError),
        ({"resources": ["head"]}, TypeError),
        ({"scheduling_strategy": "NEAREST"}, StreamError),
        ({"scheduling_strategy": object()}, TypeError),
    ],
)
def test_a_placement_ray_would_refuse_is_refused_before_ray_naming_it(
    placement: dict[str, Any], error: type[Exception]
) -> None:
    argument = next(iter(placement))
    with offline(), pytest.raises(error, match=argument):
        RayBuffer(StreamConfig(max_staleness=1, batch_groups=1), **placement)


def test_a_valid_placement_reaches_ray() -> None:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    strategy = NodeAffinitySchedulingStrategy("ab" * 28, soft=False)
    with offline(), pytest.raises(ReachedBackend):
        RayBuffer(
            StreamConfig(max_staleness=1, batch_groups=1),
            num_cpus=0.5,
            resources={"head": 0.01},
            scheduling_strategy=strategy,
        )
