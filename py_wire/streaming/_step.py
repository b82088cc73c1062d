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


def step_frame(groups: list[Frame]) -> Frame:
    """A step's groups as one frame. Where the schema declares a ``policy_version`` field,
    each row carries its group's version there; a schema without one (NeMo-RL's and verl's
    field sets) takes the groups only when they agree on the version (``concat`` refuses
    them otherwise, naming the key and both values): never a version silently dropped."""
    groups = _checks.listed("groups", groups, _checks.frame, minimum=1)
    declares = VERSION_KEY in checked_schema(groups[0]).fields
    return concat(groups, per_row={VERSION_KEY: VERSION_KEY} if declares else None)
