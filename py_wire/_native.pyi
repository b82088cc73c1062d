"""Type stubs for py_wire's Rust codec (private; use the ``py_wire`` facade).

Checked against the compiled module by ``python -m mypy.stubtest py_wire._native``."""

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from pickle import PickleBuffer
from typing import Any, Literal, SupportsIndex, TypeAlias, final

import numpy as np
import numpy.typing as npt
import torch
from typing_extensions import Buffer

from py_wire._schema import Schema

__all__ = [
    "BatchError",
    "BorrowedBytes",
    "ContractError",
    "FieldLayout",
    "Frame",
    "FrameError",
    "FrameLayout",
    "Codec",
    "InternalError",
    "ERROR_CONTEXT",
    "LOSSLESS_WIDENINGS",
    "MAX_HEADER_BYTES",
    "MAX_NESTING",
    "MAX_SCHEMA_BYTES",
    "METADATA_KEYS",
    "ReceiveBuffer",
    "RowIndexError",
    "SchemaError",
    "TensorLoc",
    "WireError",
    "__version__",
    "canonical_json",
    "check_contracts",
    "check_schema_source",
    "check_schema_text",
    "encode",
    "encode_parts",
    "encoded_nbytes",
    "frame_nbytes",
    "frame_validation_ranges",
    "gather",
    "hold_schema",
    "interleaved_shard_ranges",
    "micro_batch_rows",
    "pack_into",
    "pack_rows",
    "pad_fields",
    "pad_micro_batches",
    "pad_rows",
    "fill_padding_with_first_token",
    "placeholder_runs",
    "register_torch",
    "reserved_metadata_key",
    "streaming_threshold",
    "split_rows",
    "content_digest",
    "mask_windows",
    "held_schema",
    "holds_schema",
    "pin_schema",
    "unpin_schema",
    "learnt_schemas",
    "set_learnt_schema_budget",
    "charge_schema_view",
    "released_schema_views",
    "resolve_contract",
    "resolve_field",
    "resolve_schema",
    "schema_data",
    "schema_stages",
    "MAX_DECLARED_ITEMS",
    "SCHEMA_DEFAULTS",
    "validate_field_spec",
]

class WireError(ValueError):
    """Base of every py_wire error; structured context as attributes (None where unknown)."""

    kind: str
    field: str | None
    row: int | None
    segment: int | None
    item: int | None
    expected: object
    found: object

class SchemaError(WireError): ...
class BatchError(WireError): ...
class ContractError(BatchError): ...
class FrameError(WireError): ...
class InternalError(WireError): ...
class RowIndexError(WireError): ...

__version__: str
#: The largest JSON header a frame may declare, in bytes.
ERROR_CONTEXT: tuple[str, ...]
LOSSLESS_WIDENINGS: dict[str, list[str]]
MAX_HEADER_BYTES: int
#: The largest schema text (a frame's embedded schema, a schema file), in bytes.
MAX_SCHEMA_BYTES: int
#: The deepest nesting of arrays and objects (tables) a schema may have.
MAX_NESTING: int
MAX_DECLARED_ITEMS: int
#: Per kind ("schema", "field", "contract"), the keys the schema model fills in and their
#: defaults, as JSON text.
SCHEMA_DEFAULTS: dict[str, dict[str, str]]
METADATA_KEYS: dict[str, str]

@final
class Codec:
    """A schema compiled for the codec once: field specs, contracts, sequence and lengths
    fields, and the metadata every frame of the schema carries."""

    def __new__(
        cls,
        specs: Sequence[str],
        contracts: Sequence[str],
        sequence_field: str | None,
        lengths_field: str | None,
        metadata: Mapping[str, str],
    ) -> Codec: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def field_names(self) -> list[str]: ...

# Anything exporting a C-contiguous byte buffer. numpy's stubs declare ``ndarray.__buffer__``
# only for Python 3.12+, so arrays are named explicitly for 3.11.
_BufferLike: TypeAlias = Buffer | npt.NDArray[Any]

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class TensorLoc:
    """Where one tensor lies in a frame (absolute, 64-byte aligned byte offset)."""

    @property
    def offset(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def shape(self) -> list[int]: ...

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class FieldLayout:
    """One field of a frame: its spec and where its tensors lie."""

    @property
    def name(self) -> str: ...
    @property
    def tier(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def stored_dtype(self) -> str: ...
    @property
    def shape(self) -> list[int | None]: ...
    @property
    def pack_dim(self) -> int: ...
    @property
    def values(self) -> TensorLoc: ...
    @property
    def seg_shapes(self) -> TensorLoc | None: ...
    @property
    def seg_offsets(self) -> TensorLoc | None: ...
    @property
    def row_offsets(self) -> TensorLoc | None: ...
    @property
    def row_segments(self) -> TensorLoc | None: ...
    @property
    def seg_ids(self) -> TensorLoc | None: ...
    @property
    def num_segments(self) -> int: ...
    @property
    def num_refs(self) -> int: ...
    @property
    def in_order(self) -> bool: ...

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class FrameLayout:
    """A frame's validated layout."""

    @property
    def num_rows(self) -> int: ...
    @property
    def sequence_field(self) -> str | None: ...
    @property
    def seq_offsets(self) -> TensorLoc | None: ...
    @property
    def total_tokens(self) -> int: ...
    @property
    def fields(self) -> list[FieldLayout]: ...

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class Frame:
    """An encoded batch: a valid safetensors file in one 64-byte-aligned buffer."""

    @staticmethod
    def from_buffer(data: _BufferLike, schema: Schema | str | Path | None = None) -> Frame:
        """Wrap and validate ``data``; ``schema`` is held first (a compact frame naming it
        can then be read); what a reader's schema means is ``py_wire._decode``'s."""
    @staticmethod
    def _wrap(data: _BufferLike) -> Frame: ...
    @property
    def _schema_view(self) -> Schema | None: ...
    @_schema_view.setter
    def _schema_view(self, value: Schema | None) -> None: ...
    def copy(self) -> Frame:
        """A private, writable copy in a pooled, 64-byte-aligned buffer (validated)."""
    def copy_on_write(self) -> Frame | None:
        """A private copy-on-write mapping of a pinned read-only source's file pages (no copy)
        that holds the source while it lives (Ray's object store only), or None."""
    def copy_on_write_refusal(self) -> str | None:
        """Why copy_on_write() gives None, or None when it gives a frame."""
    @property
    def storage(
        self,
    ) -> Literal["owned", "buffer", "readonly-buffer", "pinned-buffer", "copy-on-write"]: ...
    @property
    def pinned_by(self) -> str | None:
        """Who keeps this frame's bytes unchanged while it is held ("Ray's object store")."""
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def num_rows(self) -> int: ...
    @property
    def readonly_buffer(self) -> bool: ...
    @property
    def metadata(self) -> dict[str, str]: ...
    @property
    def schema(self) -> Schema: ...
    @schema.setter
    def schema(self, value: Schema) -> None: ...
    @property
    def schema_source(self) -> tuple[str | None, str | None]: ...
    @property
    def _held_text(self) -> str | None: ...
    @property
    def layout(self) -> FrameLayout: ...
    @property
    def compact(self) -> bool: ...
    @property
    def has_checksum(self) -> bool: ...
    def verify(self) -> None:
        """Check every byte against the frame's checksums; ``FrameError`` names the field."""
    # Protocol 5: (Frame.from_buffer, (PickleBuffer(self),)); below it the frame's bytes.
    def __reduce_ex__(
        self, protocol: SupportsIndex
    ) -> tuple[Callable[[_BufferLike], Frame], tuple[bytes | PickleBuffer]]: ...

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class BorrowedBytes:
    """A read-only buffer over a caller's tensor memory (one part of ``encode_parts``)."""

    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...

@final  # a #[pyclass] without `subclass`: not subclassable at runtime
class ReceiveBuffer:
    """A writable, 64-byte-aligned buffer from the frame pool, for a receiver to fill and then
    wrap with ``Frame.from_buffer`` without copying."""

    def __new__(cls, nbytes: int) -> ReceiveBuffer: ...
    def __len__(self) -> int: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    @property
    def address(self) -> int: ...

def register_torch(
    tensor_type: type[torch.Tensor],
    dtypes: Sequence[tuple[torch.dtype, str]],
    strided: torch.layout | None = None,
    mode_enabled: Callable[[], bool] | None = None,
) -> None: ...

# One field as the facade hands it over: (field name, input kind, first, second). What `first`
# and `second` hold depends on the kind ("rows": a list of rows; "jagged": values and offsets;
# "csr": values and a tuple of four index tensors; ...), hence `object`.
_RawField: TypeAlias = tuple[str, str, object, object]

def encode(
    codec: Codec,
    fields: Sequence[_RawField],
    threads: int | None = None,
    parallel_threshold: int | None = None,
    out: _BufferLike | None = None,
    checksum: bool = False,
) -> Frame: ...
def encode_parts(
    codec: Codec, fields: Sequence[_RawField], min_borrow: int = 0, checksum: bool = False
) -> list[bytes | BorrowedBytes]: ...
def encoded_nbytes(codec: Codec, fields: Sequence[_RawField], checksum: bool = False) -> int: ...
def frame_nbytes(prefix: _BufferLike) -> int: ...
def frame_validation_ranges(prefix: _BufferLike) -> tuple[int, list[tuple[int, int]]]: ...
def micro_batch_rows(
    frame: Frame, max_tokens: int, sort: bool, padded: bool, multiple: int
) -> list[list[int]]: ...
def pack_rows(
    frame: Frame, max_tokens: int, multiple: int
) -> tuple[list[list[int]], list[int]]: ...
def interleaved_shard_ranges(
    num_rows: int,
    rank: int,
    world_size: int,
    batch_size: int | None = None,
    allow_uneven: bool = False,
) -> list[tuple[int, int]]: ...
def check_contracts(frame: Frame, codec: Codec) -> None: ...
def placeholder_runs(
    rows: list[torch.Tensor] | list[npt.NDArray[np.int64]], token_id: int
) -> list[list[int]]: ...
def pad_rows(
    values: torch.Tensor | npt.NDArray[np.uint8],
    offsets: torch.Tensor,
    out: torch.Tensor,
    pad: bytes,
) -> None: ...
def pad_fields(
    frame: Frame, fields: list[tuple[str, bytes]], multiple: int | None = None
) -> tuple[ReceiveBuffer, int, int, list[int]]: ...
def pad_micro_batches(
    frame: Frame,
    fields: list[tuple[str, bytes, bool]],
    groups: list[tuple[int, int]],
    multiple: int | None = None,
    narrow: int | None = None,
    mask: bool = False,
) -> tuple[ReceiveBuffer, int, list[int], int, list[int], int | None]: ...
def fill_padding_with_first_token(out: torch.Tensor, lengths: torch.Tensor) -> None: ...
def gather(
    frames: Sequence[Frame],
    rows: range | Sequence[range] | Sequence[int] | npt.NDArray[np.int64] | None = None,
    schema_entries: Mapping[str, str] | None = None,
    per_row: Sequence[tuple[str, str]] | None = None,
) -> Frame: ...
def pack_into(
    tensors: Sequence[torch.Tensor | _BufferLike],
    offsets: Sequence[int],
    out: _BufferLike,
    threads: int | None = None,
) -> None: ...
def hold_schema(text: str, learnt: bool = False) -> tuple[bool, str]: ...
def held_schema(fingerprint: str) -> str | None: ...
def holds_schema(fingerprint: str) -> bool: ...
def pin_schema(fingerprint: str) -> bool: ...
def unpin_schema(fingerprint: str) -> bool: ...
def learnt_schemas() -> tuple[int, int, int]: ...
def set_learnt_schema_budget(max_bytes: int) -> int: ...
def charge_schema_view(fingerprint: str, held: bool, nbytes: int) -> bool: ...
def released_schema_views() -> list[str]: ...
def resolve_schema(text: str) -> tuple[str, str, str]: ...
def resolve_field(text: str) -> str: ...
def resolve_contract(text: str) -> str: ...
def split_rows(frame: Frame, sizes: Sequence[int]) -> list[Frame]: ...
def content_digest(frame: Frame, fields: Sequence[str]) -> str: ...
def mask_windows(
    mask: torch.Tensor, skips: list[int], padded: list[tuple[torch.Tensor, int]]
) -> tuple[list[tuple[list[int], list[int]]], list[tuple[int, int] | None]] | None: ...
def reserved_metadata_key(key: str) -> bool: ...
def streaming_threshold() -> tuple[int, int | None, int | None]: ...
def validate_field_spec(decl_json: str) -> str: ...
def canonical_json(text: str) -> str: ...
def check_schema_text(text: str, fingerprint: str) -> None: ...
def check_schema_source(text: str, syntax: str, source: str) -> None: ...
def schema_data(value: object, dump: Callable[[object], object]) -> str: ...
def schema_stages(text: str) -> str: ...
