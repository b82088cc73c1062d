"""What a framework adapter is built from.

A framework adapter (``py_wire.interop.nemo_rl``, ``py_wire.interop.verl``,
``py_wire.interop.transfer_queue``, or one of your own for another framework) converts that
framework's batch objects to and from py_wire frames. It is built from two public modules only:
``py_wire`` itself (``Frame``, ``Schema``, ``encode``, ``decode``, the frame operations, the
errors) and this module, which holds what the adapters (and ``py_wire.streaming``'s backends)
share beyond that: argument checks, field checks, selected decode, error context, per-row
values, the schema keys only adapters read, frame metadata keys and content digests, what a
field's tier makes its rows (``tier_items``), and direct access to a compiled codec. No adapter
or streaming backend imports an underscore module of the core.

**The common face.** A framework adapter offers ``to_frame(obj, schema, stage=None, ...) ->
Frame`` (the framework's batch, checked against the schema, as one frame) and
``from_frame(frame, stage=None, *, ..., writable="auto")`` (the frame, or anything
:func:`as_frame` takes, decoded back into the framework's batch), plus
its extras (NeMo-RL: ``from_nemo``, ``put``/``get`` over TransferQueue, ``iter_micro_batches``;
verl: ``dataproto_class``). The TransferQueue adapter is a data plane rather than a framework:
its verbs are ``put``, ``get`` and ``write_back``.

**Stability.** Public and documented: the names in ``__all__`` (docs/api.md's module contracts
lists them and a test holds this module to it) are what an adapter, ours or a user's, may rely
on; they change only with a changelog entry. Everything else in py_wire's underscore modules
may change without notice.
"""

from py_wire._args import (
    MAX_COUNT,
    batch_mapping,
    count,
    fill_value,
    flag,
    integer,
    items,
    names,
    optional_count,
    padded_cells_backed,
)
from py_wire._decode import (
    MAX_PAD_MULTIPLE,
    FrameViews,
    Writable,
    add_missing_fields,
    checked_schema,
    decode_selected,
)
from py_wire._dtypes import DTYPES
from py_wire._encode import checked_fields, mask_windows, plain_tensors
from py_wire._errors import prefixed, with_context
from py_wire._micro import Groups
from py_wire._native import (
    Codec,
    content_digest,
    holds_schema,
    reserved_metadata_key,
)
from py_wire._native import encode as encode_with_codec
from py_wire._native import encoded_nbytes as codec_nbytes
from py_wire._packed import ID_LEN
from py_wire._padding import broadcast_first_token, row_lengths
from py_wire._rowvalues import encode_rows, json_text, shared_rows
from py_wire._schema import column_fields, frame_fingerprint, gathering_field, hold_schema
from py_wire._source import as_frame
from py_wire._tiers import RowWindows
from py_wire._tiers import items as tier_items
from py_wire._typing import as_jagged

__all__ = [
    # argument checks: each raises a TypeError/ValueError naming the argument and its value
    "MAX_COUNT",
    "batch_mapping",
    "count",
    "fill_value",
    "flag",
    "integer",
    "items",
    "names",
    "optional_count",
    "padded_cells_backed",
    # field checks: a batch's fields checked against a schema, as the codec takes them
    "checked_fields",
    "checked_schema",
    "plain_tensors",
    "as_jagged",
    # selected decode: some fields of a frame, missing ones added
    "FrameViews",
    "MAX_PAD_MULTIPLE",
    "Writable",
    "add_missing_fields",
    "as_frame",
    "decode_selected",
    "broadcast_first_token",
    "row_lengths",
    # error context: py_wire's structured attributes on an error
    "prefixed",
    "with_context",
    # row values: per-row text/JSON values and provenance ids
    "ID_LEN",
    "encode_rows",
    "json_text",
    "shared_rows",
    "Groups",
    # schema keys only adapters read
    "DTYPES",
    "column_fields",
    "frame_fingerprint",
    "gathering_field",
    "hold_schema",
    "holds_schema",
    # frame metadata and identity: py_wire's reserved metadata keys, a frame's content digest
    "content_digest",
    "reserved_metadata_key",
    # tiers: what a field's rows are, asked instead of the tier's name
    "tier_items",
    # padded tensors cut by a mask: each row's window of marked cells (views, no cut), the
    # value the cells outside hold
    "RowWindows",
    "mask_windows",
    # codec access: encode with a codec compiled once
    "Codec",
    "codec_nbytes",
    "encode_with_codec",
]
