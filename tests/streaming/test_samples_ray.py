"""Samples that arrive apart on real Ray: producers in their own processes stream one sample at
a time, in any order; the buffer actor stores each prompt's images once, commits a group with
its last sample, and a producer that dies halfway through a group leaves nothing visible."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest
import ray

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig
from py_wire.testing import assert_batch_equal
from tests.streaming.test_samples import G, prompt_group, sample_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.usefixtures("ray_session")]


@ray.remote(max_restarts=0)
class Rollout:
    """A rollout worker that streams the samples it was given, each as it finishes."""

    def __init__(self, buffer: RayBuffer) -> None:
        self.buffer = buffer

    def stream(self, work: list[tuple[str, int, int, int]]) -> None:
        for gid, seed, version, index in work:
            frame = sample_frame(
                prompt_group(seed), index, metadata={"policy_version": str(version)}
            )
            self.buffer.put(gid, frame, sample=index)

    def warm(self, seed: int) -> None:
        sample_frame(prompt_group(seed), 0)  # imports and first encode paid before the clock

    def die_after(self, gid: str, seed: int, index: int) -> None:
        self.buffer.put(gid, sample_frame(prompt_group(seed), index), sample=index)
        os._exit(1)  # the group's other samples never come


def test_samples_streamed_by_three_producers_store_each_prompts_images_once() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=2, max_bytes=2**28))
    seeds = [11, 12]
    slots = [buffer.reserve(samples=G) for _ in seeds]
    work = [
        (slot[0], seed, slot[1], i)
        for slot, seed in zip(slots, seeds, strict=True)
        for i in range(G)
    ]
    workers = [Rollout.remote(buffer) for _ in range(3)]
    ray.get([w.stream.remote(work[k::3]) for k, w in enumerate(workers)])
    stats = buffer.stats()
    whole = [py_wire.encode(prompt_group(s), "qwen2_5_vl") for s in seeds]
    assert stats["stored"] == 2 and stats["media_parts"] == 2
    assert stats["stored_bytes"] < 1.1 * sum(w.nbytes for w in whole)
    step = buffer.take(ranks=1, timeout_s=60)
    frame = step.frames[0]
    assert frame is not None
    decoded = py_wire.decode(frame)
    # Groups come oldest first: in reservation order.
    expected = py_wire.decode(py_wire.concat(whole))
    assert_batch_equal(
        {k: v for k, v in decoded.items() if k != "policy_version"}, expected, frame.schema
    )
    assert decoded["policy_version"].tolist() == [0] * (2 * G)
    assert buffer.ack(step)
    assert buffer.stats()["stored_bytes"] == 0 and buffer.stats()["media_parts"] == 0


def test_a_producer_dying_halfway_through_a_group_leaves_nothing_visible() -> None:
    config = StreamConfig(max_staleness=0, batch_groups=1, reservation_s=3.0)
    buffer = RayBuffer(config)
    worker = Rollout.remote(buffer)
    ray.get(worker.warm.remote(13))
    gid, _ = buffer.reserve(samples=2)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(worker.die_after.remote(gid, 13, 0))
    assert buffer.stats()["stored_bytes"] > 0  # sample 0 is in; the group is not
    with pytest.raises(py_wire.streaming.AdmissionTimeout):
        buffer.take(ranks=1, timeout_s=0.5)
    time.sleep(3.5)
    stats: dict[str, Any] = buffer.stats()
    assert stats["abandoned"] == 1 and stats["stored_bytes"] == 0 and stats["delivered"] == 0


def test_reserve_refuses_a_bad_sample_count_by_name() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=0, batch_groups=1))  # one actor for them all
    for samples in [0, -1, 2**40, True, "4", 1.5, [4]]:
        with pytest.raises((py_wire.WireError, TypeError), match="samples"):
            buffer.reserve(samples=samples)  # type: ignore[arg-type]
    assert buffer.stats()["reserved"] == 0


def test_put_refuses_a_bad_sample_index_by_name() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=0, batch_groups=1))
    gid, _ = buffer.reserve(samples=2)
    frame = sample_frame(prompt_group(14), 0)
    for sample in [-1, 2, True, "0"]:
        with pytest.raises((py_wire.WireError, TypeError), match="sample"):
            buffer.put(gid, frame, sample=sample)  # type: ignore[arg-type]
    # A group reserved for samples, put as one frame: refused too.
    with pytest.raises(py_wire.streaming.StreamError, match="sample=i"):
        buffer.put(gid, py_wire.encode(prompt_group(14), "qwen2_5_vl"))
    with pytest.raises(TypeError, match="frame"):
        buffer.put(gid, b"not a frame", sample=0)  # type: ignore[arg-type]
    assert buffer.stats()["stored_bytes"] == 0


def test_long_and_short_samples_of_one_group_come_back_bit_for_bit() -> None:
    """Ray sends a call's argument up to 100 KiB inline and a longer one (a long answer's text
    part) through its object store. A group with samples of both kinds, put out of order, is
    rebuilt whole, in sample order."""
    from py_wire.streaming import _samples
    from py_wire.synth.qwen import qwen2_5_vl_batch

    inline_bytes = 100 * 1024  # Ray's max_direct_call_object_size

    group = qwen2_5_vl_batch(
        G, seed=26, group_size=G, max_images=2, min_patches=16, max_patches=64, max_response=12000
    )
    frames = [sample_frame(group, i, metadata={"policy_version": "0"}) for i in range(G)]
    sizes = [_samples.split(f)[0].nbytes for f in frames]
    assert min(sizes) <= inline_bytes < max(sizes), sizes  # both kinds in the group
    buffer = RayBuffer(StreamConfig(max_staleness=0, batch_groups=1, max_bytes=2**28))
    gid, _ = buffer.reserve(samples=G)
    for i in (2, 0, 3, 1):
        buffer.put(gid, frames[i], sample=i)
    step = buffer.take(ranks=1, timeout_s=60)
    frame = step.frames[0]
    assert frame is not None
    decoded = py_wire.decode(frame)
    expected = py_wire.decode(py_wire.encode(group, "qwen2_5_vl"))
    assert_batch_equal(
        {k: v for k, v in decoded.items() if k != "policy_version"}, expected, frame.schema
    )
    assert buffer.ack(step)
    assert buffer.stats()["stored_bytes"] == 0
