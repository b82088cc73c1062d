"""Fully-async rollouts on TransferQueue: TQ stores the groups, its controller runs the
sampler, its tags carry each group's policy version; py_wire adds the rules.

- **One TQ row per group** (:mod:`py_wire.interop.transfer_queue`'s layout: a frame per
  group in the ``py_wire.text`` column, media in ``py_wire.media``), tagged
  ``{"policy_version": v, "nbytes": n, "tokens": t, "state": "stored"}``.
- **Reservations are TQ keys without fields.** :meth:`TQStream.reserve` adds the group's key
  with only its tags (``state: "reserved"``, the version, the time): TQ's controller does not
  count it ready until the put writes its columns, so a producer that dies mid-put leaves no
  partial group visible, and the sampler sees what is still being generated.
- :class:`StalenessSampler` (a ``transfer_queue.sampler.BaseSampler``, running inside TQ's
  controller) reads the versions from the partition's tags and applies
  :func:`py_wire.streaming._policy.choose`: oldest groups first within the bound, whole groups
  (a group is one row), balanced across DP ranks; stale ones paced or dropped and counted.
- **Leases on TQ's consumption table.** A row the sampler hands out is marked consumed by TQ;
  the consumer clears it (``kv_clear``, TQ's own) when its step is done. A row not cleared
  within the lease goes back: the sampler sets its consumption status to 0 again, and TQ
  offers it to the next ``get_meta``.

Start TQ with the sampler and polling mode (a step that must wait gets an empty batch)::

    ray.init(num_cpus=4)
    transfer_queue.init(tq_config(StreamConfig(max_staleness=1, batch_groups=8)))
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from typing import Any

from py_wire._native import Frame
from py_wire._ops import concat
from py_wire.streaming._policy import (
    Counts,
    Group,
    StreamConfig,
    StreamError,
    admits,
    balance,
    choose,
    wait_until,
)
from py_wire.streaming.ray_buffer import VERSION_KEY

#: TQ task name the trainer consumes under.
TASK = "py_wire.train"


def _tq() -> Any:
    return importlib.import_module("transfer_queue")


def _base() -> type:
    try:
        return importlib.import_module("transfer_queue.sampler").BaseSampler  # type: ignore[no-any-return]
    except ImportError:  # TQ not installed: the sampler is still importable, for its rules
        return object


class StalenessSampler(_base()):  # type: ignore[misc]
    """TQ sampler handing out whole groups oldest first within the staleness bound, balanced
    across DP ranks. ``sampling_config`` of each ``get_meta``: ``trainer_version``, ``dp_rank``,
    ``dp_size`` and ``batch_index`` (the step: every rank of one step gets its share of the
    same choice)."""

    def __init__(self, config: StreamConfig) -> None:
        super().__init__()
        self.config = config
        self.counts = Counts()
        # partition -> index -> (key, lease deadline)
        self.leases: dict[str, dict[int, tuple[str, float]]] = {}
        # partition -> batch_index -> per-rank global indexes
        self.steps: dict[str, dict[Any, list[list[int]]]] = {}

    def _return_expired(self, partition: Any, task_name: str) -> list[int]:
        """Ends the leases of cleared rows (acked) and gives back the rows whose lease ran out:
        their consumption status is 0 again, as for rows never handed out. Returns those."""
        returned: list[int] = []
        leases = self.leases.setdefault(partition.partition_id, {})
        now = time.monotonic()
        keys = partition.keys_mapping if hasattr(partition, "keys_mapping") else {}
        index_key = {i: k for k, i in keys.items()}
        for index, (key, until) in list(leases.items()):
            if index_key.get(index) != key:  # cleared: the consumer acked
                del leases[index]
                self.counts.acked += 1
            elif until < now:  # not acked in time: offer it again
                del leases[index]
                _, status = partition.get_consumption_status(task_name, mask=False)
                status[index] = 0
                self.counts.lease_returns += 1
                returned.append(index)
        return returned

    def sample(
        self,
        ready_indexes: list[int],
        batch_size: int,
        task_name: str = "",
        partition_id: str = "",
        *args: Any,
        **kwargs: Any,
    ) -> tuple[list[int], list[int]]:
        partition = kwargs.get("partition")
        if partition is None:
            raise StreamError("StalenessSampler needs TQ's partition (transferqueue >= 0.1.11)")
        returned = self._return_expired(partition, task_name)
        dp_rank = int(kwargs.get("dp_rank", 0))
        dp_size = int(kwargs.get("dp_size", 1))
        batch_index = kwargs.get("batch_index")
        steps = self.steps.setdefault(partition.partition_id, {})
        if batch_index is not None and batch_index in steps:
            part = steps[batch_index][dp_rank]
            return part, part
        trainer_version = int(kwargs.get("trainer_version", 0))
        ready = set(ready_indexes) | set(returned)
        keys = {i: k for k, i in partition.keys_mapping.items()}
        groups: list[Group] = []
        for index in keys:
            tags = partition.custom_meta.get(index, {})
            if VERSION_KEY not in tags:
                continue
            reserved = tags.get("state") == "reserved"
            if reserved and time.time() - float(tags.get("at", 0)) > self.config.reservation_s:
                continue  # the producer gave up or died: nothing to wait for
            if not reserved and index not in ready:
                continue  # stored, and consumed (leased) or not visible yet
            groups.append(
                Group(
                    str(index),
                    int(tags[VERSION_KEY]),
                    int(tags.get("seq", index)),
                    ready=index in ready,
                    tokens=int(tags.get("tokens", 0)),
                    nbytes=int(tags.get("nbytes", 0)),
                )
            )
        choice = choose(groups, trainer_version, self.config)
        dropped = [int(g) for g in choice.drop]
        self.counts.dropped_stale += len(dropped)
        if choice.wait:
            return [], dropped
        picked = [g for g in groups if g.gid in set(choice.take)]
        parts = [[int(g) for g in part] for part in balance(picked, dp_size)]
        until = time.monotonic() + self.config.lease_s
        leases = self.leases.setdefault(partition.partition_id, {})
        for index in (i for part in parts for i in part):
            leases[index] = (keys[index], until)
        self.counts.delivered += len(picked)
        if batch_index is not None:
            steps[batch_index] = parts
        taken = [i for part in parts for i in part]
        # Every rank's rows are consumed now, so no other get_meta hands them out.
        return parts[dp_rank], taken + dropped

    def has_cached_result(
        self, partition_id: str, task_name: str, sampling_config: dict[str, Any] | None = None
    ) -> bool:
        batch_index = (sampling_config or {}).get("batch_index")
        return batch_index is not None and batch_index in self.steps.get(partition_id, {})

    def clear_cache(self, partition_id: str) -> None:
        self.steps.pop(partition_id, None)
        self.leases.pop(partition_id, None)


def tq_config(config: StreamConfig, **overrides: Any) -> Any:
    """TQ's ``init`` config with :class:`StalenessSampler` and polling mode."""
    from omegaconf import OmegaConf

    conf: Any = OmegaConf.create(
        {"controller": {"sampler": StalenessSampler(config), "polling_mode": True}},
        flags={"allow_objects": True},
    )
    if overrides:
        conf = OmegaConf.merge(conf, OmegaConf.create(overrides, flags={"allow_objects": True}))
    return conf


class TQStream:
    """Producer and trainer calls on one TQ partition (one object per process; picklable
    settings only, the TQ client is the process's own)."""

    def __init__(self, config: StreamConfig, partition_id: str = "py_wire.rollouts") -> None:
        self.config = config
        self.partition_id = partition_id
        self._seq = 0
        self._untagged: dict[str, float] = {}
        #: Seconds the last :meth:`take` waited for the sampler to hand a step.
        self.last_wait_s = 0.0

    # -- producers ----------------------------------------------------------------------------

    def _open(self, before_key: str | None = None) -> tuple[int, int]:
        """Groups open (reserved within their time, or stored) and bytes stored, from TQ's
        tags in one controller round trip. ``before_key``: count only the keys TQ's controller
        created before this one. ``kv_list`` lists keys in the order the controller created
        them, so every producer agrees who came first, and each key created earlier is in the
        list by the time the later producer counts; a producer's own clock cannot give that
        order (a reservation stamped first may become visible last). Keys listed without tags
        yet are reservations whose tags are on their way (TQ creates a key and sets its tags
        in two calls): counted as open, until this stream has seen one untagged for longer
        than a reservation lasts (its producer died between the two calls)."""
        listed = _tq().kv_list(partition_id=self.partition_id).get(self.partition_id, {})
        now = time.time()
        open_groups = stored = 0
        for key, tags in listed.items():
            if before_key is not None and str(key) == before_key:
                break
            if tags.get("state") == "reserved":
                if now - float(tags.get("at", 0)) > self.config.reservation_s:
                    continue
                open_groups += 1
            elif VERSION_KEY in tags:
                open_groups += 1
                stored += int(tags.get("nbytes", 0))
            elif before_key is not None and not tags:
                seen = self._untagged.setdefault(str(key), now)
                if now - seen <= self.config.reservation_s:
                    open_groups += 1
        if self._untagged:  # forget keys gone from the partition or tagged since
            self._untagged = {k: t for k, t in self._untagged.items() if not listed.get(k, True)}
        return open_groups, stored

    def reserve(
        self, key: str, version: int | Callable[[], int], timeout_s: float | None = None
    ) -> int:
        """Waits for a slot (admission: at most ``(k + 1) * batch_groups`` groups open), then
        adds ``key`` to the partition with its tags only. Checking and reserving are two
        controller calls, so after reserving a producer counts again the groups open before
        its reservation (in the order TQ's controller created the keys, the same for every
        producer) and, where those fill the window, withdraws it and waits again. ``version``
        may be a callable, read once admitted (the weights a producer syncs to after waiting)
        and again once the reservation is visible to the sampler, until the two agree: a
        trainer step that sampled before the reservation was visible cannot have waited for
        it, so the group takes the newer weights rather than train past the bound. (With a
        fixed ``version`` that race is the caller's.) Returns the version."""
        admitted: list[int] = []

        def check() -> str | None:
            open_groups, stored = self._open()
            reason = admits(open_groups, stored, 0, self.config)
            if reason is not None:
                return reason
            at = time.time()
            v = int(version() if callable(version) else version)
            _tq().kv_put(
                key=key,
                partition_id=self.partition_id,
                tag={"state": "reserved", VERSION_KEY: v, "at": at},
            )
            earlier, stored = self._open(before_key=key)
            reason = admits(earlier, stored, 0, self.config)
            if reason is not None:  # another producer reserved first: withdraw, wait again
                _tq().kv_clear(keys=[key], partition_id=self.partition_id)
                return reason
            # The version was read before the reservation was visible: a trainer step that
            # sampled in between could not wait for this group, which would then train a
            # version later than the bound allows. Read it again now that the sampler sees the
            # reservation; when the trainer moved on, the group takes the new weights.
            while callable(version):
                now = int(version())
                if now == v:
                    break
                v = now
                _tq().kv_put(
                    key=key,
                    partition_id=self.partition_id,
                    tag={"state": "reserved", VERSION_KEY: v, "at": at},
                )
            admitted.append(v)
            return None

        wait_until(check, timeout_s or self.config.admission_timeout_s, f"reserve {key}")
        self._seq += 1
        return admitted[0]

    def put(
        self,
        keys: list[str],
        frames: list[Frame],
        versions: list[int],
        timeout_s: float | None = None,
    ) -> None:
        """Stores reserved groups (one frame each), in one TQ put, waiting while the buffer
        is over its byte budget. The groups become visible whole, when TQ has their columns."""
        import torch
        from tensordict import TensorDict

        from py_wire.interop.transfer_queue import ALIGN, TEXT

        nbytes = sum(f.nbytes for f in frames)

        def check() -> str | None:
            _, stored = self._open()
            return admits(0, stored, nbytes, self.config)

        if self.config.max_bytes is not None:
            wait_until(check, timeout_s or self.config.admission_timeout_s, f"put {keys[:2]}")
        slots = [-(-f.nbytes // ALIGN) * ALIGN for f in frames]
        offsets = torch.zeros(len(frames) + 1, dtype=torch.int64)
        torch.cumsum(torch.tensor(slots, dtype=torch.int64), 0, out=offsets[1:])
        buf = torch.zeros(int(offsets[-1]), dtype=torch.uint8)
        view = buf.numpy()
        for i, f in enumerate(frames):
            lo = int(offsets[i])
            view[lo : lo + f.nbytes] = memoryview(f)
        column = torch.nested.nested_tensor_from_jagged(buf, offsets)
        tags = []
        for f, v in zip(frames, versions, strict=True):
            self._seq += 1
            layout = f.layout
            tokens = layout.total_tokens if layout.seq_offsets is not None else f.num_rows
            tags.append(
                {
                    "state": "stored",
                    VERSION_KEY: int(v),
                    "nbytes": f.nbytes,
                    "tokens": int(tokens),
                    "seq": time.monotonic_ns(),
                }
            )
        _tq().kv_batch_put(
            keys=keys,
            partition_id=self.partition_id,
            fields=TensorDict({TEXT: column}, batch_size=[len(frames)]),
            tags=tags,
        )

    # -- trainer ------------------------------------------------------------------------------

    def take(
        self,
        trainer_version: int,
        step: int,
        dp_rank: int = 0,
        dp_size: int = 1,
        timeout_s: float = 600.0,
    ) -> tuple[Any, Frame | None]:
        """This rank's share of step ``step``'s groups (TQ's ``BatchMeta``, and one frame of
        their rows with a ``policy_version`` field), waiting until the sampler hands a step."""
        from py_wire._decode import checked_schema
        from py_wire.interop.transfer_queue import TEXT, _stored_frames

        client = _tq().get_client()
        got: list[Any] = []
        config = {
            "trainer_version": trainer_version,
            "dp_rank": dp_rank,
            "dp_size": dp_size,
            "batch_index": step,
        }

        def check() -> str | None:
            meta = client.get_meta(
                data_fields=[TEXT],
                batch_size=1,
                partition_id=self.partition_id,
                task_name=TASK,
                sampling_config=config,
            )
            if len(meta) == 0:
                return "the sampler has no step ready"
            got.append(meta)
            return None

        start = time.perf_counter()
        wait_until(check, timeout_s, f"take step {step}")
        self.last_wait_s = time.perf_counter() - start
        meta = got[0]
        data = client.get_data(meta)
        keys = [str(i) for i in meta.global_indexes]
        frames = _stored_frames(data[TEXT], TEXT, keys)
        for frame in frames:
            frame.schema = checked_schema(frame)
        return meta, concat(frames, per_row={VERSION_KEY: VERSION_KEY}) if frames else None

    def ack(self, meta: Any) -> None:
        """The step is done: its groups leave TQ (``clear_samples``), ending their lease."""
        _tq().get_client().clear_samples(meta)


def versions_of(meta: Any) -> list[int]:
    """The policy versions of a ``BatchMeta``'s groups, from their tags."""
    return [int(m.get(VERSION_KEY, -1)) for m in _custom_meta(meta)]


def _custom_meta(meta: Any) -> list[Mapping[str, Any]]:
    out = getattr(meta, "custom_meta", None)
    if out is None:
        out = meta.get_all_custom_meta() if hasattr(meta, "get_all_custom_meta") else []
    return list(out)
