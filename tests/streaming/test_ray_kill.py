"""Kill a consumer and a producer mid-step on a real Ray: nothing lost, nothing doubled.

A consumer (a Ray actor) takes a step's groups and dies before it acks: after the lease they
come back, and the trainer trains each exactly once. A producer dies between reserving its slot
and committing its frame: no partial group is ever visible, its reservation
lapses, and every committed group is trained once."""

from __future__ import annotations

import os
import threading
import time

import pytest
import ray
import torch

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig
from py_wire.streaming.ray_buffer import CALL_WAIT_S
from py_wire.testing import assert_batch_equal
from tests.helpers import small_text_batch

# Ray start-up on a loaded 2-core machine can take minutes (spawned processes: see markers).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400), pytest.mark.usefixtures("ray_session")]


def group_batch(group: int, lengths: tuple[int, int] = (3, 4)) -> dict[str, object]:
    """A 2-row group whose rows carry the group id in ``reward`` (to find doubles)."""
    batch = small_text_batch(lengths)
    batch["reward"] = torch.full((2,), float(group))
    batch["input_ids"] = [ids + 100 * group for ids in batch["input_ids"]]  # type: ignore[attr-defined]
    return batch


def group_frame(group: int, version: int, lengths: tuple[int, int] = (3, 4)) -> py_wire.Frame:
    batch = group_batch(group, lengths)
    return py_wire.encode(batch, "text_grpo", metadata={"policy_version": str(version)})


@ray.remote(max_restarts=0)
class Producer:
    def __init__(self, buffer: RayBuffer) -> None:
        self.buffer = buffer

    def produce(self, group: int, version: int, lengths: tuple[int, int] = (3, 4)) -> None:
        gid, _ = self.buffer.reserve(version, timeout_s=30)
        self.buffer.put(gid, group_frame(group, version, lengths))

    def exit(self) -> None:
        os._exit(1)

    def die_mid_put(self, group: int, version: int) -> None:
        self.buffer.reserve(version, timeout_s=30)
        group_frame(group, version)  # generated, never committed
        os._exit(1)

    def die_while_put_waits(self, group: int, version: int) -> None:
        """Dies while its put waits inside the buffer for byte budget."""
        gid, _ = self.buffer.reserve(version, timeout_s=30)
        frame = group_frame(group, version)
        threading.Thread(target=self.buffer.put, args=(gid, frame, 30.0), daemon=True).start()
        time.sleep(1.0)
        os._exit(1)


@ray.remote(max_restarts=0)
class Consumer:
    def __init__(self, buffer: RayBuffer) -> None:
        self.buffer = buffer

    def take_and_die(self) -> None:
        step = self.buffer.take(ranks=1, timeout_s=30)
        assert step.frames[0] is not None
        os._exit(1)  # dies mid-step: no ack

    def die_once_leased(self) -> None:
        """Dies inside its take: once the buffer has leased the step (its ``delivered`` count
        moved), while the frames are fetched or just after, never acking."""
        threading.Thread(target=self.buffer.take, args=(1, 30.0), daemon=True).start()
        deadline = time.monotonic() + 30
        while self.buffer.stats()["delivered"] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        os._exit(1)

    def die_while_take_waits(self) -> None:
        """Dies while its take waits inside the buffer for a step (none is ready)."""
        threading.Thread(target=self.buffer.take, args=(1, 30.0), daemon=True).start()
        time.sleep(1.0)
        os._exit(1)


def trained_groups(step: py_wire.streaming.Step) -> list[int]:
    out: list[int] = []
    for frame in step.frames:
        if frame is not None:
            out.extend(int(r) for r in py_wire.decode(frame)["reward"].tolist()[::2])
    return out


def test_a_dying_consumer_loses_nothing_and_doubles_nothing() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=2, lease_s=1.0))
    producers = [Producer.remote(buffer) for _ in range(2)]
    ray.get([producers[i % 2].produce.remote(i, 0) for i in range(4)])
    consumer = Consumer.remote(buffer)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(consumer.take_and_die.remote())
    trained: list[int] = []
    for version in range(2):
        step = buffer.take(ranks=2, timeout_s=30, lease_s=60)
        trained.extend(trained_groups(step))
        assert buffer.ack(step)
        buffer.set_trainer_version(version + 1)
    assert sorted(trained) == [0, 1, 2, 3]
    stats = buffer.stats()
    assert stats["lease_returns"] == 2
    assert stats["acked"] == 4 and stats["open_groups"] == 0 and stats["stored_bytes"] == 0


def test_a_producer_dying_mid_put_leaves_no_partial_group() -> None:
    buffer = RayBuffer(StreamConfig(max_staleness=1, batch_groups=1, reservation_s=1.0))
    doomed = Producer.remote(buffer)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(doomed.die_mid_put.remote(99, 0))
    survivor = Producer.remote(buffer)
    ray.get([survivor.produce.remote(i, 0) for i in range(2)])  # waits for the lapsed slot
    trained: list[int] = []
    for version in range(2):
        step = buffer.take(timeout_s=30)
        trained.extend(trained_groups(step))
        versions = py_wire.decode(step.frames[0])["policy_version"].tolist()  # type: ignore[arg-type]
        assert versions == [0, 0]
        assert buffer.ack(step)
        buffer.set_trainer_version(version + 1)
    assert sorted(trained) == [0, 1]
    stats = buffer.stats()
    assert stats["abandoned"] == 1 and stats["acked"] == 2 and stats["open_groups"] == 0


def _groups_of_a_dead_producer() -> tuple[RayBuffer, tuple[int, int], list[object]]:
    """A buffer holding two groups whose producer put them and died; the store churned with
    objects of the same size, so freed memory would be reused."""
    lengths = (20_000, 30_000)
    buffer = RayBuffer(StreamConfig(max_staleness=0, batch_groups=2))
    producer = Producer.remote(buffer)
    ray.get([producer.produce.remote(i, 0, lengths) for i in range(2)])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(producer.exit.remote())
    time.sleep(3)  # Ray learns of the death and frees what the producer owned
    nbytes = group_frame(0, 0, lengths).nbytes
    assert nbytes > 100 * 1024  # Ray's largest inline argument
    churn = [ray.put(torch.full((nbytes,), 0xAB, dtype=torch.uint8)) for _ in range(4)]
    return buffer, lengths, churn


def _assert_both_groups(step: py_wire.streaming.Step, lengths: tuple[int, int]) -> None:
    assert step.frames[0] is not None
    want: dict[str, object] = {}
    for group in (group_batch(0, lengths), group_batch(1, lengths)):
        for name, value in group.items():
            if isinstance(value, list):
                want[name] = [*want.get(name, []), *value]  # type: ignore[list-item]
            else:
                prev = want.get(name)
                want[name] = value if prev is None else torch.cat([prev, value])  # type: ignore[list-item]
    want["policy_version"] = torch.zeros(4, dtype=torch.int64)
    got = py_wire.decode(step.frames[0], layout="list")
    assert_batch_equal(got, want, py_wire.load_schema("text_grpo"))


def test_a_group_outlives_the_producer_that_put_it() -> None:
    """Groups committed by a producer that then dies are taken whole and bit for bit: the
    producer's object holds the frame, and Ray frees it with its owner unless someone holds
    it; the buffer holds what it read (zero-copy), so the store keeps it. The rows are long
    enough (about 1 MB a frame) for the frame to be an object of its own in the store."""
    buffer, lengths, churn = _groups_of_a_dead_producer()
    step = buffer.take(timeout_s=30)
    _assert_both_groups(step, lengths)
    assert buffer.ack(step)
    assert buffer.stats()["rehomed"] == 0  # served from the producer's own objects
    del churn


def test_a_dead_producers_group_that_ray_cannot_serve_is_stored_anew(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Where Ray cannot serve a dead producer's object to the trainer (the trainer on another
    node than the copy the buffer pinned; forced here by failing the step's first fetch with
    the error Ray raises then), the buffer stores its pinned frames anew, owned by itself, and
    the step is still whole and bit for bit. The one failure here forced through a private
    function: Ray raises it only across nodes, and this cluster has one."""
    from py_wire.streaming import ray_buffer

    buffer, lengths, churn = _groups_of_a_dead_producer()
    fetch = ray_buffer._fetch
    failed: list[int] = []

    def fetch_failing_once(refs: list[object]) -> list[py_wire.Frame]:
        if not failed:
            failed.append(len(refs))
            raise ray.exceptions.OwnerDiedError(refs[0].hex(), None, "")  # type: ignore[attr-defined]
        return fetch(refs)  # type: ignore[arg-type]

    monkeypatch.setattr(ray_buffer, "_fetch", fetch_failing_once)
    step = buffer.take(timeout_s=30)
    assert failed == [2]
    _assert_both_groups(step, lengths)
    assert buffer.stats()["rehomed"] == 2
    assert buffer.ack(step)
    assert buffer.stats()["open_groups"] == 0
    del churn


#: What a lease may outlive ``lease_s`` by: the survivor's calls, on a loaded machine.
SLACK_S = 5.0


def test_a_consumer_dying_mid_take_gives_its_groups_back_within_the_lease() -> None:
    """The consumer dies inside ``take``, after the buffer leased the step's groups (the only
    ones: the window is full), while it fetches them or just after, never acking. They come
    back ``lease_s`` after the lease began, and the next consumer trains each once."""
    config = StreamConfig(max_staleness=0, batch_groups=2, lease_s=2.0)
    buffer = RayBuffer(config)
    producer = Producer.remote(buffer)
    ray.get([producer.produce.remote(i, 0) for i in range(2)])
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Consumer.remote(buffer).die_once_leased.remote())
    died = time.monotonic()
    step = buffer.take(timeout_s=30)
    back_s = time.monotonic() - died
    assert sorted(trained_groups(step)) == [0, 1]
    assert back_s <= config.lease_s + SLACK_S, f"the lease came back after {back_s:.1f} s"
    assert buffer.ack(step)
    stats = buffer.stats()
    assert stats["lease_returns"] == 2 and stats["acked"] == 2 and stats["open_groups"] == 0


def test_a_consumer_dying_while_its_take_waits_holds_nothing_past_a_call_and_a_lease() -> None:
    """The consumer dies while its ``take`` waits inside the buffer; the groups are put after
    its death. Its call may still lease them (a call waits at most ``CALL_WAIT_S`` in the
    buffer), and then they come back after ``lease_s``: never later than the two, and the
    next consumer trains each once."""

    config = StreamConfig(max_staleness=0, batch_groups=2, lease_s=2.0)
    buffer = RayBuffer(config)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Consumer.remote(buffer).die_while_take_waits.remote())
    died = time.monotonic()
    producer = Producer.remote(buffer)
    ray.get([producer.produce.remote(i, 0) for i in range(2)])
    step = buffer.take(timeout_s=30)
    back_s = time.monotonic() - died
    assert sorted(trained_groups(step)) == [0, 1]
    assert back_s <= CALL_WAIT_S + config.lease_s + SLACK_S, f"back after {back_s:.1f} s"
    assert buffer.ack(step)
    stats = buffer.stats()
    assert stats["lease_returns"] in (0, 2)  # 2 when the dead consumer's call leased them
    assert stats["acked"] == 2 and stats["open_groups"] == 0


def test_a_producer_dying_while_its_put_waits_commits_whole_or_not_at_all() -> None:
    """A producer dies while its put waits inside the buffer for byte budget. When the
    trainer acks and makes room, its call (still waiting, up to ``CALL_WAIT_S``) commits the
    group, whose frame is a small object of the dead producer: it is trained once, bit for
    bit. Should the call have ended first, the reservation lapses and nothing is left.
    Nothing is trained twice and the buffer ends empty either way."""
    nbytes = group_frame(0, 0).nbytes
    config = StreamConfig(max_staleness=1, batch_groups=1, max_bytes=nbytes, reservation_s=3.0)
    buffer = RayBuffer(config)
    ray.get(Producer.remote(buffer).produce.remote(0, 0))
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Producer.remote(buffer).die_while_put_waits.remote(1, 0))
    step = buffer.take(timeout_s=30)
    trained = trained_groups(step)
    assert buffer.ack(step)  # room for the waiting put
    # Either the dead producer's waiting call commits its group, or the call ends and the
    # reservation lapses: wait for whichever comes (a fixed sleep read a commit that came late
    # under load as none).
    deadline = time.monotonic() + CALL_WAIT_S + config.reservation_s + 30
    while (seen := buffer.stats())["stored"] < 2 and seen["abandoned"] == 0:
        assert time.monotonic() < deadline, f"neither committed nor lapsed: {seen}"
        time.sleep(0.1)
    committed = seen["stored"]
    if committed == 2:
        step = buffer.take(timeout_s=30)
        trained.extend(trained_groups(step))
        want = {**group_batch(1), "policy_version": torch.zeros(2, dtype=torch.int64)}
        got = py_wire.decode(step.frames[0], layout="list")  # type: ignore[arg-type]
        assert_batch_equal(got, want, py_wire.load_schema("text_grpo"))
        assert buffer.ack(step)
    assert trained == [0, 1][:committed]
    stats = buffer.stats()
    assert stats["acked"] == committed and stats["abandoned"] == 2 - committed
    assert stats["open_groups"] == 0 and stats["stored_bytes"] == 0
