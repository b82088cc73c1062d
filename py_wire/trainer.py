"""Trainer-side helpers over a frame's rows: plan micro-batches, data-parallel shards and
token-budget bins (row ranges, no bytes moved), iterate micro-batches as views of one decoded
frame, and move a decoded batch to a device in one call.

Frame operations that build new frames (``take_rows``, ``chunk``, ``split``, ``shard``,
``concat``, ``truncate``) stay in :mod:`py_wire`.
"""

from py_wire._micro import MicroBatches, iter_micro_batches
from py_wire._ops import shard_rows
from py_wire._trainer import Bin, micro_batches, pack_sequences, to

__all__ = [
    "Bin",
    "MicroBatches",
    "iter_micro_batches",
    "micro_batches",
    "pack_sequences",
    "shard_rows",
    "to",
]
