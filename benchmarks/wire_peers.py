"""py_wire's entries, coded against its public API and skipped cleanly while it is not built."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from harness import Codec, Peer, Rows, Skip, unbind
from profiles import Batch, Profile, packed_batch

try:
    import py_wire
except ImportError as error:  # the package is being written alongside this benchmark
    py_wire = None
    NOT_BUILT: str | None = f"not built ({error})"
else:
    NOT_BUILT = None


def _schema(profile: Profile) -> Any:
    if py_wire is None:
        raise Skip(NOT_BUILT)
    return py_wire.load_schema(profile.schema)


def _segments(row: Any) -> torch.Tensor | None:
    """A packed row (None, a tensor or a list of segments) as one tensor along the pack dim."""
    if row is None or isinstance(row, torch.Tensor):
        return row
    if len(row) == 0:  # no segments is "no media", the same as None
        return None
    return row[0] if len(row) == 1 else torch.cat(list(row))


def _token_rows(value: Any, lengths: list[int]) -> list[torch.Tensor | None]:
    if isinstance(value, tuple):  # (padded, lengths)
        value = value[0]
    if isinstance(value, torch.Tensor) and value.is_nested:
        return unbind(value)
    if isinstance(value, torch.Tensor):  # padded [B, S_max, ...]
        return [value[i, :n] for i, n in enumerate(lengths)]
    return list(value)


def wire_rows(profile: Profile, decoded: Any) -> Rows:
    """Per-row tensors of any py_wire decode layout, for the bit-exact check."""
    lengths = profile.batch["input_lengths"].tolist()
    rows: Rows = {}
    for name, spec in profile.fields.items():
        value = decoded[name]
        if spec.tier == "scalar":
            rows[name] = value
        elif spec.tier == "per_token":
            rows[name] = _token_rows(value, lengths)
        else:
            rows[name] = [_segments(value[i]) for i in range(profile.num_rows)]
    return rows


def _from_packed(profile: Profile) -> Batch:
    batch = packed_batch(profile)
    for name, spec in profile.fields.items():
        if spec.tier == "packed":
            batch[name] = py_wire.PackedTensor(batch[name], dim_to_pack=0)
    return batch


def _lists(profile: Profile) -> Codec:
    schema = _schema(profile)
    return Codec(
        lambda: py_wire.encode(profile.batch, schema),
        py_wire.decode,
        lambda decoded: wire_rows(profile, decoded),
    )


def _two_threads(profile: Profile) -> Codec:
    schema = _schema(profile)
    return Codec(
        lambda: py_wire.encode(profile.batch, schema, threads=2),
        py_wire.decode,
        lambda decoded: wire_rows(profile, decoded),
    )


def _packed(profile: Profile) -> Codec:
    schema = _schema(profile)
    batch = _from_packed(profile)
    return Codec(
        lambda: py_wire.encode(batch, schema),
        py_wire.decode,
        lambda decoded: wire_rows(profile, decoded),
    )


def _into_buffer(profile: Profile) -> Codec:
    schema = _schema(profile)
    size = len(py_wire.encode(profile.batch, schema))
    buffer = torch.empty(size, dtype=torch.uint8).numpy()  # writable, 64-byte aligned

    def encode() -> Any:
        return py_wire.encode(profile.batch, schema, out=buffer)

    try:
        encode()
    except TypeError as error:
        raise Skip(f"n/a: encode(out=) not supported ({error})") from error

    def decode(written: Any) -> Any:
        if written is None:
            return py_wire.decode(buffer)
        if isinstance(written, int):
            return py_wire.decode(buffer[:written])
        return py_wire.decode(written)

    return Codec(encode, decode, lambda decoded: wire_rows(profile, decoded))


def _as_bytes(part: Any) -> memoryview:
    if isinstance(part, torch.Tensor):
        part = part.contiguous().reshape(-1).view(torch.uint8).numpy()
    return memoryview(part).cast("B")


def _parts(profile: Profile) -> Codec:
    schema = _schema(profile)
    if not hasattr(py_wire, "encode_parts"):
        raise Skip("n/a: py_wire.encode_parts does not exist")
    frame = bytes(py_wire.encode(profile.batch, schema))

    def decode(parts: list[Any]) -> Any:
        joined = b"".join(_as_bytes(p) for p in parts)
        if joined != frame:
            raise AssertionError("encode_parts joined is not byte-identical to encode()")
        return py_wire.decode(joined)

    return Codec(
        lambda: py_wire.encode_parts(profile.batch, schema),
        decode,
        lambda decoded: wire_rows(profile, decoded),
    )


def _decode_as(
    layout: str | None, wire_bytes: bool = False, writable: str | None = None
) -> Callable[[Profile], Codec]:
    def make(profile: Profile) -> Codec:
        schema = _schema(profile)
        kwargs = {} if layout is None else {"layout": layout}
        if writable is not None:
            kwargs["writable"] = writable

        def encode() -> Any:
            frame = py_wire.encode(profile.batch, schema)
            return bytes(frame) if wire_bytes else frame

        return Codec(
            encode,
            lambda wire: py_wire.decode(wire, **kwargs),
            lambda decoded: wire_rows(profile, decoded),
        )

    return make


DECODE_DEFAULT = Peer("py_wire encode / decode() → nested", _lists)
WIRE_PEERS = [
    DECODE_DEFAULT,
    Peer("py_wire encode, 2 copy threads", _two_threads, timed=("encode",)),
    Peer("py_wire encode (from packed)", _packed, timed=("encode",)),
    Peer("py_wire encode(out=buffer)", _into_buffer, timed=("encode",)),
    Peer("py_wire encode_parts (scatter/gather)", _parts, timed=("encode",)),
    Peer("py_wire decode(layout=padded) → padded", _decode_as("padded"), timed=("decode",)),
    Peer("py_wire decode(layout=list) → rows", _decode_as("list"), timed=("decode",)),
    # bytes are read-only: the default ("auto") decodes a private copy, "view" views them.
    Peer(
        "py_wire decode(bytes(frame)) → nested (auto: a private copy)",
        _decode_as(None, True),
        timed=("decode",),
    ),
    Peer(
        "py_wire decode(bytes(frame), writable=view) → nested",
        _decode_as(None, True, "view"),
        timed=("decode",),
    ),
]
