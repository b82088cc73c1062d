"""verl's fully-async trainer on a py_wire stream: :class:`VerlQueueClient` has the methods of
verl 0.9.1's ``MessageQueueClient`` (``verl/experimental/fully_async_policy/message_queue.py``),
so verl's ``FullyAsyncRollouter`` and ``FullyAsyncTrainer`` run on it unchanged, given it in
place of the client ``fully_async_main.py`` builds::

    stream = RayBuffer(verl_stream_config(config))
    client = VerlQueueClient(stream, config)  # was: MessageQueueClient(MessageQueue.remote(...))

What changes against verl's queue:

- **The sample travels as a frame.** verl's rollouter hands ``put_sample`` a cloudpickled
  ``RolloutSample``; the client reads it, encodes its ``DataProto`` with the verl adapter
  (:func:`py_wire.interop.verl.to_frame`, the client's schema) and puts that frame in the stream
  (Ray's object store once, zero-copy to the trainer). The sample's small fields (``sample_id``,
  ``epoch``, ``rollout_status``), the ``DataProto``'s ``meta_info`` and the adapter's record
  (padded widths, pad values) ride in the frame too, in one JSON field
  (:data:`SAMPLE_FIELD`, stored once per sample). ``get_sample`` returns what verl's trainer
  reads back with ``ray.cloudpickle.loads``: a pickle of the frame (its bytes in-band, one
  copy), which rebuilds the ``RolloutSample`` with :func:`py_wire.interop.verl.from_frame`.
- **A full queue holds the producer back** instead of dropping the oldest sample: at most the
  stream's window (``(k + 1) * batch_groups``) samples are open at once, and ``put_sample``
  waits for a slot.
- **The staleness bound holds at the queue.** A sample's version is verl's trajectory version
  (``non_tensor_batch["max_global_steps"]``, the oldest of its rows; the trainer's version at
  admission when the agent loop sets none). The trainer's version is verl's
  ``current_param_version``: it takes ``required_samples`` samples a step and updates its
  weights every ``trigger_parameter_sync_step`` steps, so the client counts its steps
  (:meth:`VerlQueueClient.set_trainer_version` sets it, e.g. after a checkpoint resume). A
  sample already past the bound is refused at ``put_sample``, which returns False (verl's
  rollouter counts it in ``dropped_stale_samples``); one that goes past it while stored is
  dropped at the take; both are counted in ``get_statistics()["dropped_samples"]``.

The end signal (``put_sample(None)``), validation data and the shutdown flag go through a
small Ray actor beside the stream; samples never do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import math
import pickle
from collections.abc import Mapping
from typing import Any

import numpy as np

from py_wire._decode import checked_schema, decode
from py_wire._encode import encode
from py_wire._native import Frame
from py_wire._schema import Schema, load_schema
from py_wire.interop import verl as _verl
from py_wire.streaming._errors import AdmissionTimeout, StreamError
from py_wire.streaming._policy import StreamConfig
from py_wire.streaming._step import VERSION_KEY, Stream

__all__ = [
    "SAMPLE_FIELD",
    "VerlQueueClient",
    "sample_schema",
    "verl_stream_config",
]

#: The JSON field a sample's own facts travel in (beside its ``DataProto``'s fields).
SAMPLE_FIELD = "rollout_sample"
_SUFFIX = "+" + SAMPLE_FIELD
_EXTRA_FIELDS = {
    SAMPLE_FIELD: {
        "tier": "packed",
        "dtype": "uint8",
        "shape": ["*"],
        "required": False,
        "encoding": "json",
        "description": "A verl RolloutSample's fields beside full_batch, its DataProto's "
        "meta_info and the verl adapter's record (py_wire.streaming.verl).",
    },
    VERSION_KEY: {
        "tier": "scalar",
        "dtype": "int64",
        "shape": [],
        "required": False,
        "stages": ["train"],
        "description": "The policy version of the row's sample, filled when a step joins samples.",
    },
}
_BY_FINGERPRINT: dict[str, Schema] = {}


def sample_schema(schema: Schema | str = "verl/text") -> Schema:
    """``schema`` (a verl adapter schema) with the two fields a streamed sample adds: its
    facts (:data:`SAMPLE_FIELD`) and its rows' policy version (so one step may join samples of
    two versions the bound allows). Named ``<name>+rollout_sample``."""
    base = load_schema(schema)
    if base.name.endswith(_SUFFIX):
        return base
    data = json.loads(base.canonical_json)
    clash = sorted(set(_EXTRA_FIELDS) & set(data["fields"]))
    if clash:
        raise StreamError(f"schema {base.name!r} declares {clash} already: the client adds them")
    data["name"] = base.name + _SUFFIX
    data["fields"].update(_EXTRA_FIELDS)
    ext = Schema.from_dict(data)
    _BY_FINGERPRINT[ext.fingerprint] = base
    return ext


def _base_schema(ext: Schema) -> Schema:
    base = _BY_FINGERPRINT.get(ext.fingerprint)
    if base is None:
        if not ext.name.endswith(_SUFFIX):
            raise StreamError(f"a sample frame has schema {ext.name!r}, not one of sample_schema")
        data = json.loads(ext.canonical_json)
        for name in _EXTRA_FIELDS:
            data["fields"].pop(name, None)
        data["name"] = ext.name[: -len(_SUFFIX)]
        base = _BY_FINGERPRINT[ext.fingerprint] = Schema.from_dict(data)
    return base


def _async_training(config: Any) -> tuple[int, int, float]:
    """verl's ``required_samples``, ``trigger_parameter_sync_step`` and
    ``staleness_threshold`` from its config (an ``omegaconf`` config or nested mappings)."""
    try:
        mini = int(config["actor_rollout_ref"]["actor"]["ppo_mini_batch_size"])
        training = config["async_training"]
        batches = int(training["require_batches"])
        sync = int(training["trigger_parameter_sync_step"])
        threshold = float(training.get("staleness_threshold", 1))
    except (KeyError, TypeError, ValueError) as e:
        raise StreamError(
            "config: not a verl fully-async config (actor_rollout_ref.actor.ppo_mini_batch_size, "
            "async_training.require_batches, async_training.trigger_parameter_sync_step and "
            f"async_training.staleness_threshold): {e!r}"
        ) from None
    if mini < 1 or batches < 1 or sync < 1 or not math.isfinite(threshold) or threshold < 0:
        raise StreamError(
            f"config: ppo_mini_batch_size={mini}, require_batches={batches}, "
            f"trigger_parameter_sync_step={sync} must be >= 1 and staleness_threshold="
            f"{threshold} finite and >= 0"
        )
    return mini * batches, sync, threshold


def verl_stream_config(config: Any, **overrides: Any) -> StreamConfig:
    """The :class:`StreamConfig` of verl's fully-async ``config``: a step takes verl's
    ``required_samples`` (``ppo_mini_batch_size * require_batches``) samples, and a sample may
    train at most ``ceil(staleness_threshold)`` versions after the one that generated it.
    ``overrides`` are other :class:`StreamConfig` settings (``max_bytes``, ``policy``, ...)."""
    required, _, threshold = _async_training(config)
    settings: dict[str, Any] = {
        "max_staleness": math.ceil(threshold),
        "batch_groups": required,
    }
    return StreamConfig(**(settings | overrides))


@dataclasses.dataclass
class _Control:
    """The end signal, the shutdown flag and validation data (a Ray actor's state)."""

    ended: int = 0
    running: bool = True
    refused: int = 0
    validate: collections.deque[Any] = dataclasses.field(default_factory=collections.deque)

    def end(self) -> None:
        self.ended += 1

    def refuse(self) -> None:
        self.refused += 1

    def shutdown(self) -> None:
        self.running = False

    def state(self) -> tuple[int, bool, int]:
        return self.ended, self.running, self.refused

    def put_validate(self, data: Any) -> None:
        self.validate.append(data)

    def get_validate(self) -> Any:
        return self.validate.popleft() if self.validate else None


class VerlQueueClient:
    """verl 0.9.1's ``MessageQueueClient`` over a py_wire :class:`~py_wire.streaming.Stream`
    (see the module docstring). ``stream``: a :class:`~py_wire.streaming.RayBuffer` built
    with :func:`verl_stream_config`
    (``batch_groups`` must be verl's ``required_samples``); ``config``: verl's config;
    ``schema``: the verl adapter schema a sample's ``DataProto`` is encoded with (one that
    ``extends`` ``verl/text`` or ``verl/qwen2_5_vl`` for a reward function's own keys);
    ``pickled``: ``put_sample`` takes and ``get_sample`` returns cloudpickled samples, as verl
    0.9.1's rollouter and trainer pass them (False: ``RolloutSample`` objects);
    ``stage``: the schema stage a rollout's sample fills (what the trainer computes next,
    log-probs; None: every required field); ``trainer_version``: the trainer's version at its
    first step (a resumed run's).

    Build it in the driver and hand it to both sides (it pickles: the stream's and the control
    actor's handles). Its ``put_*`` calls are the rollouter's, its ``get_sample`` the trainer's
    (one trainer: the client counts the trainer's steps)."""

    def __init__(
        self,
        stream: Stream,
        config: Any,
        schema: Schema | str = "verl/text",
        *,
        pickled: bool = True,
        stage: str | None = "logprob",
        trainer_version: int = 0,
        poll_s: float = 1.0,
    ) -> None:
        import ray

        from py_wire.streaming.ray_buffer import RayBuffer

        if not isinstance(stream, RayBuffer):
            # verl's queue sizes come from the stream's counts of stored and acked groups,
            # which TQBuffer reports as 0 (no one process sees every put).
            raise StreamError(
                f"stream: a RayBuffer, not {type(stream).__name__} (the client reads verl's "
                "queue size from the stream's stored and acked counts, which only RayBuffer "
                "keeps)"
            )
        self.required, self.sync_steps, _ = _async_training(config)
        stream_config = getattr(stream, "config", None)
        if isinstance(stream_config, StreamConfig) and stream_config.batch_groups != self.required:
            raise StreamError(
                f"stream: batch_groups is {stream_config.batch_groups}, but verl's trainer takes "
                f"required_samples = {self.required} samples a step (verl_stream_config(config))"
            )
        self.max_queue_size = (
            stream_config.window if isinstance(stream_config, StreamConfig) else self.required
        )
        if not isinstance(pickled, bool):
            raise TypeError(f"pickled must be a bool, not {type(pickled).__name__}")
        if not isinstance(trainer_version, int) or trainer_version < 0:
            raise StreamError(f"trainer_version must be an int >= 0, not {trainer_version!r}")
        self.stream = stream
        self.schema = sample_schema(schema)
        self.base = load_schema(schema)
        self.pickled = pickled
        self.stage = stage
        self.poll_s = float(poll_s)
        self.control: Any = ray.remote(num_cpus=0)(_Control).remote()
        # The trainer's side: its steps taken, the version they started at, samples taken
        # and not yet handed out, and the stream's count when the last step was taken.
        self._start_version = trainer_version
        self._steps = 0
        self._version_set: int | None = None
        self._cache: collections.deque[Frame] = collections.deque()
        self._queued = 0

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = collections.deque()  # a trainer's samples in hand stay its own
        return state

    # -- the rollouter's side -------------------------------------------------------------

    async def put_sample(self, sample: Any) -> bool:
        """Puts one sample (verl's cloudpickled ``RolloutSample``, or None: the rollouter has
        finished), waiting while the stream's window is full. False when the sample was
        generated past the staleness bound (refused, counted)."""
        return await asyncio.to_thread(self.put_sample_sync, sample)

    def put_sample_sync(self, sample: Any) -> bool:
        import ray

        if sample is None:
            ray.get(self.control.end.remote())
            return True
        if isinstance(sample, bytes | bytearray | memoryview):
            sample = pickle.loads(sample)
        rows, version = self._rows(sample)
        while True:
            try:
                gid, version = self.stream.reserve(version)
                break
            except AdmissionTimeout:
                continue  # backpressure: the trainer is behind; wait on, never drop
            except StreamError as e:
                if "staleness bound" not in str(e):
                    raise
                ray.get(self.control.refuse.remote())
                return False
        frame = encode(rows, self.schema, stage=self.stage, metadata={VERSION_KEY: str(version)})
        self.stream.put(gid, frame)
        return True

    def _rows(self, sample: Any) -> tuple[dict[str, Any], int | None]:
        """The sample's rows for :attr:`schema` (its ``DataProto`` through the verl adapter,
        and its own facts in :data:`SAMPLE_FIELD`) and its policy version."""
        if not dataclasses.is_dataclass(sample) or not hasattr(sample, "full_batch"):
            raise TypeError(
                "put_sample takes a verl RolloutSample (a dataclass with full_batch), or its "
                f"cloudpickle, not {type(sample).__name__}"
            )
        data = sample.full_batch
        meta = dict(getattr(data, "meta_info", None) or {})
        frame = _verl.to_frame(data, self.base, self.stage, drop_meta_info=True)
        rows = decode(frame, layout="list")
        facts = {
            f.name: getattr(sample, f.name)
            for f in dataclasses.fields(sample)
            if f.name != "full_batch"
        }
        record = {
            "stage": self.stage,
            "verl": {k: v for k, v in frame.metadata.items() if k.startswith("verl.")},
            "meta_info": meta,
            "fields": facts,
        }
        try:
            text = json.dumps(record, allow_nan=False, default=_plain)
        except (TypeError, ValueError) as e:
            raise StreamError(
                f"sample {facts.get('sample_id')!r}: its fields and meta_info travel as JSON, "
                f"and {e}"
            ) from None
        rows[SAMPLE_FIELD] = [json.loads(text)] * frame.num_rows
        return rows, _version(data.non_tensor_batch)

    async def put_validate(self, data: Any) -> bool:

        await asyncio.wrap_future(self.control.put_validate.remote(data).future())
        return True

    # -- the trainer's side ---------------------------------------------------------------

    async def get_sample(self) -> Any:
        """The next sample and the samples still queued, waiting for one; ``(None, n)``
        once the rollouter has finished and no whole step is left (verl's trainer then stops);
        None after :meth:`shutdown`."""
        return await asyncio.to_thread(self.get_sample_sync)

    def get_sample_sync(self) -> Any:
        import ray

        while not self._cache:
            ended, running, _ = ray.get(self.control.state.remote())
            if not running:
                return None
            version = self._start_version + self._steps // self.sync_steps
            if version != self._version_set:
                self.stream.set_trainer_version(version)
                self._version_set = version
            try:
                step = self.stream.take(ranks=self.required, timeout_s=self.poll_s)
            except AdmissionTimeout:
                if ended:  # every sample was put before the end: no whole step is left
                    return None, self._queue_size()
                continue
            self.stream.ack(step)
            self._steps += 1
            self._cache.extend(f for f in step.frames if f is not None)
            self._queued = self._queue_size()
        frame = self._cache.popleft()
        out = _Sample(frame)
        sample = pickle.dumps(out, protocol=5) if self.pickled else out.rebuild()
        return sample, self._queued + len(self._cache)

    def set_trainer_version(self, version: int) -> None:
        """The trainer's version now (a resumed run's ``current_param_version``); later steps
        count on from it."""
        if not isinstance(version, int) or version < 0:
            raise StreamError(f"version must be an int >= 0, not {version!r}")
        self._start_version, self._steps = version, 0

    def get_validate_sync(self) -> Any:
        import ray

        return ray.get(self.control.get_validate.remote())

    # -- sizes, statistics, the end -------------------------------------------------------

    def _queue_size(self, stats: Mapping[str, Any] | None = None) -> int:
        s = self.stream.stats() if stats is None else stats
        return int(s["stored"] - s["acked"] - s["dropped_stale"])

    async def get_queue_size(self) -> int:
        return await asyncio.to_thread(self.get_queue_size_sync)

    def get_queue_size_sync(self) -> int:
        """Samples stored and not yet taken by the trainer."""
        return self._queue_size()

    async def get_statistics(self) -> dict[str, Any]:
        return await asyncio.to_thread(self.get_statistics_sync)

    def get_statistics_sync(self) -> dict[str, Any]:
        """verl's keys (``queue_size``, ``total_produced``, ``total_consumed``,
        ``dropped_samples``: stale ones, refused at the put or dropped at the take, never a
        sample for want of room; ``max_queue_size``: the stream's window), and the stream's
        own counts under ``stream``."""
        import ray

        stats = self.stream.stats()
        _, _, refused = ray.get(self.control.state.remote())
        return {
            "queue_size": self._queue_size(stats),
            "total_produced": int(stats["stored"]),
            "total_consumed": int(stats["acked"]),
            "dropped_samples": int(stats["dropped_stale"]) + refused,
            "max_queue_size": self.max_queue_size,
            "stream": stats,
        }

    async def get_memory_usage(self) -> dict[str, Any]:
        stats = await asyncio.to_thread(self.stream.stats)
        stored = int(stats["stored_bytes"])
        return {
            "queue_samples": self._queue_size(stats),
            "estimated_memory_bytes": stored,
            "estimated_memory_mb": stored / (1024 * 1024),
        }

    async def clear_queue(self) -> None:
        """Takes and discards every whole step the stream holds now."""
        while True:
            try:
                step = await asyncio.to_thread(
                    self.stream.take, self.required, min(self.poll_s, 0.1)
                )
            except AdmissionTimeout:
                return
            await asyncio.to_thread(self.stream.ack, step)

    async def shutdown(self) -> None:
        """Wakes the trainer: its next ``get_sample`` returns None. The stream stays (its
        :meth:`~py_wire.streaming.Stream.close` ends it)."""
        await asyncio.wrap_future(self.control.shutdown.remote().future())


def _plain(value: Any) -> Any:
    """numpy scalars and arrays as JSON takes them (verl's statistics hold some)."""
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def _version(non_tensor: Mapping[str, Any]) -> int | None:
    """A sample's policy version: verl's trajectory version (``max_global_steps``), the oldest
    of its rows; None when the agent loop recorded none."""
    steps = non_tensor.get("max_global_steps")
    if steps is None:
        return None
    found = [int(v) for v in steps if v is not None]
    return min(found) if found else None


class _Sample:
    """A sample as ``get_sample`` hands it to verl's trainer: its frame, pickled in-band, and
    rebuilt into verl's ``RolloutSample`` when unpickled."""

    def __init__(self, frame: Frame) -> None:
        self.frame = frame

    def __reduce__(self) -> tuple[Any, ...]:
        return _rebuild, (self.frame,)

    def rebuild(self) -> Any:
        return _rebuild(self.frame)


def _rebuild(frame: Frame) -> Any:
    """verl's ``RolloutSample`` from a sample's frame."""
    from verl.experimental.fully_async_policy.detach_utils import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
        RolloutSample,
    )

    ext = checked_schema(frame)
    rows = decode(frame, layout="list")
    records = rows.pop(SAMPLE_FIELD, None)
    rows.pop(VERSION_KEY, None)
    if not records:
        raise StreamError(f"a sample frame without its {SAMPLE_FIELD!r} field")
    record = records[0]
    data = encode(rows, _base_schema(ext), stage=record["stage"], metadata=record["verl"])
    batch = _verl.from_frame(data, meta_info=record["meta_info"])
    return RolloutSample(full_batch=batch, **record["fields"])
