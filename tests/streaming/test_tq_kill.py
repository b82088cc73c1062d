"""Kill a trainer and a producer mid-call on real TransferQueue: every committed group is
trained exactly once, nothing twice, and no lease outlives ``lease_s``.

The dying processes are Ray actors that call ``os._exit`` at a chosen point inside a TQ call:
a trainer after the sampler leased its step (before it fetched the data) or after its take
(before ``ack``); a producer after its group's column reached TQ's storage (before TQ set the
group's tags) or before it did. The window is one group (``max_staleness=0``,
``batch_groups=1``), so a group a dead trainer holds is the only one there is."""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator
from typing import Any

import pytest
import ray
import transfer_queue as tq

from py_wire.streaming import AdmissionTimeout, StreamConfig
from py_wire.streaming.tq import TQStream
from tests.streaming.conftest import tq_running
from tests.streaming.test_tq import frame, groups_of

# Ray start-up on a loaded 2-core machine can take minutes (spawned processes: see markers).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

CONFIG = StreamConfig(max_staleness=0, batch_groups=1, lease_s=2.0, reservation_s=1.0)
#: What a lease may outlive ``lease_s`` by: the survivor's polling, and a loaded machine.
SLACK_S = 2.0


@pytest.fixture(scope="module", autouse=True)
def tq_session() -> Iterator[None]:
    with tq_running(CONFIG):
        yield


@ray.remote(max_restarts=0, num_cpus=0)
class Doomed:
    """A producer or trainer process on the module's TQ, dying where it is told to."""

    def __init__(self, partition: str) -> None:
        logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
        tq.init()
        self.stream = TQStream(CONFIG, partition_id=partition)
        self.client: Any = tq.get_client()

    def put_and_die(self, group: int, after_data: bool) -> None:
        key = f"g{group}"
        self.stream.reserve(key, 0, timeout_s=30)

        storage = self.client.storage_manager
        put_data = storage.put_data

        async def die(*args: object, **kwargs: object) -> None:
            if after_data:  # TQ stores the column, then sets the tags: die between the two
                await put_data(*args, **kwargs)
            os._exit(1)

        storage.put_data = die
        self.stream.put([key], [frame(group, 0)], [0])

    def take_and_die(self, before_ack: bool) -> None:
        if not before_ack:  # the sampler leased the step; die fetching its data
            self.client.get_data = lambda *args, **kwargs: os._exit(1)
        _, got = self.stream.take(0, step=0, timeout_s=30)
        assert groups_of(got) == [0]
        os._exit(1)


def produce(stream: TQStream, group: int) -> None:
    stream.reserve(f"g{group}", 0, timeout_s=30)
    stream.put([f"g{group}"], [frame(group, 0)], [0])


def group_0_back(stream: TQStream, stuck: str) -> Any:
    """Step 1, taken just after a trainer died holding group 0: it must hold group 0, within
    ``lease_s`` (and a bit) of now. Its ``BatchMeta``."""
    died = time.monotonic()
    try:
        meta, got = stream.take(0, step=1, timeout_s=CONFIG.lease_s + 10)
    except AdmissionTimeout as e:
        raise AssertionError(f"{stuck}: {e}") from None
    back_s = time.monotonic() - died
    assert groups_of(got) == [0]
    assert back_s <= CONFIG.lease_s + SLACK_S, f"the lease came back after {back_s:.1f} s"
    return meta


def groups_left(partition: str) -> set[str]:
    """The group keys still in the partition."""
    listed = tq.kv_list(partition_id=partition).get(partition, {})
    return {key for key in listed if key in ("g0", "g1")}


def train_all(stream: TQStream, first_step: int) -> list[int]:
    """Takes and acks steps until none comes within a lease and a bit (so a group handed out
    twice, or a lease that came back, would show); the groups trained."""
    trained: list[int] = []
    for step in range(first_step, first_step + 10):
        try:
            meta, got = stream.take(0, step=step, timeout_s=CONFIG.lease_s + SLACK_S)
        except AdmissionTimeout:
            return trained
        trained.extend(groups_of(got))
        stream.ack(meta)
    raise AssertionError(f"steps kept coming: {trained}")


@pytest.mark.parametrize("before_ack", [False, True], ids=["mid-take", "before-ack"])
def test_a_trainer_killed_holding_the_only_group_gives_it_back_after_the_lease(
    before_ack: bool,
) -> None:
    """The trainer dies holding the window's one group; no other row is ready, so nothing
    but the lease's end can give it back, and producers wait for its slot. After ``lease_s``
    the next trainer trains it, once, and the producers go on."""
    partition = f"trainer-{'before-ack' if before_ack else 'mid-take'}"
    stream = TQStream(CONFIG, partition_id=partition)
    produce(stream, 0)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Doomed.remote(partition).take_and_die.remote(before_ack))
    stream.ack(group_0_back(stream, "the dead trainer's lease never ended"))
    produce(stream, 1)  # its slot is free again
    assert [0, *train_all(stream, first_step=2)] == [0, 1]
    assert groups_left(partition) == set()


def test_a_restarted_trainer_that_retakes_the_dead_ones_step_and_dies_gives_it_back_too() -> None:
    """A trainer dies holding step 0; its restart takes step 0 again (the step its checkpoint
    is at) after the lease ran out, and dies too. That second hand-out holds a lease as well:
    the group comes back ``lease_s`` later and trains once."""
    partition = "restarted"
    stream = TQStream(CONFIG, partition_id=partition)
    produce(stream, 0)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Doomed.remote(partition).take_and_die.remote(True))
    time.sleep(CONFIG.lease_s + 0.5)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Doomed.remote(partition).take_and_die.remote(True))  # step 0 again
    stream.ack(group_0_back(stream, "the second hand-out held no lease"))
    assert train_all(stream, first_step=2) == []
    assert groups_left(partition) == set()


@pytest.mark.parametrize("after_data", [False, True], ids=["before-data", "after-data"])
def test_a_producer_killed_mid_put_leaves_its_group_whole_or_not_at_all(
    after_data: bool,
) -> None:
    """The producer dies inside its put. Before its column reached TQ nothing of the group is
    visible and its reservation lapses. After, the group is in TQ whole (only its tags are
    still the reservation's) and is committed: it is trained once, however long after its
    reservation lapsed the trainer comes. Either way a survivor's group trains once."""
    partition = f"producer-{'after-data' if after_data else 'before-data'}"
    stream = TQStream(CONFIG, partition_id=partition)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(Doomed.remote(partition).put_and_die.remote(1, after_data))
    listed = tq.kv_list(partition_id=partition)[partition]
    assert listed["g1"]["state"] == "reserved"  # died before TQ set its stored tags
    time.sleep(CONFIG.reservation_s + 0.5)  # the trainer comes after the reservation lapsed
    produce(stream, 0)
    trained = train_all(stream, first_step=0)
    assert sorted(trained) == ([0, 1] if after_data else [0])
    assert groups_left(partition) <= (set() if after_data else {"g1"})  # the lapsed reservation
