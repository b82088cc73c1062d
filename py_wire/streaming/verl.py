"""verl's fully-async trainer on a py_wire stream: :class:`VerlQueueClient` has the methods of
verl 0.9.1's ``MessageQueueClient`` (``verl/experimental/fully_async_policy/message_queue.py``),
so verl's ``FullyAsyncRollouter`` and ``FullyAsyncTrainer`` run on it unchanged, given it in
place of the client ``fully_async_main.py`` builds::

    stream = RayBuffer(verl_stream_config(config))  # or TQBuffer(verl_stream_config(config))
    client = VerlQueueClient(stream, config)  # was: MessageQueueClient(MessageQueue.remote(...))

What changes against verl's queue:

- **The sample travels as a frame.** verl's rollouter hands ``put_sample`` a cloudpickled
  ``RolloutSample``; the client reads it, encodes its ``DataProto`` once with the verl adapter
  (the fields :func:`py_wire.interop.verl.to_frame` encodes, the client's schema; compact after
  the process's first sample) and puts that frame in the stream with one call
  (:meth:`~py_wire.streaming.Stream.reserve_and_put`: a slot and the commit). The sample's
  small fields (``sample_id``, ``epoch``, ``rollout_status``), the ``DataProto``'s
  ``meta_info`` and the adapter's record (padded widths, pad values) ride in the frame too, in
  one JSON field (:data:`SAMPLE_FIELD`, stored once per sample).
- **A step is rebuilt at once.** ``get_sample`` takes a whole step (``required_samples``
  samples, joined into one frame by the stream), decodes it once and rebuilds its samples with
  :func:`rollout_samples` (one ``DataProto`` per run of samples with the same record, cut into
  each sample's own tensors). What it returns is what verl's trainer reads back with
  ``ray.cloudpickle.loads``: a small pickle that loads as the rebuilt ``RolloutSample``, held
  in this process until then (it loads once, in the process that got it, as verl's trainer
  does; ``pickled=False`` hands out the object itself).
- **A full queue holds the producer back** instead of dropping the oldest sample: at most the
  stream's window (``(k + 1) * batch_groups``) samples are open at once. On a ``RayBuffer``
  a put does not wait for the buffer's answer (:meth:`RayBuffer.reserve_and_put_nowait
  <py_wire.streaming.RayBuffer.reserve_and_put_nowait>`): at most ``in_flight`` of a
  process's puts stay unanswered, each waiting in the buffer until it is admitted, and the
  next ``put_sample`` waits for the oldest; on TQ (or ``in_flight=0``) each waits for a slot.
  ``put_sample(None)`` and :meth:`VerlQueueClient.flush` wait for every put in flight.
- **The staleness bound holds at the queue.** A sample's version is verl's trajectory version
  (``non_tensor_batch["max_global_steps"]``, the oldest of its rows; the trainer's version at
  admission when the agent loop sets none). The trainer's version is verl's
  ``current_param_version``: it takes ``required_samples`` samples a step and updates its
  weights every ``trigger_parameter_sync_step`` steps, so the client counts its steps
  (:meth:`VerlQueueClient.set_trainer_version` sets it, e.g. after a checkpoint resume). A
  sample already past the bound is refused at ``put_sample``, which returns False (verl's
  rollouter counts it in ``dropped_stale_samples``); one that goes past it while stored is
  dropped at the take; both are counted in ``get_statistics()["dropped_samples"]``. With puts
  in flight, "already past" is judged against the trainer version the buffer last answered
  this process (a lower bound: versions only grow); a sample the trainer outran since is
  refused on arrival, and counted at this process's next put or flush.

The end signal (``put_sample(None)``), validation data and the shutdown flag go through a
small Ray actor beside the stream; samples never do.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import json
import math
import os
import pickle
import threading
import uuid
from collections.abc import Mapping
from typing import Any

import numpy as np

from py_wire import Frame, Schema, decode, encode, load_schema, split
from py_wire.adapters import checked_schema, hold_schema
from py_wire.interop import verl as _verl
from py_wire.streaming._errors import AdmissionTimeout, StreamError
from py_wire.streaming._policy import StreamConfig
from py_wire.streaming._step import VERSION_KEY, Stream

__all__ = [
    "SAMPLE_FIELD",
    "VerlQueueClient",
    "rollout_samples",
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
    return ext


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


#: The most puts a process has sent to a :class:`~py_wire.streaming.RayBuffer` and not had
#: answered: past it, ``put_sample`` waits for the oldest (the stream's backpressure).
MAX_IN_FLIGHT = 8

#: The verbs of the streaming contract the client calls.
_VERBS = ("reserve", "put", "reserve_and_put", "take", "ack", "release", "stats")


class VerlQueueClient:
    """verl 0.9.1's ``MessageQueueClient`` over a py_wire :class:`~py_wire.streaming.Stream`
    (see the module docstring). ``stream``: a :class:`~py_wire.streaming.RayBuffer` or
    :class:`~py_wire.streaming.tq.TQBuffer` built with :func:`verl_stream_config`
    (``batch_groups`` must be verl's ``required_samples``); ``config``: verl's config;
    ``schema``: the verl adapter schema a sample's ``DataProto`` is encoded with (one that
    ``extends`` ``verl/text`` or ``verl/qwen2_5_vl`` for a reward function's own keys);
    ``pickled``: ``put_sample`` takes and ``get_sample`` returns cloudpickled samples, as verl
    0.9.1's rollouter and trainer pass them (False: ``RolloutSample`` objects);
    ``stage``: the schema stage a rollout's sample fills (what the trainer computes next,
    log-probs; None: every required field); ``trainer_version``: the trainer's version at its
    first step (a resumed run's); ``in_flight``: the most puts of a process left unanswered
    by a ``RayBuffer`` (0: each ``put_sample`` waits for its answer).

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
        in_flight: int = MAX_IN_FLIGHT,
    ) -> None:
        import ray

        if not all(callable(getattr(stream, verb, None)) for verb in _VERBS):
            raise StreamError(
                f"stream: a py_wire Stream (RayBuffer, TQBuffer), not {type(stream).__name__}"
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
        if isinstance(in_flight, bool) or not isinstance(in_flight, int) or in_flight < 0:
            raise StreamError(f"in_flight must be an int >= 0, not {in_flight!r}")
        self.in_flight = in_flight
        self.stream = stream
        # Held in this process: the stream hands its trainer compact frames of it.
        self.schema = hold_schema(sample_schema(schema))
        self.pickled = pickled
        self.stage = stage
        self.poll_s = float(poll_s)
        self.control: Any = ray.remote(num_cpus=0)(_Control).remote()
        # The trainer's side: its steps taken, the version they started at, samples taken
        # and not yet handed out, and the stream's count when the last step was taken.
        self._start_version = trainer_version
        self._steps = 0
        self._version_set: int | None = None
        self._cache: collections.deque[Any] = collections.deque()
        # Whether this process has put a sample (its later samples go compact).
        self._sent = False
        self._queued = 0
        self._local()

    def _local(self) -> None:
        """This process's own state: its puts sent and not yet answered (oldest first)."""
        self._pending: collections.deque[Any] = collections.deque()
        self._lock = threading.Lock()

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_cache"] = collections.deque()  # a trainer's samples in hand stay its own
        state["_sent"] = False
        state["schema"] = self.schema.canonical_json  # a Schema object's pin is per process
        del state["_pending"], state["_lock"]  # a process's puts in flight are its own
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        state["schema"] = hold_schema(Schema.from_dict(json.loads(state["schema"])))
        self.__dict__.update(state)
        self._local()

    # -- the rollouter's side -------------------------------------------------------------

    async def put_sample(self, sample: Any) -> bool:
        """Puts one sample (verl's cloudpickled ``RolloutSample``, or None: the rollouter has
        finished), waiting while the stream's window is full. False when the sample was
        generated past the staleness bound (refused, counted)."""
        return await asyncio.to_thread(self.put_sample_sync, sample)

    def put_sample_sync(self, sample: Any) -> bool:
        import ray

        if sample is None:
            self.flush()  # every sample this process put is in the stream before the end
            ray.get(self.control.end.remote())
            return True
        if isinstance(sample, bytes | bytearray | memoryview):
            sample = pickle.loads(sample)
        fields, version = self._fields(sample)
        nowait = getattr(self.stream, "reserve_and_put_nowait", None)
        if version is not None and nowait is not None:
            return self._put_nowait(nowait, fields, version)
        while True:
            try:
                if version is None:
                    # No version recorded: the trainer's at admission, so a slot first.
                    gid, got = self.stream.reserve(None)
                    frame = self._encode(fields, got)
                    self.stream.put(gid, frame)
                else:
                    # One call: a slot and the commit (the frame states its version).
                    self.stream.reserve_and_put(self._encode(fields, version))
                self._sent = True
                return True
            except AdmissionTimeout:
                continue  # backpressure: the trainer is behind; wait on, never drop
            except StreamError as e:
                if "staleness bound" not in str(e):
                    raise
                ray.get(self.control.refuse.remote())
                return False

    def _put_nowait(self, nowait: Any, fields: dict[str, Any], version: int) -> bool:
        """A sample of a known version, sent without waiting for the stream's answer (a
        :class:`~py_wire.streaming.RayBuffer`): at most :attr:`in_flight` of this process's
        puts stay unanswered, so a full window still holds the rollouter back. The first put
        of a process waits for its answer (the stream then holds the schema its later, compact
        frames name)."""
        import ray

        frame = self._encode(fields, version)  # embedded until a put of this process went in
        with self._lock:
            self._settle(block=False)
            try:
                pending = nowait(frame)
            except StreamError as e:  # past the bound at the trainer version last heard of
                if "staleness bound" not in str(e):
                    raise
                ray.get(self.control.refuse.remote())
                return False
            self._pending.append(pending)
            limit = self.in_flight if self._sent else 0
            answer = True
            while len(self._pending) > limit:
                answer = self._settle_one()
            if limit:
                return True  # in flight: committed, or refused on arrival and counted then
            self._sent = self._sent or answer
            return answer  # this put's own answer, the last settled

    def _settle_one(self) -> bool:
        """Waits for this process's oldest put in flight: True once its sample is in the
        stream; False when the stream refused it as past the bound (the trainer moved on
        before it arrived), counted as refused."""
        import ray

        pending = self._pending.popleft()
        try:
            pending.result()
        except StreamError as e:
            if "staleness bound" not in str(e):
                raise
            ray.get(self.control.refuse.remote())
            return False
        return True

    def _settle(self, block: bool) -> None:
        while self._pending and (block or self._pending[0].done()):
            self._settle_one()

    def flush(self) -> None:
        """Waits until every sample this process put is in the stream (or refused as past the
        bound, and counted), raising the first refusal of another cause (a sample of another
        schema). ``put_sample(None)`` flushes before it signals the end."""
        with self._lock:
            self._settle(block=True)

    def _encode(self, fields: dict[str, Any], version: int) -> Frame:
        """The sample's frame: embedded until this process has put one (the stream's actor,
        or TQ, and the trainer then hold the schema), compact after (its header names the
        schema by fingerprint: a smaller header, read in a fraction of the time)."""
        meta = {VERSION_KEY: str(version)}
        return encode(fields, self.schema, stage=self.stage, metadata=meta, compact=self._sent)

    def _fields(self, sample: Any) -> tuple[dict[str, Any], int | None]:
        """The sample's fields for :attr:`schema` (its ``DataProto`` through the verl adapter,
        and its own facts in :data:`SAMPLE_FIELD`), ready for the one encode, and its policy
        version."""
        if not dataclasses.is_dataclass(sample) or not hasattr(sample, "full_batch"):
            raise TypeError(
                "put_sample takes a verl RolloutSample (a dataclass with full_batch), or its "
                f"cloudpickle, not {type(sample).__name__}"
            )
        data = sample.full_batch
        meta = dict(getattr(data, "meta_info", None) or {})
        fields, verl_meta = _verl.to_fields(data, self.schema, drop_meta_info=True)
        facts = {
            f.name: getattr(sample, f.name)
            for f in dataclasses.fields(sample)
            if f.name != "full_batch"
        }
        record = {
            "rows": len(data),
            "verl": verl_meta,
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
        fields[SAMPLE_FIELD] = [json.loads(text)] * len(data)
        return fields, _version(data.non_tensor_batch)

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
                # The step's samples as one frame (joined in Rust), rebuilt in one pass.
                step = self.stream.take(ranks=1, timeout_s=self.poll_s)
            except AdmissionTimeout:
                if ended:  # every sample was put before the end: no whole step is left
                    return None, self._queue_size()
                continue
            try:
                frame = step.frames[0]
                if frame is None:  # ranks=1: the one rank has every group of the step
                    raise StreamError("a step of no frame on its one rank")
                samples = rollout_samples(frame)
            except BaseException:
                self.stream.release(step)  # not trained: its samples stay for the next take
                raise
            self.stream.ack(step)
            self._steps += 1
            self._cache.extend(samples)
            self._queued = self._queue_size()
        sample = self._cache.popleft()
        out = _handed(sample) if self.pickled else sample
        return out, self._queued + len(self._cache)

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


#: Samples ``get_sample`` handed out pickled, by token, until the trainer loads them (in this
#: process, as verl's trainer does, right after it got them); the oldest are let go first.
_HANDED: collections.OrderedDict[str, Any] = collections.OrderedDict()
MAX_HANDED = 4096


def _handed(sample: Any) -> bytes:
    """What ``get_sample`` hands verl's trainer, which ``ray.cloudpickle.loads`` it: a pickle
    of a token that loads as ``sample``, rebuilt already from the step's frame (the sample
    does not travel again: it is in this process)."""
    token = uuid.uuid4().hex
    _HANDED[token] = sample
    if len(_HANDED) > MAX_HANDED:
        _HANDED.popitem(last=False)
    return pickle.dumps(_Claim(token, os.getpid()), protocol=5)


class _Claim:
    def __init__(self, token: str, pid: int) -> None:
        self.token, self.pid = token, pid

    def __reduce__(self) -> tuple[Any, ...]:
        return _claim, (self.token, self.pid)


def _claim(token: str, pid: int) -> Any:
    sample = _HANDED.pop(token, None)
    if sample is None:
        raise StreamError(
            f"a sample get_sample handed out pickled (in process {pid}) is not held by this "
            f"process ({os.getpid()}): it loads once, in the process that got it, as verl's "
            "trainer loads it (pickled=False hands out the RolloutSample itself)"
        )
    return sample


def rollout_samples(frame: Frame) -> list[Any]:
    """verl's ``RolloutSample`` objects of a step's frame (its samples' rows, joined): the
    frame decoded once, each run of samples with the same ``verl.*`` record rebuilt into one
    ``DataProto`` by the verl adapter, then cut into the samples' own (each with its own
    tensors: a sample pickles its own bytes only)."""
    ext = checked_schema(frame)
    if SAMPLE_FIELD not in ext.fields:
        raise StreamError(f"a step frame of schema {ext.name!r}, not one of sample_schema")
    fields = decode(frame)
    records = fields.pop(SAMPLE_FIELD, None)
    fields.pop(VERSION_KEY, None)
    if not records or any(r is None for r in records):
        raise StreamError(f"a step frame with rows but no {SAMPLE_FIELD!r} record")
    samples: list[tuple[int, dict[str, Any]]] = []  # (first row, record)
    row = 0
    while row < len(records):
        record = records[row]
        rows = record.get("rows") if isinstance(record, dict) else None
        if not isinstance(rows, int) or not 0 < rows <= len(records) - row:
            raise StreamError(
                f"row {row} of a step frame: its {SAMPLE_FIELD!r} record says {rows!r} rows, "
                f"and {len(records) - row} are left"
            )
        samples.append((row, record))
        row += rows
    runs: list[list[tuple[int, dict[str, Any]]]] = []
    for sample in samples:
        if runs and runs[-1][0][1]["verl"] == sample[1]["verl"]:
            runs[-1].append(sample)
        else:
            runs.append([sample])
    if len(runs) == 1:
        parts = [(frame, fields)]
    else:
        sizes = [sum(r["rows"] for _, r in run) for run in runs]
        parts = [(f, decode(f)) for f in split(frame, sizes)]
        for _, got in parts:
            got.pop(SAMPLE_FIELD, None)
            got.pop(VERSION_KEY, None)
    out: list[Any] = []
    for run, (part, got) in zip(runs, parts, strict=True):
        proto = _verl.from_fields(got, part, record=run[0][1]["verl"], meta_info={})
        out += _cut(proto, [r for _, r in run])
    return out


def _cut(proto: Any, records: list[dict[str, Any]]) -> list[Any]:
    """``proto`` cut into its samples' ``RolloutSample`` objects, by their ``records``."""
    import torch
    from tensordict import TensorDict
    from verl.experimental.fully_async_policy.detach_utils import (  # type: ignore[import-not-found, import-untyped, unused-ignore]
        RolloutSample,
    )

    sizes = [int(r["rows"]) for r in records]
    keys = list(proto.batch.keys()) if proto.batch is not None else []
    tensors = {k: torch.split(proto.batch[k], sizes) for k in keys}
    cls = type(proto)
    out = []
    start = 0
    for i, record in enumerate(records):
        end = start + sizes[i]
        batch = TensorDict({k: tensors[k][i].clone() for k in keys}, batch_size=[sizes[i]])
        non_tensor = {k: v[start:end].copy() for k, v in proto.non_tensor_batch.items()}
        data = cls(
            batch=batch if keys else None,
            non_tensor_batch=non_tensor,
            meta_info=record["meta_info"],
        )
        out.append(RolloutSample(full_batch=data, **record["fields"]))
        start = end
    return out
