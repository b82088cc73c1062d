"""Fully-async rollouts on TransferQueue: TQ stores the groups, its controller runs the
sampler, its tags carry each group's policy version; py_wire adds the rules.

- **One TQ row per group** (:mod:`py_wire.interop.transfer_queue`'s layout: a frame per
  group in the ``py_wire.text`` column, media in ``py_wire.media``), tagged
  ``{"policy_version": v, "nbytes": n, "tokens": t, "state": "stored"}``.
- **Reservations are TQ keys without fields.** :meth:`TQStream.reserve` adds the group's key
  with only its tags (``state: "reserved"``, the version, the time): TQ's controller does not
  count it ready until the put writes its columns, so a producer that dies mid-put leaves no
  partial group visible, and the sampler sees what is still being generated. The column
  written is the commit: a group whose producer died after it, before TQ set the stored
  tags, is trained like any other, however long after its reservation lapsed.
- :class:`StalenessSampler` (a ``transfer_queue.sampler.BaseSampler``, running inside TQ's
  controller) reads the versions from the partition's tags and applies
  :func:`py_wire.streaming._policy.choose`: oldest groups first within the bound, whole groups
  (a group is one row), balanced across DP ranks; stale ones paced or dropped and counted.
- **Samples that arrive apart** (``reserve(..., samples=n)``, :meth:`TQStream.put_sample`):
  a row per sample (its text part) and a row per distinct media digest of the group, tagged
  with the group; the sampler hands the group's rows out together once all are stored.
- **Leases on TQ's consumption table.** A row the sampler hands out is marked consumed by TQ;
  the consumer clears it (``kv_clear``, TQ's own) when its step is done. A row not cleared
  within the lease goes back: the sampler sets its consumption status to 0 again, and TQ
  offers it to the next ``get_meta`` (a lease that ran out makes TQ call the sampler even
  when no row is ready: a trainer that died holding every group does not hold them for ever),
  and a step retaken after its lease ran out (a restarted trainer's) is chosen afresh, under
  a new lease.

Start TQ with the sampler and polling mode (a step that must wait gets an empty batch)::

    ray.init(num_cpus=4)
    transfer_queue.init(tq_config(StreamConfig(max_staleness=1, batch_groups=8)))
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import secrets
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from py_wire import Frame
from py_wire.adapters import checked_schema
from py_wire.interop.transfer_queue import TEXT, frames_column, stored_frames
from py_wire.streaming import _checks, _samples
from py_wire.streaming._errors import AdmissionTimeout, StreamError
from py_wire.streaming._policy import (
    Counts,
    Group,
    StreamConfig,
    StreamMetadata,
    StreamSchema,
    admits,
    balance,
    caller_metadata,
    checked_config,
    choose,
    is_stale,
    same_metadata,
    same_schema,
    wait_until,
)
from py_wire.streaming._step import (
    MAX_SAMPLES,
    VERSION_KEY,
    Step,
    carries_versions,
    stated_version,
    step_frame,
)

__all__ = [
    "SCHEMA_KEY",
    "TASK",
    "TRAINER_KEY",
    "StalenessSampler",
    "TQBuffer",
    "TQStream",
    "groups_of",
    "tq_config",
    "versions_of",
]

#: TQ task name the trainer consumes under.
TASK = "py_wire.train"
#: ``state`` tags of the rows a group reserved with ``samples=`` is stored in: one per sample
#: (its text part) and one per distinct media digest. They carry no policy version of their
#: own (the group's reservation row does), so nothing counts them as groups.
PART_STATES = ("sample", "media")
#: The ``state`` tag the sampler gives the rows of a group it dropped as stale: no longer
#: counted, and cleared by the next stream that lists the partition.
DROPPED = "dropped"
#: The key (with this prefix, then the schema's fingerprint and a digest of the caller metadata)
#: that names the partition's schema and metadata: the first one TQ's controller created
#: (``kv_list`` order) is the stream's.
SCHEMA_KEY = "py_wire.schema:"
#: The schema key's tag saying its schema has no per-row ``policy_version`` field.
ONE_VERSION = "one_version"


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
        self.config = checked_config(config)
        self.counts = Counts()  # every partition's
        self.partition_counts: dict[str, Counts] = {}
        # partition -> index -> (key, lease deadline, whether the row heads its group)
        self.leases: dict[str, dict[int, tuple[str, float, bool]]] = {}
        # partition -> reservation rows of sample groups dropped as stale
        self.dropped: dict[str, set[int]] = {}
        # partition -> batch_index -> per-rank global indexes
        self.steps: dict[str, dict[Any, list[list[int]]]] = {}
        # partition -> why its last sample() handed out no step
        self.waiting: dict[str, str] = {}
        # partition -> index -> the step (batch_index) that leased it last
        self.lease_of: dict[str, dict[int, Any]] = {}

    def _count(self, partition_id: str, name: str, n: int) -> None:
        for counts in (self.counts, self.partition_counts.setdefault(partition_id, Counts())):
            setattr(counts, name, getattr(counts, name) + n)

    def end_acked(self, partition_id: str, partition: Any) -> None:
        """Ends the leases of rows the consumer cleared (acked), counting them: run on every
        sample() and on every stats(), so the count is exact after the last ack too."""
        leases = self.leases.setdefault(partition_id, {})
        keys = getattr(partition, "keys_mapping", None) or {}
        index_key = {i: k for k, i in keys.items()}
        for index, (key, _, head) in list(leases.items()):
            if index_key.get(index) != key:  # cleared: the consumer acked
                del leases[index]
                self._count(partition_id, "acked", head)

    def _return_expired(self, partition: Any, task_name: str) -> list[int]:
        """Ends the leases of cleared rows (acked) and gives back the rows whose lease ran out:
        their consumption status is 0 again, as for rows never handed out. Returns those."""
        returned: list[int] = []
        self.end_acked(partition.partition_id, partition)
        leases = self.leases.setdefault(partition.partition_id, {})
        now = time.monotonic()
        for index, (_, until, head) in list(leases.items()):
            if until < now:  # not acked in time: offer it again
                del leases[index]
                _, status = partition.get_consumption_status(task_name, mask=False)
                status[index] = 0
                self._count(partition.partition_id, "lease_returns", head)
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
        # The stream's own config, where its take sent one (so each partition keeps its
        # own rules); the sampler's otherwise.
        sent = kwargs.get("stream_config")
        config = StreamConfig(**sent) if isinstance(sent, dict) else self.config
        returned = self._return_expired(partition, task_name)
        dp_rank = int(kwargs.get("dp_rank", 0))
        dp_size = int(kwargs.get("dp_size", 1))
        batch_index = kwargs.get("batch_index")
        steps = self.steps.setdefault(partition.partition_id, {})
        if returned:  # a step whose lease ran out is handed out afresh, under a new lease
            gone = set(returned)
            for index, parts in list(steps.items()):
                if any(i in gone for part in parts for i in part):
                    del steps[index]
        if batch_index is not None and batch_index in steps:
            part = steps[batch_index][dp_rank]
            return part, part
        trainer_version = int(kwargs.get("trainer_version", 0))
        ready = set(ready_indexes) | set(returned)
        keys = {i: k for k, i in partition.keys_mapping.items()}
        meta = partition.custom_meta
        leases = self.leases.setdefault(partition.partition_id, {})
        dropped_heads = self.dropped.setdefault(partition.partition_id, set())
        dropped_heads &= set(keys)
        parts_of: dict[str, list[int]] = {}
        for index in keys:
            tags = meta.get(index, {})
            if tags.get("state") in PART_STATES:
                parts_of.setdefault(str(tags.get("group")), []).append(index)
        groups: list[Group] = []
        members: dict[str, list[int]] = {}  # a sample group's rows, by its head's gid
        for index in keys:
            tags = meta.get(index, {})
            # Dropped already: a step that waits hands TQ no rows to mark consumed.
            if VERSION_KEY not in tags or tags.get("state") == DROPPED:
                continue
            if "samples" in tags:  # a group whose samples arrive apart
                if index in leases or index in dropped_heads:
                    continue  # handed out (until acked or returned), or dropped
                rows = parts_of.get(keys[index], [])
                whole = _whole(rows, int(tags["samples"]), ready, meta)
                lapsed = time.time() - float(tags.get("at", 0)) > config.reservation_s
                if whole is None and lapsed:
                    continue
                if whole is not None:
                    members[str(index)] = whole
                groups.append(
                    Group(
                        str(index),
                        int(tags[VERSION_KEY]),
                        int(tags.get("seq", index)),
                        ready=whole is not None,
                        tokens=sum(int(meta.get(i, {}).get("tokens", 0)) for i in rows),
                        nbytes=sum(int(meta.get(i, {}).get("nbytes", 0)) for i in rows),
                    )
                )
                continue
            reserved = tags.get("state") == "reserved"
            lapsed = time.time() - float(tags.get("at", 0)) > config.reservation_s
            if reserved and lapsed and index not in ready:
                continue  # the producer gave up or died before its column: nothing to wait for
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
        # A schema without a per-row version field (or a partition whose schema key says
        # nothing) gets steps of one version: step_frame could not join two.
        schema_tags = [meta.get(i, {}) for i, k in keys.items() if str(k).startswith(SCHEMA_KEY)]
        one_version = bool(schema_tags[0].get(ONE_VERSION, True)) if schema_tags else True
        choice = choose(groups, trainer_version, config, one_version)

        def rows_of(gid: str) -> list[int]:
            return members.get(gid, [int(gid)])

        dropped = [i for gid in choice.drop for i in rows_of(gid)]
        dropped_heads.update(int(gid) for gid in choice.drop if gid in members)
        for index in {*dropped, *(int(gid) for gid in choice.drop)}:
            meta.setdefault(index, {})["state"] = DROPPED
        self._count(partition.partition_id, "dropped_stale", len(choice.drop))
        if choice.wait:
            self.waiting[partition.partition_id] = choice.reason
            return [], dropped
        self.waiting.pop(partition.partition_id, None)
        picked = [g for g in groups if g.gid in set(choice.take)]
        shares = balance(picked, dp_size)
        parts = [[i for gid in share for i in rows_of(gid)] for share in shares]
        lease_s = kwargs.get("lease_s") or config.lease_s
        until = time.monotonic() + float(lease_s)
        lease_of = self.lease_of.setdefault(partition.partition_id, {})
        for gid in (gid for share in shares for gid in share):
            head = int(gid)
            leases[head] = (keys[head], until, True)
            lease_of[head] = batch_index
            for index in members.get(gid, []):
                leases[index] = (keys[index], until, False)
                lease_of[index] = batch_index
        self._count(partition.partition_id, "delivered", len(picked))
        if batch_index is not None:
            steps[batch_index] = parts
        taken = [i for part in parts for i in part]
        # Every rank's rows are consumed now, so no other get_meta hands them out.
        return parts[dp_rank], taken + dropped

    def has_cached_result(
        self, partition_id: str, task_name: str, sampling_config: dict[str, Any] | None = None
    ) -> bool:
        batch_index = (sampling_config or {}).get("batch_index")
        if batch_index is not None and batch_index in self.steps.get(partition_id, {}):
            return True
        # With no row ready TQ calls no sampler: a lease that ran out (a trainer died holding
        # every group) would never end. Saying yes makes it call sample(), which ends it.
        now = time.monotonic()
        return any(until < now for _, until, _ in self.leases.get(partition_id, {}).values())

    def clear_cache(self, partition_id: str) -> None:
        self.steps.pop(partition_id, None)
        self.leases.pop(partition_id, None)


def _stream_schema(
    listed: Mapping[str, Mapping[str, Any]],
) -> tuple[StreamSchema, StreamMetadata] | None:
    """The partition's schema and caller metadata: its first schema key's (None when it has
    none)."""
    for key, tags in listed.items():
        if key.startswith(SCHEMA_KEY):
            fingerprint = key[len(SCHEMA_KEY) :].split("/")[0]
            pairs = tuple((str(k), str(v)) for k, v in tags.get("metadata", ()))
            return (fingerprint, str(tags.get("name", "a schema"))), (
                pairs,
                bool(tags.get("versioned", True)),
            )
    return None


def _schema_key(schema: StreamSchema, metadata: StreamMetadata) -> str:
    """The key naming a stream's schema and metadata: two producers that disagree on either
    add two keys, and the first created wins."""
    digest = hashlib.sha256(json.dumps(metadata).encode()).hexdigest()[:16]
    return f"{SCHEMA_KEY}{schema[0]}/{digest}"


def _release(controller: Any, partition_id: str, indexes: list[int]) -> None:
    """Run inside TQ's controller: the lease of the step holding ``indexes`` runs out now,
    its groups' reservation rows included (the sampler's next call gives the rows back, and
    TQ makes that call: a lease ran out). A step's rows share one lease deadline."""
    leases = controller.sampler.leases.get(partition_id, {})
    step = {leases[index][1] for index in indexes if index in leases}
    heads = 0
    for index, (key, until, head) in list(leases.items()):
        if until in step:
            leases[index] = (key, 0.0, head)
            heads += head
    controller.sampler._count(partition_id, "delivered", -heads)  # never reached the trainer


def _in_controller(function: Callable[..., Any], *args: Any) -> Any:
    """``function(controller, *args)`` run inside TQ's controller actor."""
    import ray

    controller = ray.get_actor("TransferQueueController", namespace="transfer_queue")
    return ray.get(controller.__ray_call__.remote(function, *args))


def _still_leased(controller: Any, partition_id: str, indexes: list[int], step: Any) -> bool:
    """Run inside TQ's controller: whether every row of ``indexes`` is still leased to step
    ``step`` (its lease neither ran out nor went to another step)."""
    sampler = controller.sampler
    leases = sampler.leases.get(partition_id, {})
    lease_of = sampler.lease_of.get(partition_id, {})
    now = time.monotonic()
    return all(i in leases and leases[i][1] >= now and lease_of.get(i) == step for i in indexes)


def _sampler_waiting(controller: Any, partition_id: str) -> str:
    """Run inside TQ's controller: why the sampler's last call handed out no step."""
    return str(controller.sampler.waiting.get(partition_id, ""))


def _sampler_counts(controller: Any, partition_id: str) -> dict[str, int]:
    """Run inside TQ's controller: its :class:`StalenessSampler`'s counts of a partition,
    with the leases of rows cleared since its last sample() ended (acked)."""
    controller.sampler.end_acked(partition_id, controller.partitions.get(partition_id))
    counts: dict[str, int] = controller.sampler.partition_counts.get(
        partition_id, Counts()
    ).as_dict()
    return counts


def _remember(memory: dict[Any, Any], key: Any, value: Any = None) -> None:
    memory[key] = value
    if len(memory) > MAX_SAMPLES:
        memory.pop(next(iter(memory)))


def _whole(
    rows: list[int], samples: int, ready: set[int], meta: Mapping[int, Mapping[str, Any]]
) -> list[int] | None:
    """A sample group's rows, its samples in order then its media, when all ``samples`` are
    stored and every media digest they name is too; else None."""
    by_index: dict[int, int] = {}
    media: dict[str, int] = {}
    for i in rows:
        if i not in ready:
            continue
        tags = meta.get(i, {})
        if tags.get("state") == "sample":
            by_index[int(tags.get("index", -1))] = i
        else:
            media[str(tags.get("digest"))] = i
    if sorted(by_index) != list(range(samples)):
        return None
    needed = {str(meta[i].get("digest")) for i in by_index.values()} - {""}
    if not needed <= set(media):
        return None
    return [by_index[k] for k in range(samples)] + [media[d] for d in sorted(needed)]


def tq_config(config: StreamConfig, **overrides: Any) -> Any:
    """TQ's ``init`` config with :class:`StalenessSampler` and polling mode."""
    checked_config(config)
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
        self.config = checked_config(config)
        self.partition_id = _checks.text("partition_id", partition_id)
        self._seq = 0
        self._untagged: dict[str, float] = {}
        # What this process sent: media rows by (group, digest), sample counts by group
        # (bounded: the oldest are forgotten first).
        self._media_sent: dict[Any, Any] = {}
        self._samples_of: dict[Any, Any] = {}
        self._schema: StreamSchema | None = None
        self._metadata: StreamMetadata | None = None
        #: Seconds the last :meth:`take` waited for the sampler to hand a step.
        self.last_wait_s = 0.0

    # -- producers ----------------------------------------------------------------------------

    def _listed(self) -> dict[str, dict[str, Any]]:
        """The partition's keys and their tags, in the order TQ's controller created the keys
        (one controller round trip)."""
        listed: dict[str, dict[str, Any]] = (
            _tq().kv_list(partition_id=self.partition_id).get(self.partition_id, {})
        )
        return listed

    def _open(
        self,
        before_key: str | None = None,
        listed: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> tuple[int, int]:
        """Groups open (reserved within their time, or stored) and bytes stored, from TQ's
        tags in one controller round trip. ``before_key``: count only the keys TQ's controller
        created before this one. ``kv_list`` lists keys in the order the controller created
        them, so every producer agrees who came first, and each key created earlier is in the
        list by the time the later producer counts; a producer's own clock cannot give that
        order (a reservation stamped first may become visible last). Keys listed without tags
        yet are reservations whose tags are on their way (TQ creates a key and sets its tags
        in two calls): counted as open, until this stream has seen one untagged for longer
        than a reservation lasts (its producer died between the two calls). Rows the sampler
        dropped as stale count no more, and are cleared here. ``listed``: a listing just
        taken."""
        listed = self._listed() if listed is None else listed
        now = time.time()
        open_groups = stored = 0
        dropped = []
        for key, tags in listed.items():
            if before_key is not None and str(key) == before_key:
                break
            if tags.get("state") == DROPPED:
                dropped.append(str(key))
                continue
            if str(key).startswith(SCHEMA_KEY):
                continue
            if tags.get("state") == "reserved":
                if now - float(tags.get("at", 0)) > self.config.reservation_s:
                    continue
                open_groups += 1
            elif VERSION_KEY in tags:
                open_groups += 1
                stored += int(tags.get("nbytes", 0))
            elif tags.get("state") in PART_STATES:  # a sample's or its media's row
                stored += int(tags.get("nbytes", 0))
            elif before_key is not None and not tags:
                seen = self._untagged.setdefault(str(key), now)
                if now - seen <= self.config.reservation_s:
                    open_groups += 1
        if self._untagged:  # forget keys gone from the partition or tagged since
            self._untagged = {k: t for k, t in self._untagged.items() if not listed.get(k, True)}
        if dropped:
            _tq().kv_clear(keys=dropped, partition_id=self.partition_id)
        return open_groups, stored

    def stats(self) -> dict[str, Any]:
        """This partition's counts: those the sampler in TQ's controller keeps
        (``delivered``, ``acked``, ``dropped_stale``, ``lease_returns``), and those its keys
        give (``stored``: groups committed, those still held and those acked or dropped;
        ``abandoned``: reservations that lapsed before their put; ``reserved``: every
        reservation, those two and the ones still open), as ``RayBuffer`` counts them; its
        open groups and stored bytes."""
        counts = dict(_in_controller(_sampler_counts, self.partition_id))
        listed = self._listed()  # after the counts: a group acked in between counts in neither
        open_groups, stored_bytes = self._open(listed=listed)
        now = time.time()
        samples_in: dict[str, int] = {}
        for tags in listed.values():
            if tags.get("state") == "sample":
                group = str(tags.get("group"))
                samples_in[group] = samples_in.get(group, 0) + 1
        held = pending = abandoned = 0
        for key, tags in listed.items():
            state = tags.get("state")
            if VERSION_KEY not in tags or state == DROPPED or str(key).startswith(SCHEMA_KEY):
                continue
            if state == "stored" or samples_in.get(str(key), -1) >= int(tags.get("samples", 0)):
                held += 1
            elif now - float(tags.get("at", 0)) > self.config.reservation_s:
                abandoned += 1
            else:
                pending += 1
        stored = held + counts["acked"] + counts["dropped_stale"]
        counts.update(stored=stored, abandoned=abandoned, reserved=stored + abandoned + pending)
        return {**counts, "open_groups": open_groups, "stored_bytes": stored_bytes}

    def _reservation(
        self, listed: Mapping[str, Mapping[str, Any]], key: str, samples: bool
    ) -> Mapping[str, Any]:
        """The tags of ``key``'s open reservation, for a group put as ``samples`` or as one
        frame; a :class:`StreamError` naming the key when it has none. A put must hold a
        reservation, so that the window holds, and a second put of a key would overwrite its
        group in TQ."""
        tags = listed.get(key) or {}
        state = tags.get("state")
        if VERSION_KEY not in tags:
            raise StreamError(
                f"group {key}: not reserved (or acked already): reserve it first, so that at "
                f"most (k + 1) * batch_groups = {self.config.window} groups are open"
            )
        if state == DROPPED:
            raise StreamError(f"group {key}: dropped, past the staleness bound")
        if state != "reserved":
            raise StreamError(f"group {key}: put already (a second put would overwrite it)")
        if time.time() - float(tags.get("at", 0)) > self.config.reservation_s:
            raise StreamError(
                f"group {key}: its reservation lapsed (reservation_s = "
                f"{self.config.reservation_s:g} s): reserve it again"
            )
        if samples and "samples" not in tags:
            raise StreamError(
                f"group {key} was reserved for one frame: put it with put(), or reserve it "
                "with samples=n"
            )
        if not samples and "samples" in tags:
            raise StreamError(
                f"group {key} was reserved for {tags['samples']} samples: put each with "
                "put_sample(), not the group as one frame"
            )
        return tags

    def _same_schema(
        self,
        listed: Mapping[str, Mapping[str, Any]],
        frame: Frame,
        what: str,
        version: int,
        metadata: Mapping[str, str] | None = None,
    ) -> None:
        """Refuses ``frame`` (a :class:`SchemaError` naming ``what``) unless its schema is the
        partition's, and (a :class:`StreamError` naming ``what`` and the key) unless its caller
        metadata is (:func:`same_metadata`; ``metadata``: a sample's, whose text part
        ``frame`` is). A partition without them takes this frame's: this stream adds its key,
        then lists again, and the first schema key TQ's controller created wins (a key created
        earlier is listed to every later creator, so two racing producers agree)."""
        sample = metadata is not None
        meta = frame.metadata if metadata is None else metadata
        if self._schema is None:
            found = _stream_schema(listed)
            if found is not None:
                self._schema, self._metadata = found
        if self._schema is not None:
            same_schema(self._schema, frame, what)
            same_metadata(self._metadata, meta, version, what, sample=sample)
            return

        mine = same_schema(None, frame, what)
        mine_meta = same_metadata(None, meta, version, what, sample=sample)
        key = _schema_key(mine, mine_meta)
        # The sampler reads it: a schema without a per-row version gets steps of one version.
        tag = {
            "state": "schema",
            "name": mine[1],
            ONE_VERSION: not carries_versions(frame),
            "metadata": [list(pair) for pair in mine_meta[0]],
            "versioned": mine_meta[1],
        }
        _tq().kv_put(key=key, partition_id=self.partition_id, tag=tag)
        first = _stream_schema(self._listed())
        if first is not None and first != (mine, mine_meta):
            _tq().kv_clear(keys=[key], partition_id=self.partition_id)
        self._schema, self._metadata = first or (mine, mine_meta)
        same_schema(self._schema, frame, what)
        same_metadata(self._metadata, meta, version, what, sample=sample)

    def stored_bytes(self) -> int:
        """Bytes the partition's groups and sample rows hold, from TQ's tags (one controller
        round trip): what the byte budget is checked against."""
        return self._open()[1]

    def reserve(
        self,
        key: str,
        version: int | Callable[[], int],
        timeout_s: float | None = None,
        *,
        samples: int | None = None,
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
        fixed ``version`` that race is the caller's.) Returns the version.

        ``samples=n``: the group's ``n`` samples arrive apart, each put with
        :meth:`put_sample`; the images they share are stored once."""
        key = _checks.text("key", key)
        if not callable(version):
            version = _checks.version("version", version)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        admitted: list[int] = []
        tag: dict[str, Any] = {"state": "reserved"}
        if samples is not None:
            tag["samples"] = _checks.whole("samples", samples, minimum=1, maximum=MAX_SAMPLES)

        def check() -> str | None:
            open_groups, stored = self._open()
            reason = admits(open_groups, stored, 0, self.config)
            if reason is not None:
                return reason
            at = time.time()
            v = _checks.version("version", version() if callable(version) else version)
            _tq().kv_put(
                key=key, partition_id=self.partition_id, tag={**tag, VERSION_KEY: v, "at": at}
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
                now = _checks.version("version", version())
                if now == v:
                    break
                v = now
                _tq().kv_put(
                    key=key, partition_id=self.partition_id, tag={**tag, VERSION_KEY: v, "at": at}
                )
            admitted.append(v)
            return None

        wait_until(check, timeout_s or self.config.admission_timeout_s, f"reserve {key}")
        self._seq += 1
        if samples is not None:
            _remember(self._samples_of, key, int(tag["samples"]))
        return admitted[0]

    def put(
        self,
        keys: list[str],
        frames: list[Frame],
        versions: list[int],
        timeout_s: float | None = None,
    ) -> None:
        """Stores reserved groups (one frame each), in one TQ put, waiting while the buffer
        is over its byte budget. The groups become visible whole, when TQ has their columns.
        A key without an open reservation (never reserved, lapsed, put already) is a
        :class:`StreamError`, a frame of another schema than the partition's a
        :class:`py_wire.SchemaError`, each naming the key; nothing is stored then."""
        keys = _checks.listed("keys", keys, _checks.text)
        frames = _checks.listed("frames", frames, _checks.frame)
        versions = _checks.listed("versions", versions, _checks.version)
        if not len(keys) == len(frames) == len(versions):
            raise StreamError(
                f"keys, frames and versions must be as long: {len(keys)}, {len(frames)} and "
                f"{len(versions)} given"
            )
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        if not keys:
            return
        tags = []
        for key, f, v in zip(keys, frames, versions, strict=True):
            self._seq += 1
            layout = f.layout
            tokens = layout.total_tokens if layout.seq_offsets is not None else f.num_rows
            tags.append(
                {
                    "state": "stored",
                    "key": key,
                    VERSION_KEY: int(v),
                    "nbytes": f.nbytes,
                    "tokens": int(tokens),
                    "seq": time.monotonic_ns(),
                }
            )
        twice = next((k for k in keys if keys.count(k) > 1), None)
        if twice is not None:
            raise StreamError(f"group {twice}: given twice in one put")

        def refuse(listed: Mapping[str, Mapping[str, Any]]) -> None:
            for key, frame, v in zip(keys, frames, versions, strict=True):
                self._reservation(listed, key, samples=False)
                self._same_schema(listed, frame, f"group {key}", v)

        self._put_rows(keys, frames, tags, timeout_s, refuse)

    def put_sample(
        self, key: str, index: int, frame: Frame, version: int, timeout_s: float | None = None
    ) -> int:
        """Stores sample ``index`` (a one-row frame) of group ``key``, reserved with
        ``samples=n``: its text part in a row of its own, and its media part (the images the
        group's samples share, named by a digest of their bytes) in the group's media row,
        sent with the first sample of the group this process puts. The sampler hands the
        group out once all ``n`` samples and their media rows are stored, and :meth:`take`
        rebuilds its frame (placeholders checked against the images again). Returns the bytes
        stored."""

        key = _checks.text("key", key)
        index = _checks.whole("index", index, maximum=MAX_SAMPLES - 1)
        frame = _checks.frame("frame", frame)
        version = _checks.version("version", version)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        samples = self._samples_of.get(key)
        if samples is not None and index >= samples:
            raise StreamError(f"group {key}: sample {index} of a group of {samples} samples")
        text, media, digest = _samples.split(frame)
        layout = frame.layout
        tokens = layout.total_tokens if layout.seq_offsets is not None else frame.num_rows
        keys = [f"{key}#{index}"]
        frames = [text]
        tags: list[dict[str, Any]] = [
            {
                "state": "sample",
                "group": key,
                "index": index,
                "digest": digest or "",
                "v": int(version),
                "metadata": {
                    k: v for k, v in caller_metadata(frame.metadata).items() if k != VERSION_KEY
                },
                "nbytes": text.nbytes,
                "tokens": int(tokens),
            }
        ]
        sent = (key, digest)
        if media is not None and digest is not None and sent not in self._media_sent:
            keys.append(f"{key}#m:{digest}")
            frames.append(media)
            tags.append({"state": "media", "group": key, "digest": digest, "nbytes": media.nbytes})

        def refuse(listed: Mapping[str, Mapping[str, Any]]) -> None:
            head = self._reservation(listed, key, samples=True)
            if index >= int(head["samples"]):
                raise StreamError(
                    f"group {key}: sample {index} of a group of {head['samples']} samples"
                )
            if keys[0] in listed:
                raise StreamError(f"group {key}: sample {index} was put already")
            what = f"group {key}, sample {index}"
            self._same_schema(listed, text, what, version, frame.metadata)

        self._put_rows(keys, frames, tags, timeout_s, refuse)
        if media is not None:
            _remember(self._media_sent, sent)
        return sum(f.nbytes for f in frames)

    def _put_rows(
        self,
        keys: list[str],
        frames: list[Frame],
        tags: list[dict[str, Any]],
        timeout_s: float | None,
        refuse: Callable[[Mapping[str, Mapping[str, Any]]], None],
    ) -> None:
        """One TQ put: each frame's bytes a row of the ``TEXT`` column, with its tags. On one
        listing of the partition first: ``refuse`` raises where the rows may not be put (no
        open reservation, put already, another schema), and the put waits (up to
        ``timeout_s``) while the byte budget has no room for them."""
        nbytes = sum(f.nbytes for f in frames)

        def check() -> str | None:
            listed = self._listed()
            refuse(listed)
            if self.config.max_bytes is None:
                return None
            return admits(0, self._open(listed=listed)[1], nbytes, self.config)

        wait_until(check, timeout_s or self.config.admission_timeout_s, f"put {keys[:2]}")
        from tensordict import TensorDict

        _tq().kv_batch_put(
            keys=keys,
            partition_id=self.partition_id,
            fields=TensorDict({TEXT: frames_column(frames)}, batch_size=[len(frames)]),
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
        lease_s: float | None = None,
    ) -> tuple[Any, Frame | None]:
        """This rank's share of step ``step``'s groups (TQ's ``BatchMeta``, and one frame of
        their rows with a ``policy_version`` field), waiting until the sampler hands a step.
        ``lease_s``: how long the step's groups stay leased (the config's ``lease_s`` when
        None)."""
        trainer_version = _checks.version("trainer_version", trainer_version)
        step = _checks.whole("step", step)
        dp_size = _checks.ranks("dp_size", dp_size)
        dp_rank = _checks.whole("dp_rank", dp_rank, maximum=dp_size - 1)
        timeout_s = _checks.seconds("timeout_s", timeout_s)
        lease_s = _checks.optional_seconds("lease_s", lease_s)

        client = _tq().get_client()
        got: list[Any] = []
        config = {
            "trainer_version": trainer_version,
            "dp_rank": dp_rank,
            "dp_size": dp_size,
            "batch_index": step,
            "lease_s": lease_s,
            "stream_config": dataclasses.asdict(self.config),
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
        try:
            wait_until(check, timeout_s, f"take step {step}")
        except AdmissionTimeout:
            reason = _in_controller(_sampler_waiting, self.partition_id) or (
                "the sampler has no step ready"
            )
            raise AdmissionTimeout(
                f"take step {step}: waited {timeout_s:g} s and still {reason}"
            ) from None
        self.last_wait_s = time.perf_counter() - start
        meta = got[0]
        try:
            data = client.get_data(meta)
            keys = [str(i) for i in meta.global_indexes]
            frames = stored_frames(data[TEXT], TEXT, keys)
            for frame in frames:
                frame.schema = checked_schema(frame)
            frames = _assembled(frames, _custom_meta(meta))
            return meta, step_frame(frames) if frames else None
        except Exception:
            # Refused or failed after the sampler leased the rows: they go back now, for the
            # next take, not when the lease runs out.

            _in_controller(_release, self.partition_id, [int(i) for i in meta.global_indexes])
            raise

    def ack(self, meta: Any) -> None:
        """The step is done: its groups leave TQ (``clear_samples``, and the reservation rows
        of groups whose samples arrived apart), ending their lease."""
        if not hasattr(meta, "global_indexes"):
            raise TypeError(f"meta must be the BatchMeta take returned, not {type(meta).__name__}")
        _tq().get_client().clear_samples(meta)
        heads = list(
            dict.fromkeys(
                str(t["group"]) for t in _custom_meta(meta) if t.get("state") in PART_STATES
            )
        )
        if heads:
            _tq().kv_clear(keys=heads, partition_id=self.partition_id)


def groups_of(meta: Any) -> list[str]:
    """The keys of a ``BatchMeta``'s groups, from their tags (a group whose samples arrived
    apart once, from its first sample's row), in the order :func:`versions_of` gives."""
    out = []
    for tags in _custom_meta(meta):
        state = tags.get("state")
        if state == "sample" and int(tags.get("index", -1)) == 0:
            out.append(str(tags.get("group")))
        elif state not in PART_STATES:
            out.append(str(tags.get("key", "")))
    return out


def versions_of(meta: Any) -> list[int]:
    """The policy versions of a ``BatchMeta``'s groups, from their tags (a group whose
    samples arrived apart once, from its first sample's row)."""
    out = []
    for tags in _custom_meta(meta):
        state = tags.get("state")
        if state == "sample" and int(tags.get("index", -1)) == 0:
            out.append(int(tags.get("v", -1)))
        elif state not in PART_STATES:
            out.append(int(tags.get(VERSION_KEY, -1)))
    return out


def _assembled(frames: list[Frame], tags: list[Mapping[str, Any]]) -> list[Frame]:
    """One frame per group, in the order the groups' rows came: rows stored whole stay as
    they are; a group's sample and media rows are rebuilt into the group's frame."""

    out: list[Frame | str] = []
    parts: dict[str, dict[str, Any]] = {}
    for frame, t in zip(frames, tags, strict=True):
        state = t.get("state")
        if state not in PART_STATES:
            out.append(frame)
            continue
        group = str(t.get("group"))
        if group not in parts:
            parts[group] = {"samples": {}, "media": {}, "version": None, "metadata": {}}
            out.append(group)
        if state == "sample":
            parts[group]["samples"][int(t["index"])] = (frame, str(t.get("digest") or ""))
            parts[group]["version"] = int(t.get("v", -1))
            parts[group]["metadata"] = dict(t.get("metadata") or {})
        else:
            parts[group]["media"][str(t["digest"])] = frame
    built: list[Frame] = []
    for item in out:
        if isinstance(item, Frame):
            built.append(item)
            continue
        entry = parts[item]
        samples = [entry["samples"][k] for k in sorted(entry["samples"])]
        built.append(
            _samples.assemble(
                [f for f, _ in samples],
                [d or None for _, d in samples],
                entry["media"],
                {**entry["metadata"], VERSION_KEY: str(entry["version"])},
            )
        )
    return built


def _custom_meta(meta: Any) -> list[Mapping[str, Any]]:
    out = getattr(meta, "custom_meta", None)
    if out is None:
        out = meta.get_all_custom_meta() if hasattr(meta, "get_all_custom_meta") else []
    return list(out)


#: The key whose tags hold the trainer's version (``TQBuffer.set_trainer_version``), for
#: producers that reserve at the trainer's version.
TRAINER_KEY = "py_wire.trainer"
#: The most steps one :class:`TQBuffer` remembers by lease id (for ``ack`` of a lease id).
MAX_STEPS = 1024


class TQBuffer:
    """The streaming contract (:class:`~py_wire.streaming.Stream`) on TransferQueue: the
    verbs, arguments, return types and errors of :class:`~py_wire.streaming.RayBuffer`, over
    a :class:`TQStream` (``.stream``) on one partition. A producer loop or a trainer loop
    written for one runs on the other by changing the line that builds it.

    Group ids are TQ keys (made here); a step's ranks are one sampler choice fetched rank by
    rank (``Step.handle``: each rank's ``BatchMeta``); the trainer's version lives in the
    partition (:data:`TRAINER_KEY`), so producers in other processes reserve at it. TQ must
    run :class:`StalenessSampler` (:func:`tq_config`)."""

    def __init__(self, config: StreamConfig, partition_id: str = "py_wire.rollouts") -> None:
        self.stream = TQStream(config, partition_id)
        self.config = self.stream.config
        self.partition_id = self.stream.partition_id
        self._trainer_version = 0
        self._steps: dict[str, list[Any]] = {}

    def _trainer(self, listed: Mapping[str, Mapping[str, Any]] | None = None) -> int:
        listed = self.stream._listed() if listed is None else listed
        return int((listed.get(TRAINER_KEY) or {}).get("trainer_version", 0))

    def reserve(
        self,
        version: int | None = None,
        timeout_s: float | None = None,
        *,
        samples: int | None = None,
    ) -> tuple[str, int]:
        """As :meth:`RayBuffer.reserve <py_wire.streaming.RayBuffer.reserve>`: waits for a
        slot, returns the group's id (a new TQ key) and version (``None``: the trainer's at
        admission)."""
        version = _checks.optional_version("version", version)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        if samples is not None:
            samples = _checks.whole("samples", samples, minimum=1, maximum=MAX_SAMPLES)
        if version is not None:
            trainer = self._trainer()
            if is_stale(version, trainer, self.config.max_staleness):
                raise StreamError(
                    f"reserve: version {version} is past the staleness bound: the trainer is "
                    f"at version {trainer} and max_staleness is {self.config.max_staleness}"
                )
        gid = uuid.uuid4().hex
        got = self.stream.reserve(
            gid, self._trainer if version is None else version, timeout_s, samples=samples
        )
        return gid, got

    def put(
        self,
        gid: str,
        frame: Frame,
        timeout_s: float | None = None,
        *,
        sample: int | None = None,
    ) -> None:
        """As :meth:`RayBuffer.put <py_wire.streaming.RayBuffer.put>`: stores reserved group
        ``gid``'s frame (``sample=i``: its sample ``i``), at the version it was reserved
        with."""
        gid = _checks.text("gid", gid)
        frame = _checks.frame("frame", frame)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        if sample is not None:
            sample = _checks.whole("sample", sample, maximum=MAX_SAMPLES - 1)
        tags = self.stream._listed().get(gid) or {}
        if tags.get("state") != "reserved" or VERSION_KEY not in tags:
            # TQStream names why (never reserved, put already, dropped, acked).
            self.stream._reservation({gid: tags}, gid, samples=sample is not None)
        version = int(tags.get(VERSION_KEY, 0))
        if sample is None:
            self.stream.put([gid], [frame], [version], timeout_s)
        else:
            self.stream.put_sample(gid, sample, frame, version, timeout_s)

    def reserve_and_put(self, frame: Frame, timeout_s: float | None = None) -> tuple[str, int]:
        """As :meth:`RayBuffer.reserve_and_put
        <py_wire.streaming.RayBuffer.reserve_and_put>`: a slot (a new TQ key) and the put of
        ``frame``, at the version its ``policy_version`` metadata states."""
        frame = _checks.frame("frame", frame)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        gid, version = self.reserve(stated_version(frame), timeout_s)
        try:
            self.put(gid, frame, timeout_s)
        except BaseException:
            # Refused (another schema or metadata) or timed out: the slot goes back now.
            _tq().kv_clear(keys=[gid], partition_id=self.partition_id)
            raise
        return gid, version

    def take(self, ranks: int = 1, timeout_s: float = 600.0, lease_s: float | None = None) -> Step:
        """As :meth:`RayBuffer.take <py_wire.streaming.RayBuffer.take>`: the next step's
        groups, leased, balanced across ``ranks``; with more ranks than ``batch_groups``, the
        ranks past them get no group (a None frame), as on Ray."""
        ranks = _checks.ranks("ranks", ranks)
        timeout_s = _checks.seconds("timeout_s", timeout_s)
        lease_s = _checks.optional_seconds("lease_s", lease_s)
        # The sampler balances whole groups: each of the first batch_groups ranks gets one
        # at least, the rest none (RayBuffer's balance gives the same shares).
        served = min(ranks, self.config.batch_groups)
        batch = secrets.randbits(62)
        deadline = time.monotonic() + timeout_s
        metas: list[Any] = []
        frames: list[Frame | None] = []
        waited = 0.0
        try:
            for rank in range(served):
                left = max(deadline - time.monotonic(), 1e-3)
                meta, got = self.stream.take(
                    self._trainer_version, batch, rank, served, left, lease_s=lease_s
                )
                metas.append(meta)
                frames.append(got)
                waited += self.stream.last_wait_s
        except BaseException:
            for meta in metas:  # the ranks fetched already: their groups go back now
                _in_controller(_release, self.partition_id, _indexes(meta))
            raise
        lease = str(batch)
        self._steps[lease] = metas
        if len(self._steps) > MAX_STEPS:
            self._steps.pop(next(iter(self._steps)))
        idle = ranks - served
        return Step(
            lease,
            frames + [None] * idle,
            [groups_of(meta) for meta in metas] + [[] for _ in range(idle)],
            [versions_of(meta) for meta in metas] + [[] for _ in range(idle)],
            waited,
            handle=metas,
        )

    def _metas(self, step: Step | str) -> tuple[int, list[Any]]:
        """A step's lease (the sampler's batch index) and each rank's ``BatchMeta``; none
        when this buffer never handed out such a step."""
        if isinstance(step, Step):
            lease, metas = step.lease, list(step.handle or ())
        else:
            lease = _checks.text("step", step)
            metas = self._steps.get(lease, [])
        if not lease.isdigit():
            raise StreamError(f"step {lease!r:.80} is no lease a TQBuffer handed out")
        self._steps.pop(lease, None)
        return int(lease), metas

    def ack(self, step: Step | str) -> bool:
        """As :meth:`RayBuffer.ack <py_wire.streaming.RayBuffer.ack>`: the step's groups
        leave TQ; False (and nothing cleared) when its lease had lapsed."""
        lease, metas = self._metas(step)
        indexes = [i for meta in metas for i in _indexes(meta)]
        if not metas or not _in_controller(_still_leased, self.partition_id, indexes, lease):
            return False
        for meta in metas:
            self.stream.ack(meta)
        return True

    def release(self, step: Step | str) -> None:
        """As :meth:`RayBuffer.release <py_wire.streaming.RayBuffer.release>`: the step's
        groups are free for the next take at once, not counted as delivered."""
        lease, metas = self._metas(step)
        indexes = [i for meta in metas for i in _indexes(meta)]
        if metas and _in_controller(_still_leased, self.partition_id, indexes, lease):
            _in_controller(_release, self.partition_id, indexes)

    def set_trainer_version(self, version: int) -> None:
        """The trainer's weights are now ``version``: its takes sample at it, and producers
        that reserve without a version generate at it."""
        version = _checks.version("version", version)
        tag = {"state": "trainer", "trainer_version": version}
        _tq().kv_put(key=TRAINER_KEY, partition_id=self.partition_id, tag=tag)
        self._trainer_version = version

    def stats(self) -> dict[str, Any]:
        """:meth:`TQStream.stats` with the trainer's version."""
        return {**self.stream.stats(), "trainer_version": self._trainer()}

    def close(self) -> None:
        """The stream is over: every key of its partition is cleared."""
        keys = list(self.stream._listed())
        if keys:
            _tq().kv_clear(keys=keys, partition_id=self.partition_id)


def _indexes(meta: Any) -> list[int]:
    return [int(i) for i in meta.global_indexes]
