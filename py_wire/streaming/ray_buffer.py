"""A fully-async rollout buffer on Ray alone, for jobs that do not run TransferQueue.

One actor keeps the bookkeeping (reservations, stored groups, leases, counts); the frames
themselves live in Ray's object store, put there by the actor, so the actor owns them and a
group outlives the producer that generated it (an object a producer puts dies with it; Ray
2.56 removed ``ray.put(..., _owner=)``). The frame reaches the actor as a zero-copy
pickle-5 argument; the actor's ``ray.put`` is its one copy into the store.
A group becomes visible only when :meth:`RayBuffer.put` commits it, whole: a producer that dies
before that leaves nothing, and its reservation lapses. A consumer's groups are leased: they
come back for another consumer when it does not :meth:`ack` them in time.

The rules (staleness bound, admission, oldest first, pace or drop) are
:mod:`py_wire.streaming._policy`'s, the same the TransferQueue sampler applies.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
import uuid
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

#: The metadata key a producer's frames carry their policy version in; concatenated per row
#: into the schema field of the same name.
VERSION_KEY = "policy_version"


class _Buffer:
    """The actor's state (a plain class, so the rules are testable without Ray)."""

    def __init__(self, config: StreamConfig, object_store: bool = False) -> None:
        self.config = config
        self.object_store = object_store  # in the actor: frames go into Ray's object store
        self.groups: dict[str, Group] = {}
        self.refs: dict[str, Any] = {}
        self.reserved_until: dict[str, float] = {}
        self.leases: dict[str, tuple[float, list[str]]] = {}
        self.leased: set[str] = set()
        self.trainer_version = 0
        self.stored_bytes = 0
        self.peak_bytes = 0
        self.counts = Counts()
        self.staleness: dict[int, int] = {}
        self.seq = itertools.count()

    def _expire(self) -> None:
        now = time.monotonic()
        for gid, until in list(self.reserved_until.items()):
            if until < now:  # the producer died or hung: give the slot back
                del self.reserved_until[gid]
                del self.groups[gid]
                self.counts.abandoned += 1
        for lease, (until, gids) in list(self.leases.items()):
            if until < now:  # the consumer died or hung: its groups come back
                del self.leases[lease]
                for gid in gids:
                    self.leased.discard(gid)
                self.counts.lease_returns += len(gids)

    def _open(self) -> int:
        return len(self.groups)

    def reserve(self, version: int | None) -> tuple[str, int] | None:
        """A slot and the version its group is recorded with (``version``, or the trainer's
        current one when None), or None to wait."""
        self._expire()
        if admits(self._open(), self.stored_bytes, 0, self.config) is not None:
            return None
        version = self.trainer_version if version is None else int(version)
        gid = uuid.uuid4().hex
        self.groups[gid] = Group(gid, version, next(self.seq))
        self.reserved_until[gid] = time.monotonic() + self.config.reservation_s
        self.counts.reserved += 1
        return gid, version

    def why_not(self, nbytes: int = 0) -> str | None:
        self._expire()
        return admits(self._open(), self.stored_bytes, nbytes, self.config)

    def put(self, gid: str, frame: Frame, tokens: int) -> str | None:
        """Stores reserved group ``gid``'s frame in the object store and commits it; None when
        it went in, else why it must wait (the byte budget). Raises if the reservation
        lapsed."""
        nbytes = frame.nbytes
        self._expire()
        group = self.groups.get(gid)
        if group is None or gid not in self.reserved_until:
            raise StreamError(f"group {gid}: no open reservation (it lapsed, or was committed)")
        reason = admits(self._open(), self.stored_bytes, nbytes, self.config)
        if reason is not None:
            return reason
        del self.reserved_until[gid]
        group.ready, group.tokens, group.nbytes = True, tokens, nbytes
        if self.object_store:
            import ray

            self.refs[gid] = ray.put(frame)
        else:
            self.refs[gid] = frame
        self.stored_bytes += nbytes
        self.peak_bytes = max(self.peak_bytes, self.stored_bytes)
        self.counts.stored += 1
        return None

    def take(
        self, ranks: int, lease_s: float | None
    ) -> tuple[str, list[list[tuple[str, int, Any]]]] | None:
        """A step's groups per rank as (gid, version, [ref]), leased; None to wait."""
        self._expire()
        free = [g for g in self.groups.values() if g.gid not in self.leased]
        choice = choose(free, self.trainer_version, self.config)
        for gid in choice.drop:
            self._remove(gid)
            self.counts.dropped_stale += 1
        if choice.wait:
            return None
        lease = uuid.uuid4().hex
        until = time.monotonic() + (lease_s or self.config.lease_s)
        self.leases[lease] = (until, list(choice.take))
        self.leased.update(choice.take)
        self.counts.delivered += len(choice.take)
        picked = [self.groups[gid] for gid in choice.take]
        parts = balance(picked, ranks)
        return lease, [
            [(gid, self.groups[gid].version, [self.refs[gid]]) for gid in part] for part in parts
        ]

    def ack(self, lease: str) -> bool:
        """The consumer finished its step: its groups leave the buffer. False when the lease
        had lapsed (its groups were given back and may be trained again elsewhere)."""
        self._expire()
        entry = self.leases.pop(lease, None)
        if entry is None:
            return False
        for gid in entry[1]:
            self.leased.discard(gid)
            version = self.groups[gid].version
            lag = self.trainer_version - version
            self.staleness[lag] = self.staleness.get(lag, 0) + 1
            self._remove(gid)
            self.counts.acked += 1
        return True

    def _remove(self, gid: str) -> None:
        group = self.groups.pop(gid)
        self.refs.pop(gid, None)
        self.stored_bytes -= group.nbytes

    def set_version(self, version: int) -> None:
        self.trainer_version = int(version)

    def stats(self) -> dict[str, Any]:
        self._expire()
        return {
            **self.counts.as_dict(),
            "trainer_version": self.trainer_version,
            "stored_bytes": self.stored_bytes,
            "peak_bytes": self.peak_bytes,
            "open_groups": self._open(),
            "staleness": dict(sorted(self.staleness.items())),
        }


@dataclasses.dataclass
class Step:
    """One trainer step's groups: per data-parallel rank, one frame of its whole groups (their
    rows' policy versions in the ``policy_version`` field), and the lease to :meth:`ack`."""

    lease: str
    frames: list[Frame | None]
    group_ids: list[list[str]]
    versions: list[list[int]]
    #: Seconds the take waited for the step's groups (the rest of it moved bytes).
    waited_s: float = 0.0


class RayBuffer:
    """A handle on the buffer actor; picklable, so producers and trainers in other Ray
    processes share one buffer. ``name`` makes it a named actor others can find."""

    def __init__(self, config: StreamConfig, name: str | None = None) -> None:
        import ray

        self.config = config
        actor = ray.remote(num_cpus=0, max_restarts=0)(_Buffer)
        options: dict[str, Any] = {}
        if name is not None:
            options["name"] = name
        self.actor = actor.options(**options).remote(config, True)

    def _call(self, method: str, *args: Any) -> Any:
        import ray

        return ray.get(getattr(self.actor, method).remote(*args))

    def reserve(
        self, version: int | None = None, timeout_s: float | None = None
    ) -> tuple[str, int]:
        """Waits for a slot (admission control; :class:`AdmissionTimeout` after
        ``timeout_s``); returns the group's id and version. With ``version=None`` the group is
        recorded with the trainer's version at admission: the producer then generates with
        weights at least that new (a version read before a long wait would make the group
        look staler than it is, or, read by a producer that then syncs, fresher)."""
        got: list[tuple[str, int]] = []

        def check() -> str | None:
            slot = self._call("reserve", version)
            if slot is None:
                return str(self._call("why_not"))
            got.append((slot[0], int(slot[1])))
            return None

        wait_until(check, timeout_s or self.config.admission_timeout_s, "reserve")
        return got[0]

    def put(self, gid: str, frame: Frame, timeout_s: float | None = None) -> None:
        """Stores reserved group ``gid``'s frame (one frame per group; its ``policy_version``
        metadata names the weights that generated it) and commits it, waiting while the buffer
        is over its byte budget."""
        tokens = _tokens(frame)
        # Under the budget (the common case) one actor call stores and commits the group; over
        # it, the producer polls the bookkeeping alone and sends the frame again only once the
        # budget has room.
        if self._call("put", gid, frame, tokens) is None:
            return

        def check() -> str | None:
            reason: str | None = self._call("why_not", frame.nbytes)
            if reason is None:
                reason = self._call("put", gid, frame, tokens)
            return reason

        wait_until(
            check,
            timeout_s or self.config.admission_timeout_s,
            f"put group {gid}",
        )

    def take(
        self,
        ranks: int = 1,
        timeout_s: float = 600.0,
        lease_s: float | None = None,
    ) -> Step:
        """The next step's groups, oldest first within the staleness bound, balanced across
        ``ranks``; waits while too few are ready (or, under ``"pace"``, a group due now is still
        being generated)."""
        import ray

        got: list[Any] = []

        def check() -> str | None:
            out = self._call("take", ranks, lease_s)
            if out is None:
                return "too few groups are ready for a step"
            got.append(out)
            return None

        start = time.perf_counter()
        wait_until(check, timeout_s, "take")
        waited = time.perf_counter() - start
        lease, parts = got[0]
        frames: list[Frame | None] = []
        for part in parts:
            if not part:
                frames.append(None)
                continue
            group_frames = ray.get([refs[0] for _, _, refs in part])
            frames.append(concat(group_frames, per_row={VERSION_KEY: VERSION_KEY}))
        return Step(
            lease,
            frames,
            [[gid for gid, _, _ in part] for part in parts],
            [[v for _, v, _ in part] for part in parts],
            waited,
        )

    def ack(self, step: Step | str) -> bool:
        return bool(self._call("ack", step.lease if isinstance(step, Step) else step))

    def set_trainer_version(self, version: int) -> None:
        self._call("set_version", version)

    def stats(self) -> dict[str, Any]:
        return dict(self._call("stats"))


def _tokens(frame: Frame) -> int:
    """The frame's token count (for balancing ranks), from its sequence offsets."""
    layout = frame.layout
    return int(layout.total_tokens) if layout.seq_offsets is not None else frame.num_rows
