"""verl 0.9.1's fully-async rollouter and trainer on py_wire's stream
(:class:`py_wire.streaming.verl.VerlQueueClient`): verl's own put path
(``FullyAsyncRollouter._process_single_sample_streaming``: the agent loop's output,
cloudpickled, into ``put_sample``) and get path (``FullyAsyncTrainer._get_samples_from_queue``:
``get_sample`` until a step's samples, ``ray.cloudpickle.loads``, verl's batch assembly), with
the model call faked (the agent loop manager's ``generate_sequences_single`` returns what
verl's own ``AgentLoopWorker._postprocess`` builds). Beside it verl's real ``MessageQueue``,
where a full queue drops the oldest sample."""

from __future__ import annotations

import asyncio
import json
import threading
import time
import types
import uuid
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

with warnings.catch_warnings():  # verl's imports warn of engines and Ray APIs it may not find
    warnings.simplefilter("ignore")
    import ray
    from verl import DataProto
    from verl.experimental.agent_loop.agent_loop import AgentLoopWorker
    from verl.experimental.fully_async_policy.detach_utils import (
        RolloutSample,
        assemble_batch_from_rollout_samples,
    )
    from verl.experimental.fully_async_policy.fully_async_rollouter import FullyAsyncRollouter
    from verl.experimental.fully_async_policy.fully_async_trainer import FullyAsyncTrainer
    from verl.experimental.fully_async_policy.message_queue import (
        MessageQueue,
        MessageQueueClient,
    )

from py_wire import Schema, load_schema
from py_wire.streaming import Stream, StreamConfig, StreamError
from py_wire.streaming.verl import VerlQueueClient, verl_stream_config
from tests.interop.test_verl_agent_loop import _row
from tests.streaming import test_contract

pytestmark = pytest.mark.slow

# The contract suite's backends (a local Ray; TransferQueue on it) and its one line that
# builds a stream on either: every test here runs on both.
backend = test_contract.backend
make = test_contract.make

N = 3  # rollout.n: rows per sample
CONFIG = OmegaConf.create(
    {
        "actor_rollout_ref": {
            "actor": {"ppo_mini_batch_size": 2},
            "rollout": {"n": N, "multi_turn": {"enable": False}},
        },
        "async_training": {
            "require_batches": 1,
            "trigger_parameter_sync_step": 2,
            "staleness_threshold": 1,
        },
        "trainer": {"balance_batch": False},
    }
)


def generated(seed: int, version: int) -> DataProto:
    """A sample's ``N`` trajectories as verl's agent loop returns them, generated at
    ``version`` (min/max_global_steps, as the fully-async agent loop records them)."""
    g = torch.Generator().manual_seed(seed)
    extra = {"min_global_steps": version, "max_global_steps": version}
    rows = [_row(seed * N + i, False, g, dict(extra)) for i in range(N)]
    dataset = {"data_source": np.array(["gsm8k"] * N, dtype=object)}
    worker = types.SimpleNamespace(reward_loop_worker_handles=None)
    out: DataProto = AgentLoopWorker._postprocess(worker, rows, input_non_tensor_batch=dataset)
    return out


def rollouter(client: Any, versions: dict[int, int]) -> Any:
    """verl's ``FullyAsyncRollouter`` (its class, not the Ray actor) with the state its put
    path reads, and the model call faked: sample ``i`` comes back as :func:`generated`."""
    cls = FullyAsyncRollouter.__ray_metadata__.modified_class
    r = cls.__new__(cls)
    r.message_queue_client = client
    r.active_tasks, r.pending_queue = set(), asyncio.Queue()
    r.total_generated_samples = r.staleness_samples = r.dropped_stale_samples = 0
    r.processed_sample_count = r._step_generated_samples = 0
    r.required_samples, r.staleness_threshold = 2, 1
    r.max_required_samples = r.max_queue_size = r.max_concurrent_samples = 8

    async def generate_sequences_single(prompts: DataProto) -> DataProto:
        seed = int(prompts.non_tensor_batch["index"][0])
        return generated(seed, versions.get(seed, 0))

    r.async_rollout_manager = types.SimpleNamespace(
        generate_sequences_single=generate_sequences_single
    )
    return r


def prompt(i: int) -> RolloutSample:
    batch = DataProto.from_dict(non_tensors={"index": np.array([i] * N, dtype=object)})
    return RolloutSample(full_batch=batch, sample_id=f"sample_0_{i}", epoch=0, rollout_status={})


def trainer(client: Any) -> Any:
    cls = FullyAsyncTrainer.__ray_metadata__.modified_class
    t = cls.__new__(cls)
    t.message_queue_client, t.config, t.tokenizer = client, CONFIG, None
    t.required_samples, t.dynamic_schedule_enabled = 2, False
    t._step_wait_times, t._step_wait_samples = [], []
    return t


def verl_batch(samples: list[RolloutSample]) -> DataProto:
    """What verl's own queue hands the trainer for these samples: each cloudpickled and
    loaded, assembled by verl."""
    loaded = [ray.cloudpickle.loads(ray.cloudpickle.dumps(s)) for s in samples]
    out: DataProto = assemble_batch_from_rollout_samples(loaded, None, CONFIG, None)
    return out


def assert_same(got: DataProto, want: DataProto) -> None:
    assert sorted(got.batch.keys()) == sorted(want.batch.keys())
    for k in want.batch.keys():  # noqa: SIM118 (iterating a TensorDict walks its rows)
        assert torch.equal(got.batch[k], want.batch[k].to(got.batch[k].dtype)), k
    assert sorted(got.non_tensor_batch) == sorted(want.non_tensor_batch)
    for k, v in want.non_tensor_batch.items():
        assert got.non_tensor_batch[k].tolist() == v.tolist(), k
    skip = {"fully_async/total_wait_time"}  # a clock reading
    assert {k for k in got.meta_info if k not in skip} == {
        k for k in want.meta_info if k not in skip
    }
    for k in want.meta_info:
        if k not in skip and not k.startswith("fully_async/processing_time"):
            a, b = got.meta_info[k], want.meta_info[k]
            assert np.asarray(a).tolist() == np.asarray(b).tolist(), k


def test_verls_rollouter_and_trainer_run_on_the_stream(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """Six samples through verl's put path, its end signal, three steps through verl's get
    path: each batch is what verl's own queue would have handed over, bit for bit, and the
    fourth step sees the end."""
    stream = make(verl_stream_config(CONFIG))
    client = VerlQueueClient(stream, CONFIG)
    r = rollouter(client, {})

    async def produce() -> list[RolloutSample]:
        sent = []
        for i in range(6):
            sample = prompt(i)
            await r._process_single_sample_streaming(sample)  # verl's put path
            sent.append(sample)
        await client.put_sample(sample=None)  # _streaming_generation_main's end signal
        return sent

    sent: list[RolloutSample] = []
    # The rollouter in a thread of its own: the stream's window (4) and the client's puts in
    # flight hold it back until the trainer has taken a step.
    producer = threading.Thread(target=lambda: sent.extend(asyncio.run(produce())))
    producer.start()
    t = trainer(client)
    batches = []
    for _ in range(3):
        epoch, batch = asyncio.run(t._get_samples_from_queue())  # verl's get path
        assert epoch == 0
        batches.append(batch)
    assert asyncio.run(t._get_samples_from_queue()) == (None, None)
    producer.join(30)
    by_uid = {f"uid_{s.sample_id}": s for s in sent}
    for step, batch in enumerate(batches):
        # A step's samples are the oldest two, in the order the stream balanced them.
        uids = list(dict.fromkeys(batch.non_tensor_batch["uid"].tolist()))
        assert sorted(uids) == sorted(f"uid_{s.sample_id}" for s in sent[2 * step : 2 * step + 2])
        assert_same(batch, verl_batch([by_uid[u] for u in uids]))
    assert r.total_generated_samples == 6 and r.dropped_stale_samples == 0
    stats = client.get_statistics_sync()
    assert (stats["total_produced"], stats["total_consumed"], stats["dropped_samples"]) == (6, 6, 0)
    assert stats["stream"]["trainer_version"] == 1  # 3 steps, a weight update every 2
    stream.close()


def test_a_full_queue_holds_the_rollouter_back_where_verls_drops(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """verl's MessageQueue at its max_queue_size drops the oldest sample; the stream's window
    ((k + 1) * required_samples = 4) holds the fifth put until the trainer takes a step."""
    samples = [prompt(i) for i in range(6)]
    for i, s in enumerate(samples):
        s.full_batch = generated(i, 0)
    queue = MessageQueue.options(num_cpus=0).remote(CONFIG, 4)  # beside TQ's actors too
    verls = MessageQueueClient(queue)
    put = [asyncio.run(verls.put_sample(ray.cloudpickle.dumps(s))) for s in samples[:5]]
    assert put == [True, True, True, True, False]  # the oldest went
    assert verls.get_statistics_sync()["dropped_samples"] == 1
    ray.kill(queue)

    stream = make(verl_stream_config(CONFIG))
    client = VerlQueueClient(stream, CONFIG, in_flight=0)  # each put waits for its answer
    assert client.max_queue_size == 4
    for s in samples[:4]:
        assert client.put_sample_sync(ray.cloudpickle.dumps(s))
    fifth: list[bool] = []
    thread = threading.Thread(
        target=lambda: fifth.append(client.put_sample_sync(ray.cloudpickle.dumps(samples[4])))
    )
    thread.start()
    time.sleep(1.0)
    assert fifth == [] and client.get_queue_size_sync() == 4  # held back, nothing dropped
    got = [ray.cloudpickle.loads(client.get_sample_sync()[0]) for _ in range(2)]
    thread.join(30)
    assert fifth == [True]
    assert client.put_sample_sync(ray.cloudpickle.dumps(samples[5]))
    got += [ray.cloudpickle.loads(client.get_sample_sync()[0]) for _ in range(4)]
    assert sorted(g.sample_id for g in got) == [s.sample_id for s in samples]
    assert client.get_statistics_sync()["dropped_samples"] == 0
    # What verl's main asks at the end: memory held, and a cleared queue.
    for s in samples[:2]:
        assert client.put_sample_sync(ray.cloudpickle.dumps(s))
    memory = asyncio.run(client.get_memory_usage())
    assert memory["queue_samples"] == 2 and memory["estimated_memory_bytes"] > 0
    asyncio.run(client.clear_queue())
    assert client.get_queue_size_sync() == 0
    assert asyncio.run(client.get_memory_usage())["estimated_memory_bytes"] == 0
    stream.close()


def test_puts_in_flight_are_held_back_past_the_window_and_never_lost(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """``in_flight=2``: a rollouter's puts past the window (4) stay unanswered, at most two of
    them (on a RayBuffer they return at once; on TQ each waits), and the next waits; every
    sample trains once the trainer takes its steps, none dropped."""
    samples = [prompt(i) for i in range(8)]
    for i, s in enumerate(samples):
        s.full_batch = generated(i, 0)
    stream = make(verl_stream_config(CONFIG))
    client = VerlQueueClient(stream, CONFIG, in_flight=2)
    returned: list[bool] = []

    def produce() -> None:
        for s in samples:
            returned.append(client.put_sample_sync(ray.cloudpickle.dumps(s)))
        client.put_sample_sync(None)  # flushes, then the end

    client.get_statistics_sync()  # the stream's actor is up
    thread = threading.Thread(target=produce)
    thread.start()
    deadline = time.monotonic() + 60
    while client.get_queue_size_sync() < 4 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # time for puts past the window to return, were they not held back
    assert 4 <= len(returned) <= 4 + 2 and client.get_queue_size_sync() == 4
    got = []
    while (out := client.get_sample_sync()) and out[0] is not None:
        got.append(ray.cloudpickle.loads(out[0]).sample_id)
    thread.join(30)
    assert returned == [True] * 8 and not thread.is_alive()
    assert sorted(got) == sorted(s.sample_id for s in samples)
    assert client.get_statistics_sync()["dropped_samples"] == 0
    stream.close()


def test_a_put_the_trainer_outran_in_flight_is_refused_and_counted(
    make: Callable[[StreamConfig], Stream], backend: str
) -> None:
    """A rollouter (its own copy of the client, as in its own process) that last heard of
    version 0 puts a version-0 sample after the trainer moved to 2 (bound 1): on a RayBuffer
    the put goes in flight and answers True, and the stream refuses it on arrival; on TQ the
    put waits and answers False (verl's rollouter counts it as dropped). Either way it never
    trains, and ``dropped_samples`` counts it once the rollouter flushes."""
    import pickle

    stream = make(verl_stream_config(CONFIG))
    client = VerlQueueClient(stream, CONFIG, in_flight=2)
    rollouter_side = pickle.loads(pickle.dumps(client))
    first, second, late = prompt(0), prompt(1), prompt(2)
    first.full_batch, second.full_batch = generated(0, 2), generated(1, 2)
    late.full_batch = generated(2, 0)
    assert rollouter_side.put_sample_sync(ray.cloudpickle.dumps(first))  # waits: its first
    stream.set_trainer_version(2)  # the trainer's side moves on
    assert rollouter_side.put_sample_sync(ray.cloudpickle.dumps(second))
    answer = rollouter_side.put_sample_sync(ray.cloudpickle.dumps(late))
    assert answer is (backend == "ray")
    rollouter_side.flush()
    assert client.get_statistics_sync()["dropped_samples"] == 1
    client.set_trainer_version(2)
    got = [ray.cloudpickle.loads(client.get_sample_sync()[0]).sample_id for _ in range(2)]
    assert sorted(got) == ["sample_0_0", "sample_0_1"]
    stats = client.get_statistics_sync()
    assert (stats["total_produced"], stats["queue_size"], stats["dropped_samples"]) == (2, 0, 1)
    stream.close()


def test_the_staleness_bound_holds_at_the_queue_and_the_rest_of_verls_calls(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """With the bound 1, samples of version 0 do not train at version 2: stored ones are
    dropped at the take, a late one is refused at its put (verl's rollouter counts it as
    dropped), and both count in the statistics."""
    stream = make(verl_stream_config(CONFIG))
    client = VerlQueueClient(stream, CONFIG)
    versions = {0: 0, 1: 0, 2: 2, 3: 2, 4: 0}
    r = rollouter(client, versions)
    for i in range(4):
        asyncio.run(r._process_single_sample_streaming(prompt(i)))
    client.set_trainer_version(2)  # a run resumed at version 2
    first = ray.cloudpickle.loads(client.get_sample_sync()[0]).sample_id
    assert client.get_statistics_sync()["dropped_samples"] == 2
    asyncio.run(r._process_single_sample_streaming(prompt(4)))
    assert r.dropped_stale_samples == 1 and r.total_generated_samples == 4
    stats = client.get_statistics_sync()
    assert stats["dropped_samples"] == 3 and stats["total_consumed"] == 2
    second = ray.cloudpickle.loads(client.get_sample_sync()[0]).sample_id
    assert sorted([first, second]) == ["sample_0_2", "sample_0_3"]  # the version-2 step
    # Validation data (verl's put_validate / get_validate_sync), then the shutdown.
    assert client.get_validate_sync() is None
    assert asyncio.run(client.put_validate({"acc": 0.5}))
    assert client.get_validate_sync() == {"acc": 0.5}
    asyncio.run(client.shutdown())
    assert client.get_sample_sync() is None  # verl's queue returns None once shut down
    stream.close()


def test_what_the_client_refuses(make: Callable[[StreamConfig], Stream]) -> None:
    """Something that is not a stream, a config that is not verl's fully-async one, a
    stream whose step is not verl's ``required_samples``: each named."""
    with pytest.raises(StreamError, match=r"a py_wire Stream .*, not object"):
        VerlQueueClient(object(), CONFIG)  # type: ignore[arg-type]
    with pytest.raises(StreamError, match="require_batches"):
        verl_stream_config(OmegaConf.create({"actor_rollout_ref": {}}))
    stream = make(StreamConfig(max_staleness=1, batch_groups=3))
    with pytest.raises(StreamError, match="required_samples = 2"):
        VerlQueueClient(stream, CONFIG)
    stream.close()


@ray.remote(num_cpus=0)
def _rollouter_elsewhere(client: VerlQueueClient, seeds: list[int]) -> list[bool]:
    """verl's rollouter in a process of its own: each sample cloudpickled into put_sample."""
    out = []
    for seed in seeds:
        sample = prompt(seed)
        sample.full_batch = generated(seed, 0)
        out.append(client.put_sample_sync(ray.cloudpickle.dumps(sample)))
    return out


def test_a_rollouter_in_another_process_feeds_the_trainer_here(
    make: Callable[[StreamConfig], Stream],
) -> None:
    """The client built here, its rollouter in another process: after that process's first
    sample its frames go compact (the header names the schema), and the trainer here, which
    never encoded one, reads them (the client holds its schema in every process it is in).
    The schema is this test's own, so no earlier encode in this process holds it."""
    base = json.loads(load_schema("verl/text").canonical_json)
    base["name"] = f"verl/text-{uuid.uuid4().hex[:8]}"
    client = VerlQueueClient(make(verl_stream_config(CONFIG)), CONFIG, Schema.from_dict(base))
    assert ray.get(_rollouter_elsewhere.remote(client, [0, 1])) == [True, True]
    handed = [client.get_sample_sync()[0] for _ in range(2)]
    got = [ray.cloudpickle.loads(h) for h in handed]
    assert sorted(s.sample_id for s in got) == ["sample_0_0", "sample_0_1"]
    # What get_sample hands out is the sample waiting in this process: it loads once.
    with pytest.raises(StreamError, match="it loads once, in the process that got it"):
        ray.cloudpickle.loads(handed[0])
    want = generated(1, 0)
    one = next(s for s in got if s.sample_id == "sample_0_1").full_batch
    assert torch.equal(one.batch["input_ids"], want.batch["input_ids"])
