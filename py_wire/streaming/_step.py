"""The streaming contract every backend implements (:class:`Stream`), what it hands a trainer
(:class:`Step`: per rank, a step of whole groups joined into one frame, each row with its
group's policy version where the schema declares the field), and the limits every backend
holds (samples per group)."""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from py_wire import Frame, concat
from py_wire.adapters import checked_schema
from py_wire.streaming import _checks
from py_wire.streaming._errors import StreamError

#: The metadata key a producer's frames carry their policy version in; concatenated per row
#: into the schema field of the same name.
VERSION_KEY = "policy_version"
#: The most samples one group may arrive as (a GRPO group is 4-64).
MAX_SAMPLES = 4096


def carries_versions(frame: Frame) -> bool:
    """Whether a step of ``frame``'s schema carries each row's policy version (the schema
    declares a ``policy_version`` field): only then may one step join groups of several
    versions. The buffers ask it once, of a stream's first frame, to choose one-version steps."""
    return VERSION_KEY in checked_schema(frame).fields


def stated_version(frame: Frame) -> int:
    """The policy version ``frame``'s metadata states (a :class:`StreamError` naming the key
    when it states none): what a group put without a reservation is recorded at."""
    meta = frame.metadata.get(VERSION_KEY)
    if meta is None or not (meta.isascii() and meta.isdigit()):
        raise StreamError(
            f"frame: its metadata {VERSION_KEY}={meta!r} is no version >= 0: a group put "
            "without a reservation is recorded at the version it states"
        )
    return int(meta)


def step_frame(groups: list[Frame]) -> Frame:
    """A step's groups as one frame. Where the schema declares a ``policy_version`` field,
    each row carries its group's version there; a schema without one (NeMo-RL's and verl's
    field sets) takes the groups only when they agree on the version (``concat`` refuses
    them otherwise, naming the key and both values): never a version silently dropped."""
    groups = _checks.listed("groups", groups, _checks.frame, minimum=1)
    per_row = {VERSION_KEY: VERSION_KEY} if carries_versions(groups[0]) else None
    return concat(groups, per_row=per_row)


@dataclasses.dataclass
class Step:
    """One trainer step's groups: per data-parallel rank, one frame of its whole groups (their
    rows' policy versions in the ``policy_version`` field, or one version for the step where
    the schema has no such field), their group ids and versions, and the lease to ack."""

    lease: str
    frames: list[Frame | None]
    group_ids: list[list[str]]
    versions: list[list[int]]
    #: Seconds the take waited for the step's groups (the rest of it moved bytes).
    waited_s: float = 0.0
    #: The backend's own handle on the step, where it needs one (TransferQueue: each rank's
    #: ``BatchMeta``); None for Ray.
    handle: Any = None


class Stream(Protocol):
    """The streaming contract: a producer loop and a trainer loop written against it run on
    every backend (:class:`~py_wire.streaming.RayBuffer`,
    :class:`~py_wire.streaming.tq.TQBuffer`) by changing the line that builds it. The same
    arguments, return types and errors on each: a wrong type is a ``TypeError`` naming the
    argument, a refused value a :class:`~py_wire.streaming.StreamError`, a wait past its
    timeout an :class:`~py_wire.streaming.AdmissionTimeout`, a frame of another schema a
    :class:`~py_wire.SchemaError`."""

    def reserve(
        self,
        version: int | None = None,
        timeout_s: float | None = None,
        *,
        samples: int | None = None,
    ) -> tuple[str, int]:
        """A slot: the group's id and the policy version it generates at."""
        ...

    def put(
        self, gid: str, frame: Frame, timeout_s: float | None = None, *, sample: int | None = None
    ) -> None:
        """Stores reserved group ``gid``'s frame (or its sample ``sample``)."""
        ...

    def reserve_and_put(self, frame: Frame, timeout_s: float | None = None) -> tuple[str, int]:
        """A slot and the put of a group generated already, at the version its frame's
        ``policy_version`` metadata states: the group's id and version."""
        ...

    def take(self, ranks: int = 1, timeout_s: float = 600.0, lease_s: float | None = None) -> Step:
        """The next step's groups, leased, balanced across ``ranks``."""
        ...

    def ack(self, step: Step | str) -> bool:
        """The step is trained: its groups leave. False when its lease had lapsed."""
        ...

    def release(self, step: Step | str) -> None:
        """The step will not be trained: its groups are free for the next take at once."""
        ...

    def set_trainer_version(self, version: int) -> None:
        """The trainer's weights are now ``version``."""
        ...

    def stats(self) -> dict[str, Any]:
        """The stream's counts on every backend: ``delivered``, ``acked``, ``dropped_stale``,
        ``lease_returns``, ``open_groups``, ``stored_bytes`` and ``trainer_version``; each
        backend adds its own (Ray: ``reserved``, ``stored``, ``abandoned``, ``staleness``)."""
        ...

    def close(self) -> None:
        """The stream is over: what it stores is let go."""
        ...
