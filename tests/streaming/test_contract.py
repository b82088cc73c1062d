"""The streaming contract (:class:`py_wire.streaming.Stream`), one suite run on every backend:
:class:`RayBuffer` on a real Ray and :class:`TQBuffer` on real TransferQueue. Each test builds
its stream with ``make(config)`` and never asks which backend it has: a trainer loop and a
producer loop written once run on both, with the same arguments, return types and errors.

The guarantees: every group trained exactly once, never past the staleness bound; a group of
another schema, or of other caller metadata, refused at its put by name (a take never fails
for ever on groups put accepted); a take refused after its lease gives the groups back at once
and counts nothing delivered; ``stats()`` counts what reached the trainer, ``acked`` equal to
``delivered`` once the last step is acked; a step that waits says why.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import py_wire
from py_wire.streaming import (
    AdmissionTimeout,
    RayBuffer,
    Step,
    Stream,
    StreamConfig,
    StreamError,
)
from py_wire.streaming import ray_buffer as ray_module
from py_wire.streaming import tq as tq_module
from py_wire.streaming.tq import TQBuffer
from py_wire.synth.registry import generate
from tests.helpers import small_text_batch, small_vlm_batch
from tests.streaming.conftest import tq_running

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

#: TQ's sampler default; each stream sends its own config with its takes.
SAMPLER = StreamConfig(max_staleness=1, batch_groups=1)
_PARTITIONS = itertools.count()


@pytest.fixture(scope="module", params=["ray", "tq"])
def backend(request: pytest.FixtureRequest) -> Iterator[str]:
    if request.param == "tq":
        with tq_running(SAMPLER):
            yield "tq"
        return
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, log_to_driver=False)
    try:
        yield "ray"
    finally:
        ray.shutdown()


@pytest.fixture
def make(backend: str) -> Iterator[Callable[[StreamConfig], Stream]]:
    """Builds a stream of ``config`` on the module's backend: the one line that differs."""
    built: list[Stream] = []

    def build(config: StreamConfig) -> Stream:
        stream: Stream
        if backend == "ray":
            stream = RayBuffer(config)
        else:
            stream = TQBuffer(config, partition_id=f"contract-{next(_PARTITIONS)}")
        built.append(stream)
        return stream

    yield build
    for stream in built:
        with contextlib.suppress(Exception):
            stream.close()


@pytest.fixture
def step_module(backend: str) -> Any:
    """The backend's module, whose ``step_frame`` a test replaces by a refusal."""
    return ray_module if backend == "ray" else tq_module


def text_group(group: float, version: int, **metadata: str) -> py_wire.Frame:
    batch: dict[str, Any] = small_text_batch((3, 4))
    batch["reward"] = torch.full((2,), float(group))
    meta = {"policy_version": str(version), **metadata}
    return py_wire.encode(batch, "text_grpo", metadata=meta)


def nemo_group(version: int, **metadata: str) -> py_wire.Frame:
    """A group of NeMo-RL's schema: no per-row policy_version field, so steps of one version."""
    batch = generate("nemo_rl/text", 2, seed=version)
    meta = {"policy_version": str(version), **metadata}
    return py_wire.encode(batch, "nemo_rl/text", metadata=meta)


def rewards(frame: py_wire.Frame | None) -> list[float]:
    assert frame is not None
    return [float(r) for r in py_wire.decode(frame)["reward"].tolist()]


def produce(stream: Stream, group: float, version: int | None = None) -> str:
    """The producer loop's body: a slot, a generated group, its put."""
    gid, got = stream.reserve(version, timeout_s=60)
    stream.put(gid, text_group(group, got), timeout_s=60)
    return gid


def test_one_trainer_loop_runs_unchanged_on_every_backend(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """Producers fill the window at the trainer's version; the trainer takes a step across
    two ranks, trains, moves its version on and acks. Every group trains exactly once, at a
    lag within the bound, and the counts agree."""
    config = StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0)
    stream = make(config)
    trained: list[float] = []
    lags: list[int] = []
    for step_index in range(3):
        for g in range(2):
            produce(stream, 10 * step_index + g)
        step = stream.take(ranks=2, timeout_s=60)
        assert isinstance(step, Step) and len(step.frames) == 2
        assert [len(ids) for ids in step.group_ids] == [1, 1]
        for frame, versions in zip(step.frames, step.versions, strict=True):
            trained += rewards(frame)[::2]
            lags += [step_index - v for v in versions]
        stream.set_trainer_version(step_index + 1)
        assert stream.ack(step) is True
    assert sorted(trained) == [0, 1, 10, 11, 20, 21]
    assert all(0 <= lag <= config.max_staleness for lag in lags)
    stats = stream.stats()
    assert stats["delivered"] == stats["acked"] == 6
    assert stats["open_groups"] == 0 and stats["trainer_version"] == 3


def test_a_group_of_other_caller_metadata_is_refused_at_put_naming_it(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """Issue 46's two producers that encode ``worker="a"`` and ``"b"``: the second put is
    refused naming the group and the key (a step joins its groups into one frame, whose
    metadata holds one value per key), its reservation still usable; the step trains, and
    only then counts as delivered."""
    stream = make(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    first, _ = stream.reserve(0)
    second, _ = stream.reserve(0)
    stream.put(first, nemo_group(0, worker="a"))
    with pytest.raises(StreamError, match=rf"group {second}: .*'worker' is 'b', but 'a'"):
        stream.put(second, nemo_group(0, worker="b"))
    stream.put(second, nemo_group(0, worker="a"))
    step = stream.take(timeout_s=60)
    assert step.frames[0] is not None and step.frames[0].metadata["worker"] == "a"
    assert stream.ack(step)
    stats = stream.stats()
    assert stats["delivered"] == stats["acked"] == 2 and stats["open_groups"] == 0


def test_a_frame_stating_another_version_than_its_group_is_refused(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1))
    gid, version = stream.reserve(0)
    with pytest.raises(StreamError, match=rf"group {gid}: .*policy_version='1', but the group"):
        stream.put(gid, text_group(0.0, 1))
    stream.put(gid, text_group(0.0, version))


def test_a_group_of_another_schema_is_refused_at_put_by_name(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    first, _ = stream.reserve(0)
    second, _ = stream.reserve(0)
    stream.put(first, text_group(0.0, 0))
    other = py_wire.encode(small_vlm_batch(), "qwen2_5_vl", metadata={"policy_version": "0"})
    with pytest.raises(py_wire.SchemaError, match=rf"group {second}: .*'qwen2_5_vl'"):
        stream.put(second, other)
    stream.put(second, text_group(1.0, 0))  # its reservation is still the producer's
    step = stream.take(timeout_s=60)
    assert sorted(rewards(step.frames[0])) == [0.0, 0.0, 1.0, 1.0]
    assert stream.ack(step)


def test_a_put_without_a_reservation_is_refused(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1))
    with pytest.raises(StreamError, match="group nobody"):
        stream.put("nobody", text_group(0.0, 0))
    assert stream.stats()["open_groups"] == 0


def test_a_take_refused_after_its_lease_gives_its_groups_back_and_counts_nothing(
    make: Callable[[StreamConfig], Stream], step_module: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step frame is refused (a stand-in for any refusal after the lease): the next take
    gets the same groups at once, not after the 60 s lease, and ``delivered`` counts only the
    take that reached the trainer."""
    stream = make(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    for g in range(2):
        produce(stream, g, 0)

    def refuse(groups: list[py_wire.Frame]) -> py_wire.Frame:
        raise StreamError("refused")

    monkeypatch.setattr(step_module, "step_frame", refuse)
    with pytest.raises(StreamError, match="refused"):
        stream.take(timeout_s=30)
    assert stream.stats()["delivered"] == 0
    monkeypatch.undo()
    step = stream.take(timeout_s=5)
    assert step.versions == [[0, 0]] and stream.ack(step)
    stats = stream.stats()
    assert stats["delivered"] == stats["acked"] == 2 and stats["lease_returns"] == 2


def test_a_released_step_is_free_at_once_and_not_delivered(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0))
    produce(stream, 7.0, 0)
    first = stream.take(timeout_s=60)
    stream.release(first)
    second = stream.take(timeout_s=5)
    assert second.group_ids == first.group_ids
    assert stream.ack(second)
    assert stream.ack(first) is False  # its lease ended with the release
    stats = stream.stats()
    assert stats["delivered"] == stats["acked"] == 1


def test_a_lapsed_lease_gives_its_groups_back_and_its_ack_says_so(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0))
    produce(stream, 3.0, 0)
    dead = stream.take(timeout_s=60, lease_s=0.5)  # this trainer dies: no ack
    time.sleep(1.0)
    step = stream.take(timeout_s=60)
    assert step.group_ids == dead.group_ids and rewards(step.frames[0]) == [3.0, 3.0]
    assert stream.ack(dead) is False
    assert stream.ack(step) is True
    assert stream.stats()["lease_returns"] == 1


def test_the_default_policy_never_trains_a_group_past_the_bound(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """k = 1: a trainer took the version-0 group and died; the group came back when the
    trainer was at version 5: it is dropped and counted, never trained; and a reservation
    at a version already past the bound is refused."""
    stream = make(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0))
    produce(stream, 0.0, 0)
    stream.take(timeout_s=60, lease_s=0.5)  # this trainer dies: no ack
    stream.set_trainer_version(5)
    time.sleep(1.0)
    gid, version = stream.reserve()
    assert version == 5
    stream.put(gid, text_group(5.0, version))
    step = stream.take(timeout_s=60)
    assert step.versions == [[5]] and stream.ack(step)
    stats = stream.stats()
    assert stats["dropped_stale"] == 1 and stats["lease_returns"] == 1
    assert stats["open_groups"] == 0
    with pytest.raises(StreamError, match="version 0 is past the staleness bound"):
        stream.reserve(version=0)


def test_a_step_of_one_version_that_waits_says_the_versions_differ(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """NeMo-RL's schema has no per-row version: groups of versions 0 and 1 (bound 1) make no
    step, and the timeout says that two are ready but of different versions, not that too
    few are; a second group of version 1 makes the step."""
    stream = make(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    gid, _ = stream.reserve(0)
    stream.put(gid, nemo_group(0))
    stream.set_trainer_version(1)
    gid, _ = stream.reserve(1)
    stream.put(gid, nemo_group(1))
    with pytest.raises(AdmissionTimeout, match=r"2 groups are ready .*different versions"):
        stream.take(timeout_s=1.0)
    gid, _ = stream.reserve(1)
    stream.put(gid, nemo_group(1))
    step = stream.take(timeout_s=60)
    assert step.versions == [[1, 1]]
    assert step.frames[0] is not None and step.frames[0].metadata["policy_version"] == "1"
    assert stream.ack(step)
    stats = stream.stats()
    assert stats["open_groups"] == 1 and stats["delivered"] == stats["acked"] == 2


def test_a_sample_of_another_schema_or_metadata_is_refused_at_put_by_name(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1))
    gid, _ = stream.reserve(0)
    stream.put(gid, text_group(0.0, 0))  # the stream's schema: text_grpo
    gid, _ = stream.reserve(0, samples=2)
    with pytest.raises(py_wire.SchemaError, match=rf"group {gid}, sample 0: .*'qwen2_5_vl'"):
        stream.put(gid, vlm_sample(), sample=0)
    row = text_sample(run="r2")
    with pytest.raises(StreamError, match=rf"group {gid}, sample 0: .*'run' is 'r2', but"):
        stream.put(gid, row, sample=0)
    stats = stream.stats()
    assert stats["open_groups"] == 2 and stats["stored_bytes"] == text_group(0.0, 0).nbytes


def test_a_second_put_of_a_group_is_refused_and_the_first_kept(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0))
    gid = produce(stream, 1.0, 0)
    with pytest.raises(StreamError, match=f"group {gid}"):
        stream.put(gid, text_group(2.0, 0))
    step = stream.take(timeout_s=60)
    assert rewards(step.frames[0]) == [1.0, 1.0] and stream.ack(step)


def test_samples_put_apart_train_as_their_group_with_the_streams_metadata(
    make: Callable[[StreamConfig], Stream],
) -> None:
    stream = make(StreamConfig(max_staleness=1, batch_groups=1, lease_s=60.0))
    gid, version = stream.reserve(0, samples=2)
    for index in (1, 0):  # in any order
        stream.put(gid, text_sample(version, run="r1"), sample=index)
    step = stream.take(timeout_s=60)
    assert step.group_ids == [[gid]] and step.versions == [[0]]
    assert step.frames[0] is not None and step.frames[0].num_rows == 2
    assert step.frames[0].metadata["run"] == "r1"
    assert stream.ack(step)


def text_sample(version: int = 0, **metadata: str) -> py_wire.Frame:
    """One sample (one row) of a text_grpo group."""
    batch = {k: v[:1] for k, v in small_text_batch((3,)).items()}  # type: ignore[index]
    return py_wire.encode(batch, "text_grpo", metadata={"policy_version": str(version), **metadata})


def vlm_sample() -> py_wire.Frame:
    batch = small_vlm_batch()
    row = {k: v[:1] for k, v in batch.items()}  # type: ignore[index]
    return py_wire.encode(row, "qwen2_5_vl", metadata={"policy_version": "0"})


def test_reserve_and_put_stores_a_finished_group_in_one_call(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """A group generated before it asked for a slot (a verl sample) goes in with one call, at
    the version its frame states; refused as reserve and put refuse (no version stated, past
    the bound, another schema), a full window waits, and nothing is reserved by a refusal."""
    stream = make(StreamConfig(max_staleness=0, batch_groups=1, admission_timeout_s=0.5))
    gid, version = stream.reserve_and_put(text_group(5.0, 0), timeout_s=30)
    assert version == 0 and isinstance(gid, str)
    unversioned = py_wire.encode(small_text_batch((3, 4)), "text_grpo")
    with pytest.raises(StreamError, match="policy_version=None is no version"):
        stream.reserve_and_put(unversioned)
    with pytest.raises(AdmissionTimeout, match=r"waited 0.5 s"):  # the window (1) is full
        stream.reserve_and_put(text_group(6.0, 0))
    step = stream.take(timeout_s=30)
    assert step.group_ids == [[gid]] and rewards(step.frames[0]) == [5.0, 5.0]
    stream.set_trainer_version(2)
    assert stream.ack(step)
    with pytest.raises(StreamError, match="past the staleness bound"):
        stream.reserve_and_put(text_group(6.0, 1))
    other = py_wire.encode(small_vlm_batch(), "qwen2_5_vl", metadata={"policy_version": "2"})
    with pytest.raises(py_wire.SchemaError, match="'qwen2_5_vl'"):
        stream.reserve_and_put(other)
    stats = stream.stats()
    assert stats["open_groups"] == 0
    assert (stats["reserved"], stats["stored"], stats["acked"]) == (1, 1, 1)


def test_more_ranks_than_groups_leave_the_last_ranks_empty(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """A step of 2 groups over 4 ranks: each of the first two ranks gets a group, the last
    two get none (a None frame, no group ids), on every backend."""
    stream = make(StreamConfig(max_staleness=1, batch_groups=2, lease_s=60.0))
    for g in range(2):
        produce(stream, float(g), 0)
    step = stream.take(ranks=4, timeout_s=60)
    assert [f is None for f in step.frames] == [False, False, True, True]
    assert [len(ids) for ids in step.group_ids] == [1, 1, 0, 0]
    assert step.versions[2:] == [[], []]
    assert sorted(r for f in step.frames[:2] for r in rewards(f)[::2]) == [0.0, 1.0]
    assert stream.ack(step)


def test_stats_count_reservations_stores_and_lapses(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """``reserved``, ``stored`` and ``abandoned`` on every backend: three reservations, two
    put (one of them trained and acked), one left to lapse."""
    stream = make(StreamConfig(max_staleness=2, batch_groups=1, reservation_s=1.0))
    produce(stream, 1.0, 0)
    produce(stream, 2.0, 0)
    stream.reserve(0, timeout_s=30)  # its producer dies
    assert stream.ack(stream.take(timeout_s=30))
    time.sleep(1.2)
    stats = stream.stats()
    assert (stats["reserved"], stats["stored"], stats["abandoned"]) == (3, 2, 1)
    assert (stats["acked"], stats["open_groups"]) == (1, 1)
