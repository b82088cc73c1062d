"""py_wire: a schema-first, zero-copy wire format for ragged multimodal RL batches.

Declare each field once in a schema file; ``encode`` turns a batch into one self-describing
frame (a valid safetensors file), copying each payload byte once; ``decode`` returns views into
it in the form each consumer needs.
"""

from py_wire import (
    _dtypes,  # noqa: F401  (registers torch's dtypes with the codec)
    _native,
    trainer,
)
from py_wire._decode import check_contracts, decode
from py_wire._encode import encode, encode_parts, placeholder_runs
from py_wire._evolution import SchemaConflictWarning, SchemaEvolutionWarning
from py_wire._io import encoded_nbytes, frame_nbytes, load, save
from py_wire._native import (
    BatchError,
    ContractError,
    FieldLayout,
    Frame,
    FrameError,
    FrameLayout,
    InternalError,
    ReceiveBuffer,
    RowIndexError,
    SchemaError,
    TensorLoc,
    WireError,
)
from py_wire._ops import chunk, concat, shard, split, take_rows, truncate
from py_wire._packed import PackedTensor
from py_wire._schema import FieldDef, PlaceholderContract, Schema, bundled_schemas, load_schema

__all__ = [
    "BatchError",
    "ContractError",
    "FieldDef",
    "FieldLayout",
    "Frame",
    "FrameError",
    "FrameLayout",
    "InternalError",
    "PackedTensor",
    "PlaceholderContract",
    "ReceiveBuffer",
    "RowIndexError",
    "Schema",
    "SchemaConflictWarning",
    "SchemaError",
    "SchemaEvolutionWarning",
    "TensorLoc",
    "WireError",
    "bundled_schemas",
    "check_contracts",
    "chunk",
    "concat",
    "decode",
    "encode",
    "encode_parts",
    "encoded_nbytes",
    "frame_nbytes",
    "load",
    "load_schema",
    "placeholder_runs",
    "save",
    "shard",
    "split",
    "take_rows",
    "trainer",
    "truncate",
]
__version__ = _native.__version__
