"""A fully-async rollout buffer on Ray alone, for jobs that do not run TransferQueue.

One actor keeps the bookkeeping (reservations, stored groups, leases, counts); the frames
themselves live in Ray's object store. A producer puts its group's frame there once and hands
the actor the ref; the actor reads it (zero-copy), which pins the object in the store of the
actor's node for as long as the buffer holds the group, and hands the same ref to the trainer.
So a group is copied into the store once, and still outlives the producer that put it: Ray
frees an object with its owner (Ray 2.56 removed ``ray.put(..., _owner=)``), but not while a
reader holds it. Should a trainer on another node find the object gone with its owner, the
actor stores its pinned frame anew, owned by the actor, and the trainer fetches that. A small
frame (:data:`INLINE_BYTES`) rides inside the actor call instead, is kept by the actor and
handed back inside the take's answer: one call, no ``ray.put``.
A group becomes visible only when :meth:`RayBuffer.put` commits it, whole: a producer that dies
before that leaves nothing, and its reservation lapses. A consumer's groups are leased: they
come back for another consumer when it does not :meth:`ack` them in time. Producers waiting
for a slot and trainers waiting for a step wait inside the actor (an asyncio actor), woken by
the commit, ack or expiry they wait for.

The rules (staleness bound, admission, oldest first, pace or drop) are
:mod:`py_wire.streaming._policy`'s, the same the TransferQueue sampler applies.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import math
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, cast

from py_wire import Frame
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
    checked_config,
    choose,
    is_stale,
    same_metadata,
    same_schema,
)
from py_wire.streaming._step import (
    MAX_SAMPLES,
    VERSION_KEY,
    Step,
    carries_versions,
    stated_version,
    step_frame,
)

#: Media digests this process put recently (so a prompt's later samples go without them).
_SENT_MEDIA: collections.OrderedDict[str, None] = collections.OrderedDict()
MAX_SENT_MEDIA = 1024
#: The longest one call waits in the actor before the caller calls again: a caller that died
#: meanwhile can claim a slot at most this long after its death (the slot then lapses).
CALL_WAIT_S = 5.0
_T = TypeVar("_T")
#: The public call an actor method serves, for the messages of the calls that wait for it.
_PUBLIC_NAME = {"set_version": "set_trainer_version"}


class _Buffer:
    """The actor's state (a plain class, so the rules are testable without Ray)."""

    def __init__(self, config: StreamConfig, object_store: bool = False) -> None:
        self.config = config
        self.object_store = object_store  # in the actor: frames go into Ray's object store
        self.groups: dict[str, Group] = {}
        self.refs: dict[str, Any] = {}
        # Groups whose frame is an object a producer put (and owns): the frame, read here, so
        # this node's store keeps the object while the buffer holds it, whatever its owner does.
        self.pinned: dict[str, Frame] = {}
        self.rehomed = 0
        # Groups whose samples arrive apart: per group, each sample's (text part, its bytes,
        # media digest, tokens) once put; media parts by digest, with how many samples use each.
        self.samples: dict[str, list[tuple[Any, int, str | None, int] | None]] = {}
        self.media: dict[str, list[Any]] = {}  # digest -> [part, nbytes, users]
        self.reserved_until: dict[str, float] = {}
        self.leases: dict[str, tuple[float, list[str]]] = {}
        self.leased: set[str] = set()
        self.trainer_version = 0
        # The schema of the first group stored; every later group must have it.
        self.schema: StreamSchema | None = None
        # Whether that schema lacks a per-row policy_version field: a step then takes groups
        # of one version, the only ones step_frame can join.
        self.one_version = False
        # The caller metadata of that group's frame; every later group must carry it.
        self.metadata: StreamMetadata | None = None
        # Why the last take waited (for the trainer's timeout message).
        self.waiting = ""
        self.stored_bytes = 0
        self.stored_total = 0  # every byte ever stored, for the caller's accounting
        self.peak_bytes = 0
        self.counts = Counts()
        self.staleness: dict[int, int] = {}
        # Per leased group, the trainer's lag behind it when the group was taken (trained).
        self.taken_lag: dict[str, int] = {}
        self.seq = itertools.count()

    def _expire(self) -> None:
        now = time.monotonic()
        for gid, until in list(self.reserved_until.items()):
            if until < now:  # the producer died or hung: give the slot back
                del self.reserved_until[gid]
                self._remove(gid)  # and the samples it put, if any: never half a group
                self.counts.abandoned += 1
        for lease, (until, gids) in list(self.leases.items()):
            if until < now:  # the consumer died or hung: its groups come back
                del self.leases[lease]
                self._give_back(gids)

    def _open(self) -> int:
        return len(self.groups)

    def reserve(self, version: int | None, samples: int | None = None) -> tuple[str, int] | None:
        """A slot and the version its group is recorded with (``version``, or the trainer's
        current one when None), or None to wait. ``samples``: the group arrives as that many
        one-row sample frames (:meth:`put_sample`) instead of one frame."""
        version = _checks.optional_version("version", version)
        if samples is not None:
            samples = _checks.whole("samples", samples, minimum=1, maximum=MAX_SAMPLES)
        self._expire()
        if version is not None and is_stale(
            version, self.trainer_version, self.config.max_staleness
        ):
            # Its group could never train: refused rather than generated and dropped.
            raise StreamError(
                f"reserve: version {version} is past the staleness bound: the trainer is at "
                f"version {self.trainer_version} and max_staleness is "
                f"{self.config.max_staleness}"
            )
        if admits(self._open(), self.stored_bytes, 0, self.config) is not None:
            return None
        version = self.trainer_version if version is None else int(version)
        gid = uuid.uuid4().hex
        self.groups[gid] = Group(gid, version, next(self.seq))
        if samples is not None:
            self.samples[gid] = [None] * int(samples)
        self.reserved_until[gid] = time.monotonic() + self.config.reservation_s
        self.counts.reserved += 1
        return gid, version

    def why_not(self) -> str | None:
        """Why a producer may not reserve now (None when it may)."""
        self._expire()
        return admits(self._open(), self.stored_bytes, 0, self.config)

    def reserve_and_put(
        self, version: int, frame: Frame, tokens: int, ref: Any = None, inline: bool = False
    ) -> tuple[str, int] | str:
        """A slot and the commit of its group's frame (generated already, at ``version``) at
        once: the group's id and version, or why it must wait (the window, the byte budget;
        nothing is reserved then). A version past the bound, a frame of another schema or
        metadata: refused, as :meth:`reserve` and :meth:`put` refuse them."""
        version = _checks.version("version", version)
        self._expire()
        if is_stale(version, self.trainer_version, self.config.max_staleness):
            self.reserve(version)  # raises, with reserve's words
        what = "reserve_and_put"
        self._same_schema(frame, what)
        self.metadata = same_metadata(self.metadata, frame.metadata, version, what)
        reason = admits(self._open(), self.stored_bytes, 0, self.config) or admits(
            self._open(), self.stored_bytes, frame.nbytes, self.config
        )
        if reason is not None:
            return reason
        slot = self.reserve(version)
        assert slot is not None  # admitted just above, in the same actor turn
        self.put(slot[0], frame, tokens, ref, inline)
        return slot

    def put(
        self, gid: str, frame: Frame, tokens: int, ref: Any = None, inline: bool = False
    ) -> str | None:
        """Commits reserved group ``gid``'s frame; None when it went in, else why it must wait
        (the byte budget). Raises if the reservation lapsed. ``ref``: the object the frame
        was read from (a producer's ``ray.put``), handed to the trainer as it is; ``inline``:
        a small frame that came inside the call, kept here and handed to the trainer inside
        the take's answer; else the frame is stored (in the object store, in the actor)."""
        nbytes = frame.nbytes
        self._expire()
        group = self.groups.get(gid)
        if group is None or gid not in self.reserved_until:
            raise StreamError(f"group {gid}: no open reservation (it lapsed, or was committed)")
        if gid in self.samples:
            raise StreamError(
                f"group {gid} was reserved for {len(self.samples[gid])} samples: put each with "
                "sample=i, not the group as one frame"
            )
        # Refused before it waits for bytes; the reservation stays, for a frame of the schema.
        self._same_schema(frame, f"group {gid}")
        self.metadata = same_metadata(self.metadata, frame.metadata, group.version, f"group {gid}")
        reason = admits(self._open(), self.stored_bytes, nbytes, self.config)
        if reason is not None:
            return reason
        del self.reserved_until[gid]
        group.ready, group.tokens, group.nbytes = True, tokens, nbytes
        if ref is not None:
            self.refs[gid], self.pinned[gid] = ref, frame
        elif inline:
            self.refs[gid] = frame
        else:
            self.refs[gid] = self._store(frame)
        self.stored_bytes += nbytes
        self.stored_total += nbytes
        self.peak_bytes = max(self.peak_bytes, self.stored_bytes)
        self.counts.stored += 1
        return None

    def put_sample(
        self,
        gid: str,
        index: int,
        text: Any,
        digest: str | None,
        media: Any,
        tokens: int,
        version: int | None,
        metadata: Mapping[str, str] | None = None,
    ) -> str | None:
        """Stores sample ``index`` of reserved group ``gid``: its text part, and its media part
        unless the buffer holds that digest already. None when it went in; ``"media"`` when the
        digest is new and ``media`` was not sent (send it); else why it must wait (the byte
        budget). The group is committed, whole, with its last sample. ``metadata``: the
        sample frame's own (the stream's caller metadata, its policy version apart)."""
        self._expire()
        group = self.groups.get(gid)
        slots = self.samples.get(gid)
        if group is None or gid not in self.reserved_until or slots is None:
            raise StreamError(
                f"group {gid}: no open reservation for samples (it lapsed, was committed, or "
                "was reserved for one frame: reserve(samples=n))"
            )
        if not 0 <= index < len(slots):
            raise StreamError(f"group {gid}: sample {index} of a group of {len(slots)} samples")
        if slots[index] is not None:
            raise StreamError(f"group {gid}: sample {index} was put already")
        if version is not None and version != group.version:
            raise StreamError(
                f"group {gid}: sample {index} says policy_version {version}, but the group "
                f"was reserved with version {group.version}"
            )
        what = f"group {gid}, sample {index}"
        self._same_schema(text, what)
        self.metadata = same_metadata(
            self.metadata, metadata or {}, group.version, what, sample=True
        )
        new_media = digest is not None and digest not in self.media
        if new_media and media is None:
            return "media"
        text_bytes = text.nbytes
        nbytes = text_bytes + (media.nbytes if new_media else 0)
        reason = admits(self._open(), self.stored_bytes, nbytes, self.config)
        if reason is not None:
            return reason
        if digest is not None:
            if new_media:
                self.media[digest] = [self._store(media), media.nbytes, 0]
            self.media[digest][2] += 1
        slots[index] = (self._store(text), text_bytes, digest, int(tokens))
        self.stored_bytes += nbytes
        self.stored_total += nbytes
        self.peak_bytes = max(self.peak_bytes, self.stored_bytes)
        if all(slot is not None for slot in slots):
            del self.reserved_until[gid]
            group.ready = True
            group.tokens = sum(slot[3] for slot in slots if slot is not None)
            self.counts.stored += 1
        return None

    def _same_schema(self, frame: Frame, what: str) -> None:
        first = self.schema is None
        self.schema = same_schema(self.schema, frame, what)
        if first:
            self.one_version = not carries_versions(frame)

    def _give_back(self, gids: list[str]) -> None:
        """A lease's groups, not trained: free for the next step."""
        for gid in gids:
            self.leased.discard(gid)
            self.taken_lag.pop(gid, None)
        self.counts.lease_returns += len(gids)

    def _store(self, frame: Frame) -> Any:
        if self.object_store:
            import ray

            return ray.put(frame)
        return frame

    def take(
        self, ranks: int, lease_s: float | None
    ) -> tuple[str, list[list[tuple[str, int, Any]]]] | None:
        """A step's groups per rank as (gid, version, parts), leased; None to wait. ``parts``
        is ``[ref]`` for a group put as one frame, else ``(texts, digests, {digest: media})``."""
        ranks = _checks.ranks("ranks", ranks)
        lease_s = _checks.optional_seconds("lease_s", lease_s)
        self._expire()
        free = [g for g in self.groups.values() if g.gid not in self.leased]
        choice = choose(free, self.trainer_version, self.config, self.one_version)
        for gid in choice.drop:
            self._remove(gid)
            self.counts.dropped_stale += 1
        if choice.wait:
            self.waiting = choice.reason
            return None
        lease = uuid.uuid4().hex
        until = time.monotonic() + (lease_s or self.config.lease_s)
        self.leases[lease] = (until, list(choice.take))
        self.leased.update(choice.take)
        for gid in choice.take:
            self.taken_lag[gid] = self.trainer_version - self.groups[gid].version
        self.counts.delivered += len(choice.take)
        picked = [self.groups[gid] for gid in choice.take]
        parts = balance(picked, ranks)
        return lease, [
            [(gid, self.groups[gid].version, self._parts(gid)) for gid in part] for part in parts
        ]

    def _parts(self, gid: str) -> Any:
        slots = self.samples.get(gid)
        if slots is None:
            return [self.refs[gid]]
        texts = [slot[0] for slot in slots if slot is not None]
        digests = [slot[2] for slot in slots if slot is not None]
        media = {d: self.media[d][0] for d in digests if d is not None}
        return texts, digests, media, dict(self.metadata[0] if self.metadata else ())

    def rehome(self, lease: str) -> dict[str, Any]:
        """For a consumer that could not fetch a group of its ``lease`` (the producer that put
        it died, and Ray would not serve its object from another node): each such group's
        pinned frame stored anew, owned by the buffer. Its refs, by group."""
        entry = self.leases.get(lease)
        out: dict[str, Any] = {}
        for gid in entry[1] if entry is not None else ():
            frame = self.pinned.pop(gid, None)
            if frame is not None:
                self.refs[gid] = out[gid] = self._store(frame)
                self.rehomed += 1
        return out

    def release(self, lease: str) -> None:
        """The consumer could not use its step (a take refused after the lease): its groups
        are free again at once, not when the lease lapses."""
        entry = self.leases.pop(lease, None)
        if entry is not None:
            self._give_back(entry[1])
            self.counts.delivered -= len(entry[1])  # they never reached the trainer

    def ack(self, lease: str) -> bool:
        """The consumer finished its step: its groups leave the buffer. False when the lease
        had lapsed (its groups were given back and may be trained again elsewhere). Each
        group's staleness is the lag it was taken (trained) at: the trainer may update its
        version before it acks."""
        self._expire()
        entry = self.leases.pop(lease, None)
        if entry is None:
            return False
        for gid in entry[1]:
            self.leased.discard(gid)
            lag = self.taken_lag.pop(gid)
            self.staleness[lag] = self.staleness.get(lag, 0) + 1
            self._remove(gid)
            self.counts.acked += 1
        return True

    def _remove(self, gid: str) -> None:
        group = self.groups.pop(gid)
        self.refs.pop(gid, None)
        self.pinned.pop(gid, None)
        self.stored_bytes -= group.nbytes
        for slot in self.samples.pop(gid, None) or ():
            if slot is None:
                continue
            self.stored_bytes -= slot[1]
            digest = slot[2]
            entry = None if digest is None else self.media.get(digest)
            if digest is not None and entry is not None:
                entry[2] -= 1
                if entry[2] == 0:  # no stored sample uses these images any more
                    del self.media[digest]
                    self.stored_bytes -= entry[1]

    def set_version(self, version: int) -> None:
        self.trainer_version = _checks.version("version", version)

    def stats(self) -> dict[str, Any]:
        self._expire()
        return {
            **self.counts.as_dict(),
            "trainer_version": self.trainer_version,
            "stored_bytes": self.stored_bytes,
            "stored_total": self.stored_total,
            "peak_bytes": self.peak_bytes,
            "open_groups": self._open(),
            "media_parts": len(self.media),
            "rehomed": self.rehomed,
            "staleness": dict(sorted(self.staleness.items())),
        }


class _BufferActor:
    """The buffer actor: :class:`_Buffer`'s state behind an asyncio event loop. A producer
    waiting for a slot or for byte budget, and a trainer waiting for a step, wait here, woken by
    the change they wait for (a commit, an ack, an expiry), not by polling the actor (a call
    per poll, and an admitted producer sleeping out its backoff)."""

    def __init__(self, config: StreamConfig) -> None:
        self.state = _Buffer(config, object_store=True)
        self._changed = asyncio.Event()

    def _signature(self) -> tuple[Any, ...]:
        state = self.state
        return (
            tuple(state.counts.as_dict().values()),
            state.trainer_version,
            state.stored_bytes,
            len(state.groups),
            len(state.leases),
        )

    def _next_expiry(self) -> float:
        state = self.state
        untils = [*state.reserved_until.values(), *(until for until, _ in state.leases.values())]
        return min(untils, default=math.inf)

    async def _attempt(
        self, attempt: Callable[[], _T], done: Callable[[_T], bool], wait_s: float
    ) -> _T:
        """Calls ``attempt()`` until ``done`` of its result, waiting between tries for the state
        to change (or the next reservation or lease to lapse), for at most ``wait_s``; returns
        the last result. Wakes the other waiters when a try changed the state."""
        deadline = time.monotonic() + wait_s
        while True:
            changed = self._changed
            before = self._signature()
            out = attempt()
            if self._signature() != before:
                self._changed = asyncio.Event()
                changed.set()
            now = time.monotonic()
            if done(out) or now >= deadline:
                return out
            timeout = max(min(deadline, self._next_expiry() + 1e-3) - now, 1e-3)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(self._changed.wait(), timeout)

    async def reserve(
        self, version: int | None, samples: int | None, wait_s: float
    ) -> tuple[str, int] | str:
        """A slot and its version, or (after ``wait_s``) why there is none."""
        out = await self._attempt(
            lambda: self.state.reserve(version, samples), lambda o: o is not None, wait_s
        )
        return out if out is not None else str(self.state.why_not())

    async def put(self, gid: str, refs: list[Any], tokens: int, wait_s: float) -> str | None:
        """None once the group is committed; else (after ``wait_s``) why not. ``refs``: the
        producer's object of the frame (in a list, so Ray hands the ref over, not the frame).
        Reading it pins the object in this node's store for as long as the buffer holds the
        frame, so the group outlives its producer without a copy of its own. A small frame
        comes inside the call instead (``refs`` holds the frame): kept here."""
        frame, ref = await _arrived(refs[0])
        return await self._attempt(
            lambda: self.state.put(gid, frame, tokens, ref=ref, inline=ref is None),
            lambda o: o is None,
            wait_s,
        )

    async def reserve_and_put(
        self, version: int, refs: list[Any], tokens: int, wait_s: float
    ) -> tuple[str, int] | str:
        """:meth:`_Buffer.reserve_and_put`, waiting for a slot and the byte budget; ``refs``
        as :meth:`put` takes it."""
        frame, ref = await _arrived(refs[0])
        return await self._attempt(
            lambda: self.state.reserve_and_put(version, frame, tokens, ref, ref is None),
            lambda o: not isinstance(o, str),
            wait_s,
        )

    async def rehome(self, lease: str) -> dict[str, Any]:
        return self.state.rehome(lease)

    async def put_sample(self, parts: tuple[Any, ...], wait_s: float) -> str | None:
        """:meth:`_Buffer.put_sample` of ``parts``, waiting for byte budget; ``"media"`` at
        once when the media must be sent."""
        return await self._attempt(
            lambda: self.state.put_sample(*parts), lambda o: o is None or o == "media", wait_s
        )

    async def take(self, ranks: int, lease_s: float | None, wait_s: float) -> Any:
        """A step (see :meth:`_Buffer.take`), or (after ``wait_s``) why there is none."""
        out = await self._attempt(
            lambda: self.state.take(ranks, lease_s), lambda o: o is not None, wait_s
        )
        return out if out is not None else self.state.waiting

    async def release(self, lease: str) -> None:
        await self._attempt(lambda: self.state.release(lease), lambda o: True, 0.0)

    async def ack(self, lease: str) -> bool:
        return bool(await self._attempt(lambda: self.state.ack(lease), lambda o: True, 0.0))

    async def set_version(self, version: int) -> None:
        await self._attempt(lambda: self.state.set_version(version), lambda o: True, 0.0)

    async def stats(self) -> dict[str, Any]:
        return dict(await self._attempt(self.state.stats, lambda o: True, 0.0))


async def _arrived(sent: Any) -> tuple[Frame, Any]:
    """A frame a producer sent (inside the call, or as its object's ref) and that ref."""
    if isinstance(sent, Frame):
        return sent, None
    frame: Frame = await sent
    return frame, sent


class RayBuffer:
    """A handle on the buffer actor; picklable, so producers and trainers in other Ray
    processes share one buffer. ``name`` makes it a named actor others can find.

    Where the actor runs is Ray's actor placement, with Ray's own options: ``num_cpus`` (0 by
    default: it waits, it does not compute), ``resources`` (custom resources the node must
    offer, e.g. ``{"trainer_node": 0.01}``) and ``scheduling_strategy`` (``"DEFAULT"``,
    ``"SPREAD"``, or a ``ray.util.scheduling_strategies`` object: a
    ``NodeAffinitySchedulingStrategy`` to pin it to a node, a
    ``PlacementGroupSchedulingStrategy`` to put it in a placement group's bundle). Place it
    on a node that lives as long as the job (the trainer's or the head): it holds every
    stored group, and a buffer on a rollout node dies with that node.

    A placement Ray refuses (a quantity finer than Ray's 0.0001, a name another live actor
    holds, a bundle index past the placement group, a removed placement group, a node that
    is gone under ``soft=False``) is a :class:`StreamError` naming the argument, raised here.
    One Ray accepts but no node can serve yet (more CPUs than any node has, a resource no node
    offers) leaves the actor pending: every call then waits at most its timeout (``timeout_s``;
    :attr:`StreamConfig.admission_timeout_s` for the calls without one) and raises a
    :class:`StreamError` saying the actor could not be placed, and why."""

    def __init__(
        self,
        config: StreamConfig,
        name: str | None = None,
        *,
        num_cpus: float = 0,
        resources: Mapping[str, float] | None = None,
        scheduling_strategy: Any = None,
    ) -> None:
        self.config = checked_config(config)
        if name is not None:
            _checks.text("name", name)
        options: dict[str, Any] = {"num_cpus": _checks.amount("num_cpus", num_cpus)}
        if resources is not None:
            options["resources"] = _checks.resources("resources", resources)
        if scheduling_strategy is not None:
            options["scheduling_strategy"] = _checks.scheduling_strategy(
                "scheduling_strategy", scheduling_strategy
            )
        if name is not None:
            options["name"] = name
        _refused_by_ray(options)
        import ray

        if ray.is_initialized():
            _refused_by_cluster(options)
        actor = ray.remote(max_restarts=0)(_BufferActor)
        try:
            self.actor: Any = actor.options(**options).remote(config)
        except (ValueError, TypeError) as error:  # Ray's own refusals the checks missed
            raise StreamError(
                f"RayBuffer: Ray refused the actor's placement ({_described(options)}): {error}"
            ) from None
        # Every placement argument, defaults included, for the messages of a pending actor.
        self._options = {"resources": None, "scheduling_strategy": None, "name": None, **options}
        self._placed = False
        self._ready: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_ready"] = None  # a process that unpickles the handle asks the actor anew
        return state

    def _placed_within(self, timeout_s: float, what: str) -> None:
        """Waits (at most ``timeout_s``) until the actor is placed and started; a
        :class:`StreamError` saying why it could not be placed when it is not."""
        if self._placed:
            return
        import ray

        if self._ready is None:
            self._ready = self.actor.__ray_ready__.remote()
        done, _ = ray.wait([self._ready], timeout=timeout_s)
        if not done:
            raise StreamError(
                f"{what}: the buffer's actor could not be placed within {timeout_s:g} s "
                f"({_described(self._options)}): {_why_pending(self._options)}"
            )
        try:
            ray.get(self._ready)
        except ray.exceptions.RayError as error:
            raise StreamError(
                f"{what}: the buffer's actor could not be placed "
                f"({_described(self._options)}): {type(error).__name__}: {error}"
            ) from None
        self._placed = True

    def _call(self, method: str, *args: Any, timeout_s: float | None = None) -> Any:
        import ray

        what = _PUBLIC_NAME.get(method, method)
        self._placed_within(timeout_s or self.config.admission_timeout_s, what)
        return ray.get(getattr(self.actor, method).remote(*args))

    def _wait(
        self,
        method: str,
        args: tuple[Any, ...],
        done: Callable[[Any], bool],
        timeout_s: float,
        what: str,
    ) -> Any:
        """Calls the actor's waiting ``method`` (which waits in the actor, woken by the change
        it waits for) until ``done`` of its answer; :class:`AdmissionTimeout` after
        ``timeout_s`` with the actor's last reason."""
        deadline = time.monotonic() + timeout_s
        self._placed_within(timeout_s, what)
        while True:
            left = deadline - time.monotonic()
            out = self._call(method, *args, max(min(left, CALL_WAIT_S), 0.0))
            if done(out):
                return out
            if time.monotonic() >= deadline:
                reason = out if isinstance(out, str) else "too few groups are ready for a step"
                raise AdmissionTimeout(f"{what}: waited {timeout_s:g} s and still {reason}")

    def reserve(
        self,
        version: int | None = None,
        timeout_s: float | None = None,
        *,
        samples: int | None = None,
    ) -> tuple[str, int]:
        """Waits for a slot (admission control; :class:`AdmissionTimeout` after
        ``timeout_s``); returns the group's id and version. With ``version=None`` the group is
        recorded with the trainer's version at admission: the producer then generates with
        weights at least that new (a version read before a long wait would make the group
        look staler than it is, or, read by a producer that then syncs, fresher).
        ``samples=n``: the group's ``n`` samples arrive apart, each a one-row frame put with
        ``put(gid, frame, sample=i)`` by any producer; the media the samples share are stored
        once. A ``version`` already past the staleness bound (its group could never train) is
        a :class:`StreamError`."""
        version = _checks.optional_version("version", version)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        if samples is not None:
            samples = _checks.whole("samples", samples, minimum=1, maximum=MAX_SAMPLES)
        gid, got = self._wait(
            "reserve",
            (version, samples),
            lambda out: not isinstance(out, str),
            timeout_s or self.config.admission_timeout_s,
            "reserve",
        )
        return str(gid), int(got)

    def put(
        self,
        gid: str,
        frame: Frame,
        timeout_s: float | None = None,
        *,
        sample: int | None = None,
    ) -> None:
        """Stores reserved group ``gid``'s frame (one frame per group; its ``policy_version``
        metadata names the weights that generated it) and commits it, waiting while the buffer
        is over its byte budget. ``sample=i``: the frame is the group's sample ``i`` (one row;
        the group was reserved with ``samples=``): its text is stored, its media only when no
        stored sample holds the same images, and the group is committed with its last sample.
        A frame of another schema than the stream's (the first group's) is a
        :class:`py_wire.SchemaError` naming the group; the reservation stays usable."""
        gid = _checks.text("gid", gid)
        frame = _checks.frame("frame", frame)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        if sample is not None:
            index = _checks.whole("sample", sample, maximum=MAX_SAMPLES - 1)
            self._put_sample(gid, frame, index, timeout_s)
            return
        # The frame goes into the object store once, by this process (a small one inside the
        # call); one actor call commits it (over the byte budget it waits in the actor until
        # acks make room).
        self._wait(
            "put",
            (gid, [_sent(frame)], _tokens(frame)),
            lambda reason: reason is None,
            timeout_s or self.config.admission_timeout_s,
            f"put group {gid}",
        )

    def reserve_and_put(self, frame: Frame, timeout_s: float | None = None) -> tuple[str, int]:
        """A slot and the put of a group generated already (a verl sample, put as it
        finishes), in one actor call: waits for a slot and for the byte budget, then commits
        ``frame`` at the version its ``policy_version`` metadata states, which it must. Returns
        the group's id and version. Refused as :meth:`reserve` and :meth:`put` refuse: a
        version past the staleness bound, a frame of another schema or metadata."""
        frame = _checks.frame("frame", frame)
        timeout_s = _checks.optional_seconds("timeout_s", timeout_s)
        version = stated_version(frame)
        gid, got = self._wait(
            "reserve_and_put",
            (version, [_sent(frame)], _tokens(frame)),
            lambda out: not isinstance(out, str),
            timeout_s or self.config.admission_timeout_s,
            "reserve_and_put",
        )
        return str(gid), int(got)

    def _put_sample(self, gid: str, frame: Frame, index: int, timeout_s: float | None) -> None:
        text, media, digest = _samples.split(frame)
        tokens = _tokens(frame)
        meta = frame.metadata.get(VERSION_KEY)
        version = int(meta) if meta is not None and meta.lstrip("-").isdigit() else None
        if meta is not None and version is None:
            raise StreamError(f"sample {index}: metadata {VERSION_KEY}={meta!r} is no integer")

        # The media go along with the first of a prompt's samples this process puts (a rollout
        # worker usually generates all of a prompt's samples); the others send their text part
        # alone, and the media only if the buffer asks (it holds no such images: another
        # process's sample is still to come, or they were freed).
        timeout = timeout_s or self.config.admission_timeout_s
        sent = digest is None or digest in _SENT_MEDIA
        meta_of = dict(frame.metadata)
        parts = (gid, index, text, digest, None if sent else media, tokens, version, meta_of)
        what = f"put sample {index}"
        reason = self._wait("put_sample", (parts,), lambda r: r in (None, "media"), timeout, what)
        if reason == "media":
            parts = (gid, index, text, digest, media, tokens, version, meta_of)
            self._wait("put_sample", (parts,), lambda r: r is None, timeout, what)
        if digest is not None:
            _SENT_MEDIA[digest] = None
            _SENT_MEDIA.move_to_end(digest)
            if len(_SENT_MEDIA) > MAX_SENT_MEDIA:
                _SENT_MEDIA.popitem(last=False)

    def take(
        self,
        ranks: int = 1,
        timeout_s: float = 600.0,
        lease_s: float | None = None,
    ) -> Step:
        """The next step's groups, oldest first within the staleness bound, balanced across
        ``ranks``; waits while too few are ready (or, under ``"pace"``, a group due now is still
        being generated)."""
        ranks = _checks.ranks("ranks", ranks)
        timeout_s = _checks.seconds("timeout_s", timeout_s)
        lease_s = _checks.optional_seconds("lease_s", lease_s)
        start = time.perf_counter()
        lease, parts = self._wait(
            "take",
            (ranks, lease_s),
            lambda out: not isinstance(out, str),
            timeout_s,
            "take",
        )
        waited = time.perf_counter() - start
        try:
            frames = self._frames(lease, parts)
        except Exception:
            # Refused or failed after the lease: its groups go back now, for the next take.
            self._call("release", lease)
            raise
        return Step(
            lease,
            frames,
            [[gid for gid, _, _ in part] for part in parts],
            [[v for _, v, _ in part] for part in parts],
            waited,
        )

    def _frames(self, lease: str, parts: list[list[tuple[str, int, Any]]]) -> list[Frame | None]:
        """Each rank's step frame of its leased ``parts``."""
        import ray

        # Every group put whole is fetched in one ray.get: one round trip for the step. Small
        # frames came inside the take's answer.
        whole = [
            (gid, stored[0])
            for part in parts
            for gid, _, stored in part
            if isinstance(stored, list) and not isinstance(stored[0], Frame)
        ]
        try:
            refs = iter(_fetch([ref for _, ref in whole]))
        except ray.exceptions.ObjectLostError:
            # A producer died and Ray could not serve its object here: the buffer stores the
            # frames it pinned anew, under its own name.
            rehomed = self._call("rehome", lease)
            refs = iter(_fetch([rehomed.get(gid, ref) for gid, ref in whole]))
        fetched = (
            stored[0] if isinstance(stored[0], Frame) else next(refs)
            for part in parts
            for _, _, stored in part
            if isinstance(stored, list)
        )
        frames: list[Frame | None] = []
        for part in parts:
            if not part:
                frames.append(None)
                continue
            group_frames = [
                next(fetched) if isinstance(stored, list) else _assembled(version, stored)
                for _, version, stored in part
            ]
            frames.append(step_frame(group_frames))
        return frames

    def ack(self, step: Step | str) -> bool:
        """Ends ``step``'s lease (a :class:`Step`, or its lease id): its groups leave the
        buffer. False when the lease had lapsed (the groups went back to the buffer)."""
        if isinstance(step, Step):
            step = step.lease
        return bool(self._call("ack", _checks.text("step", step)))

    def release(self, step: Step | str) -> None:
        """The consumer will not train ``step`` (a :class:`Step`, or its lease id): its groups
        are free for the next take at once, not when the lease lapses, and not counted as
        delivered."""
        if isinstance(step, Step):
            step = step.lease
        self._call("release", _checks.text("step", step))

    def set_trainer_version(self, version: int) -> None:
        self._call("set_version", _checks.version("version", version))

    def stats(self) -> dict[str, Any]:
        return dict(self._call("stats"))

    def close(self) -> None:
        """The stream is over: the buffer's actor ends, and the groups it held with it."""
        import ray

        ray.kill(self.actor)


def _fetch(refs: list[Any]) -> list[Frame]:
    if not refs:
        return []
    import ray

    return cast(list[Frame], ray.get(refs))


def _assembled(version: int, stored: Any) -> Frame:
    """A group put as samples: its text parts and media parts, assembled into one frame."""
    texts, digests, media, metadata = stored
    got = _fetch([*texts, *media.values()])
    by_digest = dict(zip(media, got[len(texts) :], strict=True))
    metadata = {**metadata, VERSION_KEY: str(version)}
    return _samples.assemble(got[: len(texts)], digests, by_digest, metadata)


#: The largest frame sent inside an actor call rather than put in the object store first:
#: Ray's own limit for arguments it carries inline (``max_direct_call_object_size``, 100 KiB),
#: less room for the call's other arguments. A small frame then costs one call, not a
#: ``ray.put`` and a call.
INLINE_BYTES = 96 * 1024


def _sent(frame: Frame) -> Any:
    """What a producer sends the actor for ``frame``: the frame itself when small, else its
    object in the store (put once, by this process)."""
    if frame.nbytes <= INLINE_BYTES:
        return frame
    import ray

    return ray.put(frame)


def _tokens(frame: Frame) -> int:
    """The frame's token count (for balancing ranks), from its sequence offsets."""
    layout = frame.layout
    return int(layout.total_tokens) if layout.seq_offsets is not None else frame.num_rows


def _described(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r:.200}" for k, v in options.items())


def _refused_by_ray(options: Mapping[str, Any]) -> None:
    """Ray's own check of each actor option (its quantities' 0.0001 precision, the names it
    keeps for itself), before Ray sees them: a :class:`StreamError` naming the argument."""
    try:
        from ray._common.ray_option_utils import actor_options
    except ImportError:  # another Ray: its refusal at .remote() is still a StreamError
        return
    for key, value in options.items():
        option = actor_options.get(key)
        if option is None:
            continue
        try:
            option.validate(key, value)
        except (ValueError, TypeError, OverflowError) as error:
            raise StreamError(
                f"RayBuffer: {key}={value!r:.200} is refused by Ray: {error}"
            ) from None


def _refused_by_cluster(options: Mapping[str, Any]) -> None:
    """What the running cluster can never serve, refused before the actor is built: a
    ``name`` a live actor holds, a placement group that was removed or has no such bundle, a
    node that is gone when the strategy says ``soft=False``."""
    import ray
    from ray.util import placement_group_table
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    name = options.get("name")
    if name is not None:
        try:
            ray.get_actor(name)
        except ValueError:  # no live actor has that name
            pass
        else:
            raise StreamError(f"RayBuffer: name {name!r:.200} is taken by a live actor")
    strategy = options.get("scheduling_strategy")
    if isinstance(strategy, PlacementGroupSchedulingStrategy) and strategy.placement_group:
        group = strategy.placement_group
        table = placement_group_table(group)
        if table.get("state") == "REMOVED":
            raise StreamError(
                f"RayBuffer: scheduling_strategy names placement group {group.id.hex()}, "
                "which was removed"
            )
        index = strategy.placement_group_bundle_index
        count = len(table.get("bundles") or {})
        if not -1 <= index < count:
            raise StreamError(
                f"RayBuffer: scheduling_strategy's placement_group_bundle_index {index} is "
                f"past placement group {group.id.hex()}'s {count} bundles"
            )
    if isinstance(strategy, NodeAffinitySchedulingStrategy) and not strategy.soft:
        alive = {n["NodeID"] for n in _alive_nodes()}
        if strategy.node_id not in alive:
            raise StreamError(
                f"RayBuffer: scheduling_strategy pins the actor to node {strategy.node_id} "
                "with soft=False, and no alive node of the cluster has that id"
            )


def _alive_nodes() -> list[dict[str, Any]]:
    import ray

    return [n for n in ray.nodes() if n.get("Alive")]  # type: ignore[no-untyped-call]


def _demands(options: Mapping[str, Any]) -> dict[str, float]:
    out = {"CPU": float(options.get("num_cpus") or 0)}
    out.update(options.get("resources") or {})
    return {k: v for k, v in out.items() if v > 0}


def _why_pending(options: Mapping[str, Any]) -> str:
    """Why an actor with ``options`` is not placed, in words, from what the cluster's nodes
    (or its placement group's bundle) offer."""
    from ray.util import placement_group_table
    from ray.util.scheduling_strategies import (
        NodeAffinitySchedulingStrategy,
        PlacementGroupSchedulingStrategy,
    )

    demands = _demands(options)
    asked = ", ".join(f"{k}={v:g}" for k, v in demands.items()) or "no resources"
    strategy = options.get("scheduling_strategy")
    if isinstance(strategy, PlacementGroupSchedulingStrategy) and strategy.placement_group:
        table = placement_group_table(strategy.placement_group)
        state = table.get("state")
        if state != "CREATED":
            return f"its placement group is {state} (scheduling_strategy), not placed"
        bundles = table.get("bundles") or {}
        index = strategy.placement_group_bundle_index
        chosen = [bundles[index]] if index >= 0 and index in bundles else list(bundles.values())
        if not any(all(b.get(k, 0) >= v for k, v in demands.items()) for b in chosen):
            return (
                f"it asks {asked}, more than its placement group's bundle offers "
                f"({chosen if len(chosen) > 1 else chosen[0]}; scheduling_strategy)"
            )
        return (
            f"its placement group's bundle offers what it asks ({asked}): it is still "
            "starting, or other tasks hold the bundle"
        )
    nodes = _alive_nodes()
    if isinstance(strategy, NodeAffinitySchedulingStrategy) and not strategy.soft:
        nodes = [n for n in nodes if n["NodeID"] == strategy.node_id]
        if not nodes:
            return f"node {strategy.node_id} (scheduling_strategy, soft=False) is gone"
    for key, amount in demands.items():
        most = max((float(n["Resources"].get(key, 0)) for n in nodes), default=0.0)
        argument = "num_cpus" if key == "CPU" else f"resources[{key!r}]"
        if most == 0:
            return f"no alive node offers resource {key!r} ({argument} = {amount:g})"
        if most < amount:
            return (
                f"{argument} = {amount:g}, but no alive node has that much {key!r} "
                f"(the most one has is {most:g})"
            )
    if not any(
        all(float(n["Resources"].get(k, 0)) >= v for k, v in demands.items()) for n in nodes
    ):
        return f"no single alive node offers all it asks ({asked})"
    return (
        f"nodes of the cluster offer what it asks ({asked}): it is still starting, or other "
        "tasks hold those resources"
    )
