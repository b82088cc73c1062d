"""The rules of a fully-async buffer, one copy for every backend (TransferQueue's sampler and
the Ray-only buffer actor both call these): which groups a trainer step takes, which wait, which
are stale, when a producer may add another group, when a lease has run out.

Versions: the trainer is at version ``t`` after ``t`` weight updates; a group generated with
weights ``v`` trained at step ``t`` is ``t - v`` versions stale, and the bound ``k`` allows
``t - v <= k``.

Producers reserve a slot before they generate a group (:func:`admits`): at most ``(k + 1) *
batch_groups`` groups are reserved, in flight or stored beyond those the trainer consumed, and
stored bytes stay under the budget. A trainer step (:func:`choose`) takes the oldest ready
groups first. A group that would go stale after this step (``t - v == k``) and is still being
generated holds the step back (policy ``"pace"``: the trainer waits for it, so long rollouts
are not discarded in favour of short ones), or is left to go stale (``"drop"``). Under either
policy a group already past the bound (``t - v > k``: a lease that lapsed while the trainer
moved on, a reservation recorded with old weights) is dropped, counted, never trained.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Literal

from py_wire import Frame, SchemaError
from py_wire.adapters import checked_schema, reserved_metadata_key
from py_wire.streaming._checks import config_fields
from py_wire.streaming._errors import AdmissionTimeout, StreamError
from py_wire.streaming._step import VERSION_KEY

Policy = Literal["pace", "drop"]


@dataclasses.dataclass(frozen=True)
class StreamConfig:
    """What the caller chooses: the staleness bound ``max_staleness`` (k), the groups per
    trainer step, the policy for groups that would go stale, the buffer's byte budget, how long
    a consumer holds groups before they return (``lease_s``), how long a producer's reservation
    lasts before an unfinished group is given up (``reservation_s``), and how long a producer
    waits for a slot before :class:`AdmissionTimeout`."""

    max_staleness: int
    batch_groups: int
    policy: Policy = "pace"
    max_bytes: int | None = None
    lease_s: float = 60.0
    reservation_s: float = 600.0
    admission_timeout_s: float = 120.0

    def __post_init__(self) -> None:
        checked = config_fields({f.name: getattr(self, f.name) for f in dataclasses.fields(self)})
        for name, value in checked.items():  # a numpy int or float is kept as Python's
            object.__setattr__(self, name, value)

    @property
    def window(self) -> int:
        """The most groups reserved, in flight or stored at once."""
        return (self.max_staleness + 1) * self.batch_groups


def checked_config(value: object) -> StreamConfig:
    """``value`` if it is a :class:`StreamConfig` (a ``TypeError`` naming ``config`` if not)."""
    if not isinstance(value, StreamConfig):
        raise TypeError(f"config must be a StreamConfig, not {type(value).__name__}")
    return value


@dataclasses.dataclass
class Group:
    """One group as the rules see it: its id, the policy version that generated it, its
    arrival order, its rows' token count (for balancing ranks) and stored bytes; ``ready``
    once its frame is stored whole."""

    gid: str
    version: int
    seq: int
    ready: bool = False
    tokens: int = 0
    nbytes: int = 0


@dataclasses.dataclass
class Counts:
    """What happened to the groups, reported to the caller (nothing is dropped silently)."""

    reserved: int = 0
    stored: int = 0
    delivered: int = 0
    acked: int = 0
    dropped_stale: int = 0
    lease_returns: int = 0
    abandoned: int = 0

    def as_dict(self) -> dict[str, int]:
        return dataclasses.asdict(self)


@dataclasses.dataclass
class Choice:
    """A step's decision: the groups to take (oldest first), the stale ones to drop, and
    whether the step must wait (too few ready groups, or, under ``"pace"``, a group that must
    train now is still being generated)."""

    take: list[str]
    drop: list[str]
    wait: bool
    #: Why the step waits, in words a timeout's message gives the trainer ("" when it does not).
    reason: str = ""


def is_stale(version: int, trainer_version: int, k: int) -> bool:
    return trainer_version - version > k


def choose(
    groups: Iterable[Group],
    trainer_version: int,
    config: StreamConfig,
    one_version: bool = False,
) -> Choice:
    """The groups a trainer step at ``trainer_version`` takes: ``batch_groups`` whole groups,
    the oldest (lowest version, then first stored) first. ``one_version``: the step's groups
    all have one version (the oldest that has ``batch_groups`` ready groups), for a schema
    without a per-row ``policy_version`` field, whose step frame cannot carry two."""
    k = config.max_staleness
    groups = list(groups)
    ready = sorted((g for g in groups if g.ready), key=lambda g: (g.version, g.seq))
    pending = [g for g in groups if not g.ready]
    # Past the bound: never trained, whatever the policy (pacing cannot make it fresh again).
    drop = [g.gid for g in ready if is_stale(g.version, trainer_version, k)]
    ready = [g for g in ready if not is_stale(g.version, trainer_version, k)]
    if one_version:
        # Within the window's (k + 1) * batch_groups groups, once all are ready, some version
        # has batch_groups of them: a step of one version always comes.
        by_version: dict[int, list[Group]] = {}
        for g in ready:
            by_version.setdefault(g.version, []).append(g)
        full = [same for same in by_version.values() if len(same) >= config.batch_groups]
        if not full and len(ready) >= config.batch_groups:
            counts = ", ".join(f"{len(same)} of version {v}" for v, same in by_version.items())
            return Choice(
                [],
                drop,
                True,
                f"{len(ready)} groups are ready ({counts}), but of different versions and no "
                f"version has the {config.batch_groups} groups a step takes: the stream's "
                "schema has no per-row policy_version field, so one step's frame holds one "
                "version and a step takes groups of one version",
            )
        ready = full[0] if full else []
    if len(ready) < config.batch_groups:
        pending_note = f", {len(pending)} still being generated" if pending else ""
        return Choice(
            [],
            drop,
            True,
            f"too few groups are ready for a step: {len(ready)} ready{pending_note}, "
            f"batch_groups = {config.batch_groups}",
        )
    take = ready[: config.batch_groups]
    if config.policy == "pace":
        # A group still being generated that must train at this step at the latest: wait for
        # it rather than train younger groups past it. One already past the bound will be
        # dropped when it arrives: waiting for it would stall the trainer for nothing.
        due = [g for g in pending if trainer_version - g.version == k]
        if due:
            return Choice(
                [],
                drop,
                True,
                f"{len(due)} group(s) of version {due[0].version}, still being generated, "
                f"must train at this step (trainer version {trainer_version}, max_staleness "
                f"{k}, policy 'pace')",
            )
    return Choice([g.gid for g in take], drop, False)


#: A stream's schema: its fingerprint, and the words that name it in an error ("name version v").
StreamSchema = tuple[str, str]


def same_schema(stream: StreamSchema | None, frame: Frame, what: str) -> StreamSchema:
    """The schema of ``frame``, which must be the stream's (``None``: the stream has none yet,
    this frame's becomes it). A step concatenates its groups, so a group of another schema
    would make every step that includes it fail after it was leased: it is refused at its put
    instead, a :class:`SchemaError` naming ``what`` and both schemas."""
    schema = checked_schema(frame)
    mine = (schema.fingerprint, f"{schema.name!r} version {schema.version}")
    if stream is not None and mine[0] != stream[0]:
        raise SchemaError(
            f"{what}: its frame's schema is {mine[1]} ({mine[0]}), but the stream's groups "
            f"have schema {stream[1]} ({stream[0]}): a step concatenates its groups, so every "
            "group of a stream has one schema"
        )
    return mine


#: A stream's caller metadata (``encode(..., metadata=)``): every key and value its groups'
#: frames carry apart from the policy version, and whether they carry the version.
StreamMetadata = tuple[tuple[tuple[str, str], ...], bool]


def caller_metadata(metadata: Mapping[str, str]) -> dict[str, str]:
    """A frame's ``metadata`` without py_wire's own entries: what the caller gave encode."""
    return {k: v for k, v in metadata.items() if not reserved_metadata_key(k)}


def same_metadata(
    stream: StreamMetadata | None,
    metadata: Mapping[str, str],
    version: int | None,
    what: str,
    *,
    sample: bool = False,
) -> StreamMetadata:
    """The caller metadata of a group (its frame's ``metadata``), which must be the stream's
    (``None``: the stream has none yet, this group's becomes it). A step joins its groups into
    one frame, which holds one value per key: groups that disagree on a key would make every
    step holding two of them fail after it was leased, so the group is refused at its put, a
    :class:`StreamError` naming ``what``, the key and both values. The policy version is the
    one key that may differ (a step carries it per row, or takes one version); where the
    frame states it, it must be ``version``, the group's. ``sample``: the metadata of one
    sample of a group whose samples arrive apart (the group's frame, rebuilt at the take,
    states its version whatever the samples did)."""
    meta = caller_metadata(metadata)
    stated = meta.pop(VERSION_KEY, None)
    if stated is not None and version is not None and stated != str(version):
        raise StreamError(
            f"{what}: its frame's metadata says {VERSION_KEY}={stated!r}, but the group's "
            f"version is {version}: a step would label its rows with the wrong weights"
        )
    mine: StreamMetadata = (tuple(sorted(meta.items())), sample or stated is not None)
    if stream is None or mine == stream:
        return mine
    theirs = dict(stream[0])
    if mine[1] != stream[1]:
        key, here, there = (
            VERSION_KEY,
            "set" if mine[1] else "absent",
            ("set" if stream[1] else "absent"),
        )
    else:
        key = next(k for k in sorted({*meta, *theirs}) if meta.get(k) != theirs.get(k))
        here, there = repr(meta.get(key, "absent")), repr(theirs.get(key, "absent"))
    raise StreamError(
        f"{what}: its frame's metadata key {key!r} is {here}, but {there} in the stream's "
        "groups: a step joins its groups into one frame, which holds one value per metadata "
        "key, so every group of a stream carries the same metadata (its policy_version "
        "apart); put a per-group fact in a field of the schema instead"
    )


def admits(
    open_groups: int,
    stored_bytes: int,
    incoming_bytes: int,
    config: StreamConfig,
) -> str | None:
    """Why a producer may not reserve (``incoming_bytes == 0``) or store a group now, or None
    when it may. ``open_groups``: groups reserved, in flight or stored and not yet acked."""
    if incoming_bytes == 0 and open_groups >= config.window:
        return (
            f"{open_groups} groups are open, the most the staleness bound allows "
            f"((k + 1) * batch_groups = {config.window}): the trainer is "
            f"{config.max_staleness} versions behind"
        )
    if (
        config.max_bytes is not None
        and incoming_bytes
        and (stored_bytes + incoming_bytes > config.max_bytes and stored_bytes > 0)
    ):
        return (
            f"the buffer holds {stored_bytes} bytes; {incoming_bytes} more would pass its "
            f"budget of {config.max_bytes}"
        )
    return None


def balance(groups: Sequence[Group], ranks: int) -> list[list[str]]:
    """Whole groups shared among ``ranks`` data-parallel ranks with near-equal token counts
    (longest first onto the least loaded rank, as ``SeqlenBalancedSampler`` balances rows), the
    same number of groups on every rank when the count divides; each rank's groups oldest
    first."""
    if ranks < 1:
        raise StreamError(f"ranks must be >= 1, got {ranks}")
    per_rank = -(-len(groups) // ranks)
    loads = [0] * ranks
    out: list[list[Group]] = [[] for _ in range(ranks)]
    for g in sorted(groups, key=lambda g: -g.tokens):
        open_ranks = [r for r in range(ranks) if len(out[r]) < per_rank]
        r = min(open_ranks, key=lambda r: (loads[r], r))
        out[r].append(g)
        loads[r] += g.tokens
    return [[g.gid for g in sorted(part, key=lambda g: (g.version, g.seq))] for part in out]


def wait_until(
    check: Callable[[], str | None],
    timeout_s: float,
    what: str,
    poll_s: float = 0.002,
) -> None:
    """Calls ``check()`` until it returns None; :class:`AdmissionTimeout` after ``timeout_s``
    with the last reason it gave."""
    deadline = time.monotonic() + timeout_s
    delay = poll_s
    while True:
        reason = check()
        if reason is None:
            return
        if time.monotonic() >= deadline:
            raise AdmissionTimeout(f"{what}: waited {timeout_s:g} s and still {reason}")
        time.sleep(delay)
        delay = min(delay * 2, 0.05)
