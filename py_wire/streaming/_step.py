"""What both streaming backends hand a trainer: a step of groups joined into one frame, each
row with its group's policy version where the schema declares the field, and the limits every
backend holds (samples per group)."""

from __future__ import annotations

from py_wire._decode import checked_schema
from py_wire._native import Frame
from py_wire._ops import concat
from py_wire.streaming import _checks

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


def step_frame(groups: list[Frame]) -> Frame:
    """A step's groups as one frame. Where the schema declares a ``policy_version`` field,
    each row carries its group's version there; a schema without one (NeMo-RL's and verl's
    field sets) takes the groups only when they agree on the version (``concat`` refuses
    them otherwise, naming the key and both values): never a version silently dropped."""
    groups = _checks.listed("groups", groups, _checks.frame, minimum=1)
    per_row = {VERSION_KEY: VERSION_KEY} if carries_versions(groups[0]) else None
    return concat(groups, per_row=per_row)
