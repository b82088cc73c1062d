"""Issue 40, items 1 and 4, through real Ray (``RayBuffer``): a group or sample of another
schema is refused at its put with a ``SchemaError`` naming it (not at the take that would have
leased it), its reservation still usable; under the default policy a group whose lease lapsed
until it was 5 versions old, or reserved with version 0 when the trainer is at 10, is never
trained."""

from __future__ import annotations

import time

import pytest

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig, StreamError
from tests.helpers import small_vlm_batch
from tests.streaming.test_hardening_round4 import text_group, vlm_sample

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.usefixtures("ray_session")]


def test_a_group_or_sample_of_another_schema_is_refused_at_put_by_name() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=2))
    first, _ = buffer.reserve(0)
    second, _ = buffer.reserve(0)
    buffer.put(first, text_group(0.0))
    with pytest.raises(py_wire.SchemaError, match=f"group {second}: .*'qwen2_5_vl'"):
        buffer.put(second, py_wire.encode(small_vlm_batch(), "qwen2_5_vl"))
    buffer.put(second, text_group(1.0))  # its reservation is still the producer's
    step = buffer.take(timeout_s=30)
    assert step.frames[0] is not None
    assert py_wire.decode(step.frames[0])["reward"].tolist() == [0.0, 0.0, 1.0, 1.0]
    assert buffer.ack(step)

    gid, _ = buffer.reserve(1, samples=2)
    with pytest.raises(py_wire.SchemaError, match=f"group {gid}, sample 0: .*'qwen2_5_vl'"):
        buffer.put(gid, vlm_sample(0), sample=0)
    stats = buffer.stats()
    assert stats["stored"] == 2 and stats["open_groups"] == 1 and stats["stored_bytes"] == 0


def test_the_default_policy_never_trains_a_group_past_the_bound() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=1, lease_s=0.5))
    gid, _ = buffer.reserve(0)
    buffer.put(gid, text_group(0.0))
    buffer.take(timeout_s=30)  # this trainer dies: no ack
    buffer.set_trainer_version(5)
    time.sleep(0.7)  # its lease lapses; the group comes back 5 versions old
    gid, version = buffer.reserve()
    assert version == 5
    buffer.put(gid, text_group(5.0, version=5))
    step = buffer.take(timeout_s=30)
    assert step.versions == [[5]]  # lag 0: the lag-5 group was dropped
    assert buffer.ack(step)
    stats = buffer.stats()
    assert stats["dropped_stale"] == 1 and stats["lease_returns"] == 1
    assert stats["open_groups"] == 0

    buffer.set_trainer_version(10)
    with pytest.raises(StreamError, match="version 0 is past the staleness bound"):
        buffer.reserve(version=0)
    assert buffer.stats()["open_groups"] == 0
