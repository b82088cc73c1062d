"""A simulated fully-async GRPO run, side by side in one run: py_wire's streaming buffer on Ray
alone (``RayBuffer``) and on real TransferQueue (``TQStream`` + ``StalenessSampler``), and
verl's fully-async way of moving samples (its ``MessageQueue`` actor of
``ray.cloudpickle.dumps(DataProto)`` bytes, reimplemented minimal: a deque actor, pickled
DataProtos with the media as per-row ``multi_modal_inputs`` dicts, ``DataProto.concat`` on the
trainer).

Producers (Ray actors) generate Qwen2.5-VL groups (``G`` rows sharing a prompt's images) with
log-normal rollout durations (p99 = 10x the median; a long rollout is a long answer), tagged
with the policy version they were generated with; one trainer takes ``B`` groups per step and
updates the weights every step (the version producers read next). Checked for each py_wire
path: every group trained exactly once (0 lost, 0 doubled), staleness within the bound, mean
trained row length within 2 % of generated, peak stored bytes under the budget, and the data
plane (encode + put on the producers, take + concat + decode on the trainer; admission waits
excluded, reported apart) at least 5x faster than verl's MQ path on the same workload.

``--paths verl-queue`` runs verl 0.9.1's own ``MessageQueue`` (its class and its
``MessageQueueClient``, not a copy) beside ``py_wire.streaming.verl.VerlQueueClient`` on a
``RayBuffer``, in one run, driven as verl's rollouter and trainer drive them (each sample
``ray.cloudpickle``-d by the rollouter and loaded by the trainer), samples of verl's default
shapes (4 trajectories of 512 + 512 tokens): the data plane of each, and, at verl's own queue
size with a trainer slower than the rollouters, the samples each loses.

    .venv/bin/python benchmarks/async_rl.py            # 240 groups of 8 samples
    .venv/bin/python benchmarks/async_rl.py --quick    # < 1 min; CI runs it
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import sys
import time
from typing import Any

import numpy as np
import ray
import torch
from timing import medians_ms_interleaved  # benchmarks/ is sys.path[0] when run as a script

import py_wire
from py_wire.streaming import RayBuffer, StreamConfig
from py_wire.streaming.tq import TQStream, tq_config
from py_wire.synth.qwen import qwen2_5_vl_batch

SCHEMA = "qwen2_5_vl"
SIGMA = math.log(10) / 2.326  # log-normal: p99 = 10x the median
MAX_SCALE = 20.0  # the longest rollout: 20x the median (its answer: up to 1920 tokens)
VERL_WIDTH = 2560  # prompt (<= 256 text + 2 images of <= 64 tokens) + the longest answer


def make_group(seed: int, group_size: int, scale: float) -> dict[str, Any]:
    """A GRPO group whose answers grow with its rollout's duration (``scale``)."""
    batch = qwen2_5_vl_batch(
        group_size,
        seed=seed,
        group_size=group_size,
        max_images=2,
        min_patches=64,
        max_patches=256,
        max_response=max(65, int(96 * scale)),
    )
    batch["reward"] = torch.full((group_size,), float(seed))  # the group's id, to find doubles
    return batch


def to_dataproto(batch: dict[str, Any], version: int) -> Any:
    """The group as verl's rollout hands it on: padded tensors, media per row in
    ``multi_modal_inputs`` (object array of dicts), the version per row."""
    from verl.protocol import DataProto

    ids = batch["input_ids"]
    width = VERL_WIDTH  # verl pads every row to max_prompt_length + max_response_length
    padded = torch.zeros(len(ids), width, dtype=torch.int64)
    mask = torch.zeros(len(ids), width, dtype=torch.int64)
    adv = torch.zeros(len(ids), width)
    lp = torch.zeros(len(ids), width)
    for i, t in enumerate(ids):
        padded[i, : len(t)], mask[i, : len(t)] = t, 1
        adv[i, : len(t)] = batch["advantages"][i]
        lp[i, : len(t)] = batch["generation_logprobs"][i]
    media = []
    for px, grid in zip(batch["pixel_values"], batch["image_grid_thw"], strict=True):
        px = [px] if isinstance(px, torch.Tensor) else (px or [])
        media.append(
            {
                "pixel_values": torch.cat(px) if px else torch.zeros(0, 1176),
                "image_grid_thw": grid
                if grid is not None
                else torch.zeros(0, 3, dtype=torch.int64),
            }
        )
    return DataProto.from_dict(
        tensors={
            "input_ids": padded,
            "attention_mask": mask,
            "advantages": adv,
            "old_log_probs": lp,
            "reward": batch["reward"],
        },
        # per row: DataProto.concat refuses meta_info that differs between samples
        non_tensors={
            "multi_modal_inputs": np.array(media, dtype=object),
            "param_version": np.full(len(ids), version),
        },
    )


@ray.remote(num_cpus=0)
class VerlMessageQueue:
    """verl's fully-async MessageQueue, only what moving samples needs: a deque of pickled
    samples, put one at a time by the rollouters, got one at a time by the trainer."""

    def __init__(self) -> None:
        from collections import deque

        self.queue: Any = deque()
        self.version = 0

    def put_sample(self, sample: bytes) -> bool:
        self.queue.append(sample)
        return True

    def get_sample(self) -> bytes | None:
        return self.queue.popleft() if self.queue else None

    def set_version(self, version: int) -> None:
        self.version = version

    def get_version(self) -> int:
        return self.version


@ray.remote(num_cpus=0)
class Sink:
    """Receives a frame and drops it: Ray's floor for moving one group to an actor."""

    def take(self, frame: Any) -> None:
        return None

    def keep(self, frame: Any) -> None:
        self.kept = ray.put(frame)  # the actor's own copy, which outlives the producer

    def pin(self, refs: list[Any]) -> None:
        self.kept = refs, ray.get(refs[0])  # the producer's object, read (pinned) here


@ray.remote(num_cpus=0)
class Producer:
    """A rollout worker, started once and pointed at each path in turn."""

    def setup(self, path: str, handle: Any, config: StreamConfig) -> None:
        self.path, self.handle, self.config = path, handle, config
        if path.startswith("tq"):
            import transfer_queue as tq

            logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
            tq.init()
            self.stream = TQStream(config, partition_id=path)
            self.version_key = "py_wire.trainer_version"

    def _version(self) -> int:
        if self.path.startswith("ray"):
            return int(self.handle.stats()["trainer_version"])
        return int(ray.get(self.handle.get_version.remote()))

    def floor(self, group_size: int, reps: int) -> dict[str, float]:
        """Ray's own cost of moving one median group from this producer, unloaded: a
        ``ray.put`` of its frame and an actor call carrying the ref that reads it there (what
        ``RayBuffer.put`` does), an actor call carrying the frame (which Ray writes into its
        object store) with and without the actor's ``ray.put`` of it, a bare ``ray.put``, an
        actor call carrying nothing; beside ``RayBuffer.put`` of the same frame (reserve
        excluded). Medians in ms."""
        frame = py_wire.encode(
            make_group(0, group_size, 1.0), SCHEMA, metadata={"policy_version": "0"}
        )
        sink = Sink.remote()
        buffer = RayBuffer(StreamConfig(max_staleness=reps, batch_groups=1))

        puts = []
        for _ in range(reps):
            gid, _ = buffer.reserve(0)
            t0 = time.perf_counter()
            buffer.put(gid, frame)
            puts.append(time.perf_counter() - t0)
        ray_costs = medians_ms_interleaved(
            {
                "put + call with ref": lambda: ray.get(sink.pin.remote([ray.put(frame)])),
                "call with frame": lambda: ray.get(sink.take.remote(frame)),
                "call + actor ray.put": lambda: ray.get(sink.keep.remote(frame)),
                "ray.put": lambda: ray.put(frame),
                "empty call": lambda: ray.get(sink.take.remote(None)),
            },
            reps,
        )
        return {
            "frame_mb": frame.nbytes / 1e6,
            **ray_costs,
            "RayBuffer.put": float(np.median(puts) * 1e3),
        }

    def tq_floor(self, group_size: int, reps: int, config: StreamConfig) -> dict[str, float]:
        """TQ's own cost of moving one median group from this producer (after the ``tq``
        path, whose client this producer holds), unloaded: a ``kv_batch_put`` of the frame's
        bytes with its tags (what ``TQStream.put`` sends), a ``kv_put`` of tags alone (a
        reservation), a ``kv_list`` (one controller round trip); beside ``TQStream.reserve``
        then ``TQStream.put`` with the run's byte budget, interleaved. Medians in ms."""
        import itertools

        import transfer_queue as tq
        from tensordict import TensorDict

        from py_wire.interop.transfer_queue.columns import TEXT, frames_column

        frame = py_wire.encode(
            make_group(0, group_size, 1.0), SCHEMA, metadata={"policy_version": "0"}
        )
        keys = itertools.count()
        column = frames_column([frame])

        def put() -> None:
            tq.kv_batch_put(
                keys=[f"put{next(keys)}"],
                partition_id="floor",
                fields=TensorDict({TEXT: column}, batch_size=[1]),
                tags=[{"state": "stored", "nbytes": frame.nbytes}],
            )

        window = StreamConfig(
            max_staleness=2 * reps, batch_groups=1, max_bytes=config.max_bytes, reservation_s=600
        )
        stream = TQStream(window, partition_id="floor-stream")

        def reserve_and_put() -> None:
            key = f"s{next(keys)}"
            stream.reserve(key, 0)
            stream.put([key], [frame], [0])

        costs = medians_ms_interleaved(
            {
                "kv_batch_put": put,
                "kv_put of tags": lambda: tq.kv_put(
                    key=f"tag{next(keys)}", partition_id="floor", tag={"state": "reserved"}
                ),
                "kv_list": lambda: tq.kv_list(partition_id="floor"),
                "TQStream.reserve + put": reserve_and_put,
            },
            reps,
        )
        listed = tq.kv_list()
        for partition in ("floor", "floor-stream"):
            tq.kv_clear(keys=list(listed.get(partition, {})), partition_id=partition)
        return costs

    def run(self, seeds: list[int], median_s: float, group_size: int) -> dict[str, Any]:
        rng = np.random.default_rng(seeds[0])
        data_s = admit_s = 0.0
        sample_bytes = stored_bytes = 0
        lengths: list[int] = []
        for seed in seeds:
            scale = min(float(rng.lognormal(0.0, SIGMA)), MAX_SCALE)
            t0 = time.perf_counter()
            # The weights to generate with: the trainer's version once admitted.
            if self.path == "ray":
                gid, version = self.handle.reserve()
            elif self.path == "ray-samples":
                gid, version = self.handle.reserve(samples=group_size)
            elif self.path == "tq":
                version = self.stream.reserve(f"g{seed}", self._version)
            elif self.path == "tq-samples":
                version = self.stream.reserve(f"g{seed}", self._version, samples=group_size)
            else:
                version = self._version()
            admit_s += time.perf_counter() - t0
            time.sleep(median_s * scale)  # the rollout
            batch = make_group(seed, group_size, scale)
            lengths += [len(t) for t in batch["input_ids"]]
            if self.path == "verl":
                proto = to_dataproto(batch, version)
                t0 = time.perf_counter()
                ray.get(self.handle.put_sample.remote(ray.cloudpickle.dumps(proto)))
            elif self.path.endswith("-samples"):
                # Each sample as it finishes (verl's fully-async rollouter streams samples):
                # one frame per sample, its prompt's images in every one.
                metadata = {"policy_version": str(version)}
                t0 = time.perf_counter()
                for i in range(group_size):
                    row = {k: v[i : i + 1] for k, v in batch.items()}
                    frame = py_wire.encode(row, SCHEMA, metadata=metadata)
                    sample_bytes += frame.nbytes
                    if self.path == "ray-samples":
                        self.handle.put(gid, frame, sample=i)
                    else:
                        stored_bytes += self.stream.put_sample(f"g{seed}", i, frame, version)
            else:
                t0 = time.perf_counter()
                frame = py_wire.encode(batch, SCHEMA, metadata={"policy_version": str(version)})
                if self.path == "ray":
                    self.handle.put(gid, frame)
                else:
                    self.stream.put([f"g{seed}"], [frame], [version])
            data_s += time.perf_counter() - t0
        return {
            "data_s": data_s,
            "admit_s": admit_s,
            "lengths": lengths,
            "sample_bytes": sample_bytes,
            "stored_bytes": stored_bytes,
        }


# verl's own defaults (verl 0.9.1: data.max_prompt_length, data.max_response_length, the
# fully-async config's rollout.n, staleness_threshold, trigger_parameter_sync_step).
VERL_PROMPT, VERL_RESPONSE, VERL_N = 512, 512, 4
VERL_STALENESS, VERL_SYNC = 0.1, 4


def verl_config(required: int) -> Any:
    from omegaconf import OmegaConf

    return OmegaConf.create(
        {
            "actor_rollout_ref": {"actor": {"ppo_mini_batch_size": required}},
            "async_training": {
                "require_batches": 1,
                "trigger_parameter_sync_step": VERL_SYNC,
                "staleness_threshold": VERL_STALENESS,
            },
        }
    )


def verl_sample(seed: int, version: int) -> Any:
    """A RolloutSample as verl's rollouter holds it after the agent loop (verl's default
    shapes: ``n`` trajectories of a prompt, left-padded to 512 + right-padded to 512)."""
    from verl.experimental.fully_async_policy.detach_utils import RolloutSample
    from verl.protocol import DataProto

    g = torch.Generator().manual_seed(seed)
    n, p, r = VERL_N, VERL_PROMPT, VERL_RESPONSE
    plen = torch.randint(64, p + 1, (n,), generator=g)
    rlen = torch.randint(32, r + 1, (n,), generator=g)
    cols = torch.arange(p + r)
    mask = ((cols >= p - plen[:, None]) & (cols < p + rlen[:, None])).long()
    ids = torch.where(mask.bool(), torch.randint(0, 150000, (n, p + r), generator=g), 151643)
    resp_mask = mask[:, p:]
    batch = {
        "prompts": ids[:, :p],
        "responses": ids[:, p:],
        "response_mask": resp_mask,
        "input_ids": ids,
        "attention_mask": mask,
        "position_ids": torch.clamp(torch.cumsum(mask, 1) - 1, min=0),
        "rollout_log_probs": -torch.rand(n, r, generator=g) * resp_mask,
        "rm_scores": torch.zeros(n, r),
    }
    non_tensor = {
        "uid": np.array([f"uid_sample_0_{seed}"] * n, dtype=object),
        "data_source": np.array(["gsm8k"] * n, dtype=object),
        "min_global_steps": np.array([version] * n, dtype=object),
        "max_global_steps": np.array([version] * n, dtype=object),
        "__num_turns__": np.full(n, 2, dtype=np.int32),
    }
    meta = {"metrics": [{"generate_sequences": 0.1, "tool_calls": 0.0}] * n}
    data = DataProto.from_dict(tensors=batch, non_tensors=non_tensor, meta_info=meta)
    status = {"count/total_generated_samples": seed, "static/staleness_threshold": 0.1}
    return RolloutSample(
        full_batch=data, sample_id=f"sample_0_{seed}", epoch=0, rollout_status=status
    )


@ray.remote(num_cpus=0)
class VerlRollouter:
    """verl's rollouter's put path: each finished sample ``ray.cloudpickle.dumps``-ed (its
    line 1008) into ``await client.put_sample``; timed per sample (dumps and put)."""

    def run(self, client: Any, seeds: list[int], version: int) -> dict[str, Any]:
        import asyncio

        async def put_all() -> dict[str, Any]:
            data_s = dumps_s = loads_s = 0.0
            refused = 0
            for seed in seeds:
                sample = verl_sample(seed, version)
                t0 = time.perf_counter()
                if getattr(client, "pickled", True):
                    pickled = ray.cloudpickle.dumps(sample)
                    dumps_s += time.perf_counter() - t0
                    ok = await client.put_sample(sample=pickled)
                else:  # a rollouter whose line 1008 hands over the sample unpickled
                    ok = await client.put_sample(sample=sample)
                data_s += time.perf_counter() - t0
                refused += not ok
                if getattr(client, "pickled", True):
                    # The floor's other half, untimed above: one loads of that pickle, which
                    # whoever takes verl's pickled sample pays (verl's trainer, or the client).
                    t1 = time.perf_counter()
                    ray.cloudpickle.loads(pickled)
                    loads_s += time.perf_counter() - t1
            return {
                "data_s": data_s,
                "refused": refused,
                "dumps_s": dumps_s,
                "loads_s": loads_s,
                # py_wire's client: the seconds its put_sample calls spent per part
                "timings": dict(getattr(client, "timings", {})),
            }

        return asyncio.run(put_all())

    def call_floor(self, sink: Any, seeds: list[int]) -> dict[str, float]:
        """Ray's own cost of the rollouter's hop, per sample, in the same setting (the four
        rollouters at once): an actor call carrying the sample's pickle (verl's put_sample
        without its queue), and an empty actor call (the least any blocking put costs)."""
        carrying = empty = 0.0
        for seed in seeds:
            pickled = ray.cloudpickle.dumps(verl_sample(seed, 0))
            t0 = time.perf_counter()
            ray.get(sink.take.remote(pickled))
            t1 = time.perf_counter()
            ray.get(sink.take.remote(None))
            carrying += t1 - t0
            empty += time.perf_counter() - t1
        return {"carrying": carrying, "empty": empty}


def verl_queue(args: argparse.Namespace) -> list[str]:
    """verl's real ``MessageQueue`` (and its ``MessageQueueClient``) beside py_wire's
    ``VerlQueueClient`` on a ``RayBuffer``, driven the way verl's rollouter and trainer drive
    them, samples of verl's default shapes. Two rounds per queue: (1) room for every sample,
    producers first, then the trainer: the data plane (the rollouter's dumps + put_sample, the
    trainer's get_sample + loads + verl's DataProto.concat), no waits in it; (2) verl's own
    queue size for ``--verl-required`` samples a step, producers and a slower trainer at once:
    what each queue loses."""
    import asyncio

    from verl.experimental.fully_async_policy.message_queue import (
        MessageQueue,
        MessageQueueClient,
    )
    from verl.protocol import DataProto

    from py_wire.streaming.verl import VerlQueueClient, verl_stream_config

    required, total = args.verl_required, args.verl_samples
    fails: list[str] = []
    rollouters = [VerlRollouter.remote() for _ in range(args.producers)]
    ray.get([r.__ray_ready__.remote() for r in rollouters])
    config = verl_config(required)
    verl_max = int(required * (VERL_STALENESS + 1) * VERL_SYNC)  # verl's max_queue_size
    seeds = list(range(total))

    def build(kind: str, roomy: bool) -> tuple[Any, Any]:
        if kind == "verl":
            queue = MessageQueue.remote(config, total if roomy else verl_max)
            verls = MessageQueueClient(queue)
            verls.get_statistics_sync()
            return verls, queue
        # Room for every sample: a bound wide enough that the window holds them all.
        k = -(-total // required) if roomy else math.ceil(VERL_STALENESS)
        stream = RayBuffer(verl_stream_config(config, max_staleness=k))
        client = VerlQueueClient(stream, config, pickled=kind == "py_wire")
        client.get_statistics_sync()  # its actors are up before anything is timed
        return client, stream

    concat: dict[str, float] = {}

    def train(client: Any, steps: int, train_s: float, kind: str) -> tuple[float, list[str]]:
        async def loop() -> tuple[float, list[str]]:
            data_s, got = 0.0, []
            concat[kind] = 0.0
            for _ in range(steps):
                samples = []
                while len(samples) < required:
                    t0 = time.perf_counter()
                    sample, _ = await client.get_sample()
                    if getattr(client, "pickled", True):
                        sample = ray.cloudpickle.loads(sample)  # verl's trainer, line 439
                    samples.append(sample)
                    data_s += time.perf_counter() - t0
                t0 = time.perf_counter()
                DataProto.concat([s.full_batch for s in samples])
                data_s += time.perf_counter() - t0
                concat[kind] += time.perf_counter() - t0
                got += [s.sample_id for s in samples]
                time.sleep(train_s)
            return data_s, got

        return asyncio.run(loop())

    def close(handle: Any) -> None:
        if isinstance(handle, RayBuffer):
            handle.close()
        else:
            ray.kill(handle)

    parts: dict[str, dict[str, float]] = {}  # py_wire's: its client's timings, both sides
    # py_wire-objects: verl's two pickle lines (rollouter 1008, trainer 439) dropped, the
    # client given and giving RolloutSample objects (pickled=False).
    data = dict.fromkeys(("verl", "py_wire", "py_wire-objects"), 0.0)
    floor = dict.fromkeys(data, 0.0)
    totals = dict.fromkeys(data, 0.0)
    carrying = empty = 0.0
    parts["py_wire"] = {}
    # Rounds of the three, one after another, and Ray's call floor after each: each figure is
    # the mean over the rounds, so a change of the host's load falls on all of them.
    for _ in range(args.verl_rounds):
        for kind in data:
            client, handle = build(kind, roomy=True)
            made = ray.get(
                [
                    r.run.remote(client, seeds[i :: args.producers], 0)
                    for i, r in enumerate(rollouters)
                ]
            )
            train_s, got = train(client, total // required, 0.0, kind)
            totals[kind] += concat[kind]
            put_s = sum(m["data_s"] for m in made)
            data[kind] += (put_s + train_s) / args.verl_rounds
            floor[kind] += sum(m["dumps_s"] + m["loads_s"] for m in made) / args.verl_rounds
            if kind == "py_wire":
                timed = {
                    "dumps": sum(m["dumps_s"] for m in made),
                    "put": put_s,
                    "train": train_s,
                    **{
                        part: sum(m["timings"].get(part, 0.0) for m in made)
                        for part in ("loads", "fields", "encode", "submit", "answers")
                    },
                    **{
                        p: getattr(client, "timings", {}).get(p, 0.0)
                        for p in ("take", "rebuild", "hand_out")
                    },
                }
                for part, value in timed.items():
                    parts[kind][part] = parts[kind].get(part, 0.0) + value / args.verl_rounds
            print(
                f"verl-queue {kind:15s} {total} samples of {VERL_N} x {VERL_PROMPT}+"
                f"{VERL_RESPONSE} tokens: data plane {(put_s + train_s) * 1e3:.1f} ms "
                f"(rollouter dumps + put_sample {put_s * 1e3:.1f}, trainer get_sample + loads "
                f"+ concat {train_s * 1e3:.1f}); {len(got)} trained"
            )
            if sorted(got) != sorted(f"sample_0_{i}" for i in seeds):
                fails.append(f"verl-queue {kind}: trained {len(got)} of {total} samples")
            close(handle)
        sink = Sink.remote()
        ray.get(sink.take.remote(None))
        calls = ray.get(
            [
                r.call_floor.remote(sink, seeds[i :: args.producers])
                for i, r in enumerate(rollouters)
            ]
        )
        carrying += sum(c["carrying"] for c in calls) / args.verl_rounds
        empty += sum(c["empty"] for c in calls) / args.verl_rounds
        ray.kill(sink)
    concat.update({k: v / args.verl_rounds for k, v in totals.items()})
    if args.verl_rounds > 1:
        print(
            f"verl-queue means over {args.verl_rounds} rounds: data plane "
            + ", ".join(f"{k} {v * 1e3:.1f} ms" for k, v in data.items())
        )
    # verl's rollouter cloudpickles each sample before put_sample (its line 1008), and the
    # sample is loaded once from that pickle (by verl's trainer, or by the client): a cost
    # verl's own code puts on both queues, measured in this run (each side's own dumps, and
    # one loads of each pickle).
    base = (floor["verl"] + floor["py_wire"]) / 2
    print(
        f"verl-queue floor: verl's cloudpickle.dumps of each sample and one loads of it "
        f"{base * 1e3:.1f} ms (verl's run {floor['verl'] * 1e3:.1f}, py_wire's "
        f"{floor['py_wire'] * 1e3:.1f}), a cost verl's code puts on both queues; goal: 5x lower"
    )
    both = base + concat["py_wire"]
    print(
        f"verl-queue Ray's floor, the same rollouters at once, summed over the {total} samples: "
        f"an actor call carrying each sample's pickle {carrying * 1e3:.1f} ms (verl's put "
        f"without its queue), an empty actor call {empty * 1e3:.1f} ms (the least a blocking "
        f"put costs); verl's DataProto.concat of each step on the trainer "
        f"{concat['verl'] * 1e3:.1f} ms (verl's run), {concat['py_wire'] * 1e3:.1f} ms "
        "(py_wire's); verl's pickling and "
        f"concat together cap the ratio at {data['verl'] / both:.2f}x"
    )
    # What any client that takes verl's interface as verl wrote it pays: verl's pickling
    # (its rollouter's dumps, one loads) and one Ray call per sample (an empty call from the
    # same rollouters at once: the least a put that reaches another process costs).
    interface = base + empty
    t = parts["py_wire"]
    roll_rest = (
        t["put"]
        - t["dumps"]
        - sum(t[p] for p in ("loads", "fields", "encode", "submit", "answers"))
    )
    train_rest = t["train"] - t["take"] - t["rebuild"] - t["hand_out"]
    print(
        f"verl-queue py_wire's data plane {data['py_wire'] * 1e3:.1f} ms, by part (ms, summed "
        f"over the samples): rollouter: verl's dumps {t['dumps'] * 1e3:.1f}, loads of it "
        f"{t['loads'] * 1e3:.1f}, the verl adapter's fields {t['fields'] * 1e3:.1f}, encode "
        f"{t['encode'] * 1e3:.1f}, the put's submit {t['submit'] * 1e3:.1f}, waits for put "
        f"answers {t['answers'] * 1e3:.1f}, the rest (asyncio, thread hops) "
        f"{roll_rest * 1e3:.1f}; trainer: take {t['take'] * 1e3:.1f}, decode and "
        f"rebuild {t['rebuild'] * 1e3:.1f}, hand-out {t['hand_out'] * 1e3:.1f}, the rest "
        f"(verl's loads of the hand-out, DataProto.concat, asyncio) {train_rest * 1e3:.1f}"
    )
    print(
        f"verl-queue cap at verl's interface: verl's pickling {base * 1e3:.1f} ms and one Ray "
        f"call per sample {empty * 1e3:.1f} ms (an empty call, the same rollouters) make "
        f"{interface * 1e3:.1f} ms, which caps any client at {data['verl'] / interface:.2f}x; "
        f"py_wire's client spends {(data['py_wire'] - interface) * 1e3:.1f} ms above it "
        f"(to reach 5x it may spend {(data['verl'] / 5 - interface) * 1e3:.1f} ms)"
    )
    for kind in ("py_wire", "py_wire-objects"):
        ratio = data["verl"] / data[kind]
        note = ""
        if kind == "py_wire":
            above = (data["verl"] - base) / max(data[kind] - base, 1e-9)
            best = data["verl"] / base
            note = (
                f"; above the floor {above:.2f}x (verl {(data['verl'] - base) * 1e3:.1f} ms, "
                f"py_wire {(data[kind] - base) * 1e3:.1f} ms); the floor alone caps the ratio "
                f"at {best:.2f}x"
            )
        print(f"verl-queue {kind}: data plane {ratio:.2f}x lower than verl's MessageQueue{note}")
        if ratio < 5 and not args.no_speed_check:
            fails.append(f"verl-queue {kind}: data plane only {ratio:.2f}x lower (want 5x)")
    for kind in ("verl", "py_wire"):
        # verl's queue size; producers all at once, the trainer slower than them.
        client, handle = build(kind, roomy=False)
        jobs = [
            r.run.remote(client, seeds[i :: args.producers], 0) for i, r in enumerate(rollouters)
        ]
        steps = total // required
        if kind == "verl":
            ray.get(jobs)  # verl's puts never wait: the queue drops its oldest instead
            stats = client.get_statistics_sync()
            steps = min(steps, stats["queue_size"] // required)
        _, got = train(client, steps, args.train_s, kind + " (verl's queue size)")
        ray.get(jobs)
        stats = client.get_statistics_sync()
        lost = total - len(got) - stats["queue_size"]
        print(
            f"verl-queue {kind:15s} max_queue_size {stats['max_queue_size']}: "
            f"{stats['dropped_samples']} samples dropped, {len(got)} trained, "
            f"{stats['queue_size']} still queued, {lost} lost"
        )
        if kind == "py_wire" and (lost or stats["dropped_samples"]):
            fails.append(f"verl-queue py_wire: {lost} samples lost")
        close(handle)
    return fails


def trainer(path: str, handle: Any, config: StreamConfig, steps: int, train_s: float) -> dict:
    """Steps of ``B`` groups, a weight update after each. Returns what it trained."""
    data_s = idle_s = 0.0
    peak = 0
    trained: list[int] = []
    lengths: list[int] = []
    staleness: dict[int, int] = {}
    stream = TQStream(config, partition_id=path) if path.startswith("tq") else None
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        wait_s = 0.0
        if path.startswith("ray"):
            got = handle.take(timeout_s=30, lease_s=120)
            wait_s = got.waited_s
            frame = got.frames[0]
            lease: Any = got
        elif path.startswith("tq"):
            assert stream is not None
            lease, frame = stream.take(step, step, timeout_s=30)
            wait_s = stream.last_wait_s
        else:
            from verl.protocol import DataProto

            samples = []
            while len(samples) < config.batch_groups:
                w0 = time.perf_counter()
                raw = ray.get(handle.get_sample.remote())
                if raw is None:
                    time.sleep(0.002)
                    wait_s += time.perf_counter() - w0
                    continue
                samples.append(ray.cloudpickle.loads(raw))
            proto = DataProto.concat(samples)
            versions = proto.non_tensor_batch["param_version"].tolist()
            rows = len(samples[0])
            trained += [int(r) for r in proto.batch["reward"].tolist()[::rows]]
            lengths += proto.batch["attention_mask"].sum(-1).tolist()
        if path != "verl":
            assert frame is not None
            out = py_wire.decode(frame)
            versions = out["policy_version"].tolist()
            rewards = out["reward"].tolist()
            lengths += out["input_ids"].offsets().diff().tolist()
            trained += [int(r) for i, r in enumerate(rewards) if i == 0 or r != rewards[i - 1]]
        elapsed = time.perf_counter() - t0
        data_s += elapsed - wait_s  # waiting for groups is idle time, not data movement
        idle_s += wait_s
        for v in versions:
            lag = step - int(v)
            staleness[lag] = staleness.get(lag, 0) + 1
        time.sleep(train_s)  # the optimizer step
        # The new version first, then the ack: a slot the ack frees must not go to a group
        # recorded with the old version (then more than B groups could be due at once).
        if path.startswith("ray"):
            handle.set_trainer_version(step + 1)
            handle.ack(lease)
        elif path.startswith("tq"):
            assert stream is not None
            peak = max(peak, stream.stored_bytes())  # the step's groups and those put since
            ray.get(handle.set_version.remote(step + 1))
            stream.ack(lease)
        else:
            ray.get(handle.set_version.remote(step + 1))
    total = time.perf_counter() - start
    return {
        "data_s": data_s,
        "idle_s": idle_s,
        "total_s": total,
        "trained": trained,
        "lengths": lengths,
        "staleness": staleness,
        "peak_bytes": peak,
    }


def run_path(
    path: str, args: argparse.Namespace, config: StreamConfig, producers: list[Any]
) -> dict[str, Any]:
    # The Ray path's buffer holds the trainer version; the others keep it in a small actor.
    handle: Any = RayBuffer(config) if path.startswith("ray") else VerlMessageQueue.remote()
    ray.get([p.setup.remote(path, handle, config) for p in producers])
    seeds = list(range(args.groups))
    jobs = [
        p.run.remote(seeds[i :: args.producers], args.median_s, args.group_size)
        for i, p in enumerate(producers)
    ]
    steps = args.groups // config.batch_groups
    try:
        t = trainer(path, handle, config, steps, args.train_s)
    except Exception:
        if path.startswith("ray"):
            print("buffer at the failure:", handle.stats(), file=sys.stderr)
        ray.get(jobs, timeout=5)  # a producer's error, if one failed, says more
        raise
    made = ray.get(jobs)
    generated = [n for m in made for n in m["lengths"]]
    out = {
        **t,
        "producer_data_s": sum(m["data_s"] for m in made),
        "admit_s": sum(m["admit_s"] for m in made),
        "generated_lengths": generated,
        # Ray: the buffer's own peak; TQ: sampled at each step's end, before the ack.
        "peak_bytes": handle.stats()["peak_bytes"] if path.startswith("ray") else t["peak_bytes"],
        "stored_total": (
            handle.stats()["stored_total"]
            if path.startswith("ray")
            else sum(m["stored_bytes"] for m in made)
        ),
        "sample_bytes": sum(m["sample_bytes"] for m in made),
    }
    return out


def check(
    path: str, r: dict[str, Any], args: argparse.Namespace, config: StreamConfig
) -> list[str]:
    """The properties; a list of failures."""
    fails = []
    want = list(range(args.groups))
    if sorted(r["trained"]) != want:
        lost = sorted(set(want) - set(r["trained"]))
        doubled = sorted({g for g in r["trained"] if r["trained"].count(g) > 1})
        fails.append(f"{path}: lost {lost[:8]} doubled {doubled[:8]}")
    if path != "verl" and max(r["staleness"]) > config.max_staleness:
        fails.append(f"{path}: staleness {r['staleness']} past the bound {config.max_staleness}")
    gen = float(np.mean(r["generated_lengths"]))
    trained = float(np.mean(r["lengths"]))
    if abs(trained - gen) > 0.02 * gen:
        fails.append(f"{path}: trained rows average {trained:.1f} tokens, generated {gen:.1f}")
    if path != "verl" and config.max_bytes and r["peak_bytes"] > config.max_bytes:
        fails.append(f"{path}: peak {r['peak_bytes']} bytes over the budget {config.max_bytes}")
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a run of under a minute (CI)")
    ap.add_argument("--no-speed-check", action="store_true", help="report the speed, never fail it")
    ap.add_argument("--groups", type=int, default=240)
    ap.add_argument("--producers", type=int, default=4)
    ap.add_argument(
        "--group-size", type=int, default=8, help="samples per prompt (the issue's own groups)"
    )
    ap.add_argument("--batch-groups", type=int, default=8)
    ap.add_argument("--staleness", type=int, default=1)
    ap.add_argument("--median-s", type=float, default=0.02)
    ap.add_argument("--train-s", type=float, default=0.05)
    ap.add_argument("--max-mb", type=float, default=64.0)
    ap.add_argument(
        "--verl-required", type=int, default=32, help="verl-queue: samples per trainer step"
    )
    ap.add_argument("--verl-samples", type=int, default=256, help="verl-queue: samples in all")
    ap.add_argument(
        "--verl-rounds",
        type=int,
        default=1,
        help="verl-queue: rounds of verl's queue and the client, one after another (means)",
    )
    ap.add_argument(
        "--paths",
        default="ray,tq,verl",
        help="ray, tq, verl, and ray-samples, tq-samples (each sample put apart, a prompt's "
        "images stored once), verl-queue (verl's own MessageQueue beside "
        "py_wire.streaming.verl.VerlQueueClient, driven as verl's rollouter and trainer do)",
    )
    args = ap.parse_args()
    if args.quick:
        args.groups, args.median_s, args.train_s = 200, 0.01, 0.02
    config = StreamConfig(
        max_staleness=args.staleness,
        batch_groups=args.batch_groups,
        max_bytes=int(args.max_mb * 2**20),
        admission_timeout_s=120,
    )
    if args.groups % args.batch_groups:
        ap.error("--groups must be a multiple of --batch-groups")
    here = os.path.dirname(os.path.abspath(__file__))
    path_env = os.pathsep.join([here, os.path.dirname(here)])
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        runtime_env={"env_vars": {"PYTHONPATH": path_env}},
    )
    paths = args.paths.split(",")
    if any(p.startswith("tq") for p in paths):
        import transfer_queue as tq

        logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
        tq.init(tq_config(config))
    producers = [Producer.remote() for _ in range(args.producers)]
    ray.get([p.__ray_ready__.remote() for p in producers])
    results: dict[str, dict[str, Any]] = {}
    fails: list[str] = []
    if "verl-queue" in paths:
        paths.remove("verl-queue")
        fails += verl_queue(args)
    for path in paths:
        t0 = time.perf_counter()
        results[path] = r = run_path(path, args, config, producers)
        fails += check(path, r, args, config)
        data = r["data_s"] + r["producer_data_s"]
        hist = dict(sorted(r["staleness"].items()))
        print(
            f"{path:5s} {args.groups} groups in {time.perf_counter() - t0:5.1f} s | data plane "
            f"{data * 1e3:8.1f} ms (producers {r['producer_data_s'] * 1e3:.1f}, trainer "
            f"{r['data_s'] * 1e3:.1f}) | admission waits {r['admit_s']:.2f} s | trainer idle "
            f"{r['idle_s'] / r['total_s']:.0%} | staleness {hist} | rows "
            f"{np.mean(r['lengths']):.1f} / {np.mean(r['generated_lengths']):.1f} tokens"
            + (f" | peak {r['peak_bytes'] / 2**20:.1f} MiB" if r["peak_bytes"] else "")
        )
        if r["sample_bytes"]:
            stored = r["stored_total"]
            print(
                f"{path}: stored {stored / 2**20:.1f} MiB in all, against "
                f"{r['sample_bytes'] / 2**20:.1f} MiB of sample frames "
                f"({stored / r['sample_bytes']:.3f}): each prompt's images once"
            )
            if stored > 0.5 * r["sample_bytes"]:
                fails.append(f"{path}: stored {stored} bytes of {r['sample_bytes']} sent")
    floor = ray.get(producers[0].floor.remote(args.group_size, 20))
    pinned = floor["put + call with ref"]
    print(
        f"Ray's floor, one {floor['frame_mb']:.2f} MB group from a producer, unloaded (ms): "
        f"ray.put and a call with the ref that reads it {pinned:.2f}; an actor call carrying "
        f"the frame {floor['call with frame']:.2f} (and the actor's ray.put of it "
        f"{floor['call + actor ray.put']:.2f}); ray.put {floor['ray.put']:.2f}; an empty "
        f"call {floor['empty call']:.2f}; RayBuffer.put {floor['RayBuffer.put']:.2f} "
        f"({floor['RayBuffer.put'] / pinned:.2f}x ray.put and the call with the ref)"
    )
    if "tq" in results:
        tqf = ray.get(producers[0].tq_floor.remote(args.group_size, 20, config))
        ours = tqf["TQStream.reserve + put"]
        print(
            f"TQ's floor, the same group, unloaded (ms): kv_batch_put {tqf['kv_batch_put']:.2f}, "
            f"kv_put of tags {tqf['kv_put of tags']:.2f}, kv_list {tqf['kv_list']:.2f}; "
            f"TQStream.reserve + put {ours:.2f} ({ours / tqf['kv_batch_put']:.2f}x TQ's put of "
            "the group)"
        )
    if "verl" in results:
        base = results["verl"]["data_s"] + results["verl"]["producer_data_s"]
        for path in (p for p in paths if p != "verl"):
            ours = results[path]["data_s"] + results[path]["producer_data_s"]
            ratio = base / ours
            print(f"{path}: data plane {ratio:.1f}x lower than verl's message queue")
            if ratio < 5 and not args.no_speed_check:
                fails.append(f"{path}: data plane only {ratio:.1f}x lower than verl's (want 5x)")
    ray.shutdown()
    for f in fails:
        print("FAIL", f)
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
