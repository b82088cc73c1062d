"""Streaming rollouts for fully-async RL: rollout workers put each GRPO group as it finishes,
tagged with the policy version that generated it; the trainer takes whole groups, oldest
first, at most ``max_staleness`` versions old, every group exactly once. Producers are held
back (admission control) rather than data dropped; what is dropped under ``policy="drop"`` is
counted. Two backends with the same rules (:mod:`py_wire.streaming._policy`): TransferQueue
(:mod:`py_wire.streaming.tq`: a TQ sampler, tags, TQ's consumption table) and Ray alone
(:mod:`py_wire.streaming.ray_buffer`: an actor, frames in Ray's object store). See
``docs/streaming.md``."""

from py_wire.streaming._errors import AdmissionTimeout, StreamError
from py_wire.streaming._policy import (
    Counts,
    StreamConfig,
)
from py_wire.streaming._step import VERSION_KEY, Step, Stream
from py_wire.streaming.ray_buffer import PendingPut, RayBuffer

__all__ = [
    "VERSION_KEY",
    "AdmissionTimeout",
    "Counts",
    "PendingPut",
    "RayBuffer",
    "Step",
    "Stream",
    "StreamConfig",
    "StreamError",
]
