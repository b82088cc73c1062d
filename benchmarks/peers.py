"""The comparison points: memcpy and the serialisers RL frameworks use today.

Every peer starts from the producer's batch (lists of per-row tensors) unless its name says
"from packed"; its decode ends in the form named after the arrow (rows: per-row tensors;
nested: jagged ``torch.nested`` per-token fields and per-row views of packed fields).
"""

from __future__ import annotations

import io
import pickle
import warnings
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import safetensors.torch
import torch
from harness import Codec, Peer, Rows, unbind
from profiles import Batch, Field, Profile, flat_values, jagged, offsets_of, row_lengths

# Arrow buffers and bytes are read-only; the views on them are documented read-only too.
warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
warnings.filterwarnings("ignore", message="The given buffer is not writable")


def _byte_view(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8) if t.dim() == 1 else t.reshape(-1).view(torch.uint8)


def _rows_from(profile: Profile, values: list[torch.Tensor]) -> Rows:
    """Re-nest a flat list of tensors (in Profile.tensors() order) into the batch's structure."""
    it = iter(values)
    out: Rows = {}
    for name, value in profile.batch.items():
        if isinstance(value, torch.Tensor):
            out[name] = next(it)
        else:
            out[name] = [None if t is None else next(it) for t in value]
    return out


# -- memcpy: the physical limit -------------------------------------------------------------


def _copy_out(
    wire: torch.Tensor, sizes: list[int], targets: list[torch.Tensor]
) -> list[torch.Tensor]:
    torch._foreach_copy_([_byte_view(t) for t in targets], list(wire.split(sizes)))
    return targets


def _memcpy(fresh: bool) -> Callable[[Profile], Codec]:
    def make(profile: Profile) -> Codec:
        sources = profile.tensors()
        sizes = [t.nbytes for t in sources]
        buffer = torch.empty(sum(sizes), dtype=torch.uint8)
        targets = [torch.empty_like(t) for t in sources]

        def encode() -> torch.Tensor:
            out = torch.empty_like(buffer) if fresh else buffer
            return torch.cat([_byte_view(t) for t in profile.tensors()], out=out)

        def decode(wire: torch.Tensor) -> list[torch.Tensor]:
            outs = [torch.empty_like(t) for t in sources] if fresh else targets
            return _copy_out(wire, sizes, outs)

        return Codec(encode, decode, lambda values: _rows_from(profile, values))

    return make


def _memcpy_block(profile: Profile) -> Codec:
    """One contiguous block copied into a preallocated buffer: bandwidth, no per-tensor cost."""
    sources = profile.tensors()
    sizes = [t.nbytes for t in sources]
    block = torch.cat([_byte_view(t) for t in sources])
    buffer = torch.empty_like(block)
    targets = [torch.empty_like(t) for t in sources]
    return Codec(
        lambda: buffer.copy_(block),
        lambda wire: _copy_out(wire, sizes, targets),
        lambda values: _rows_from(profile, values),
    )


# -- pickle ---------------------------------------------------------------------------------


def _pickle_inband(profile: Profile) -> Codec:
    return Codec(
        lambda: pickle.dumps(profile.batch, protocol=5),
        pickle.loads,
        lambda rows: rows,
    )


class _OutOfBandPickler(pickle.Pickler):
    """torch tensors do not emit PickleBuffers; route them through numpy, which does."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is torch.Tensor:
            return torch.from_numpy, (obj.numpy(),)
        return NotImplemented


def _dumps_oob(batch: Batch) -> tuple[bytes, list[pickle.PickleBuffer]]:
    buffers: list[pickle.PickleBuffer] = []
    stream = io.BytesIO()
    _OutOfBandPickler(stream, protocol=5, buffer_callback=buffers.append).dump(batch)
    return stream.getvalue(), buffers


def _pickle_oob(profile: Profile) -> Codec:
    return Codec(
        lambda: _dumps_oob(profile.batch),
        lambda wire: pickle.loads(wire[0], buffers=wire[1]),
        lambda rows: rows,
    )


def _pickle_oob_packed(profile: Profile) -> Codec:
    """Out-of-band buffers packed into one contiguous blob, as a transport would send them."""

    def encode() -> tuple[bytes, list[int], bytes]:
        header, buffers = _dumps_oob(profile.batch)
        return header, [b.raw().nbytes for b in buffers], b"".join(buffers)

    def decode(wire: tuple[bytes, list[int], bytes]) -> Any:
        header, sizes, blob = wire
        view, start, buffers = memoryview(blob), 0, []
        for size in sizes:
            buffers.append(view[start : start + size])
            start += size
        return pickle.loads(header, buffers=buffers)

    return Codec(encode, decode, lambda rows: rows)


# -- torch.save -----------------------------------------------------------------------------


def _torch_save(profile: Profile) -> Codec:
    def encode() -> bytes:
        stream = io.BytesIO()
        torch.save(profile.batch, stream)
        return stream.getvalue()

    return Codec(
        encode,
        lambda wire: torch.load(io.BytesIO(wire), weights_only=True),
        lambda rows: rows,
    )


# -- NeMo-RL: cat into jagged nested tensors, pickle, unbind --------------------------------

PRESENT = "{}__present"  # companion flag column for fields whose rows may be None


def _nested_dict(profile: Profile, batch: Batch) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for name, value in batch.items():
        if isinstance(value, torch.Tensor):
            out[name] = value
            continue
        out[name] = jagged(value, profile.fields[name])
        if profile.fields[name].tier == "packed":
            out[PRESENT.format(name)] = torch.tensor([t is not None for t in value])
    return out


def _unbind_dict(profile: Profile, data: Any) -> Rows:
    rows: Rows = {}
    for name in profile.batch:
        value = data[name]
        if profile.fields[name].tier == "scalar":
            rows[name] = value
        else:
            packed = profile.fields[name].tier == "packed"
            rows[name] = unbind(value, data[PRESENT.format(name)] if packed else None)
    return rows


def _nemo(profile: Profile) -> Codec:
    return Codec(
        lambda: pickle.dumps(_nested_dict(profile, profile.batch), protocol=5),
        lambda wire: _unbind_dict(profile, pickle.loads(wire)),
        lambda rows: rows,
    )


# -- tensordict consolidate -----------------------------------------------------------------


def _tensordict(profile: Profile) -> Codec:
    from tensordict import TensorDict

    data = _nested_dict(profile, profile.batch)

    def encode() -> bytes:
        td = TensorDict(data, batch_size=[profile.num_rows])
        return pickle.dumps(td.consolidate(metadata=True), protocol=5)

    return Codec(encode, lambda wire: _unbind_dict(profile, pickle.loads(wire)), lambda rows: rows)


# -- safetensors: flat values + lengths per ragged field ------------------------------------

LENGTHS = "{}.lengths"  # -1 marks a None row


def _lengths_with_none(rows: list[torch.Tensor | None]) -> torch.Tensor:
    return torch.tensor([-1 if t is None else t.shape[0] for t in rows], dtype=torch.int64)


def _split(values: torch.Tensor, lengths: torch.Tensor) -> list[torch.Tensor | None]:
    sizes = lengths.tolist()
    parts = values.split([max(n, 0) for n in sizes])
    return [None if n < 0 else p for p, n in zip(parts, sizes, strict=True)]


def _safetensors(profile: Profile) -> Codec:
    def encode() -> bytes:
        tensors: dict[str, torch.Tensor] = {}
        for name, value in profile.batch.items():
            if isinstance(value, torch.Tensor):
                tensors[name] = value
            else:
                tensors[name] = flat_values(value, profile.fields[name])
                tensors[LENGTHS.format(name)] = _lengths_with_none(value)
        return safetensors.torch.save(tensors)

    def decode(wire: bytes) -> Rows:
        tensors = safetensors.torch.load(wire)
        return {
            name: tensors[name]
            if profile.fields[name].tier == "scalar"
            else _split(tensors[name], tensors[LENGTHS.format(name)])
            for name in profile.batch
        }

    return Codec(encode, decode, lambda rows: rows)


# -- pyarrow IPC: list<primitive> columns, list<fixed_size_list> for packed ones ------------


def _arrow_values(values: torch.Tensor, spec: Field) -> pa.Array:
    if spec.dtype == torch.bool:  # Arrow's bool is bit-packed: no zero-copy; ship bytes
        values = values.view(torch.uint8)
    flat = pa.array(values.reshape(-1).numpy())
    for width in reversed(spec.trailing):
        flat = pa.FixedSizeListArray.from_arrays(flat, width)
    return flat


def _arrow_column(rows: list[torch.Tensor | None], spec: Field) -> pa.Array:
    offsets = pa.array(offsets_of(row_lengths(rows)).numpy())
    mask = pa.array([t is None for t in rows]) if spec.tier == "packed" else None
    return pa.LargeListArray.from_arrays(
        offsets, _arrow_values(flat_values(rows, spec), spec), mask=mask
    )


def _torch_values(column: pa.LargeListArray, spec: Field) -> torch.Tensor:
    flat = column.values
    for _ in spec.trailing:
        flat = flat.values
    values = torch.from_numpy(flat.to_numpy(zero_copy_only=True))
    if spec.dtype == torch.bool:
        values = values.view(torch.bool)
    return values.view(-1, *spec.trailing)


def _from_arrow(column: pa.Array, spec: Field) -> Any:
    if spec.tier == "scalar":
        return torch.from_numpy(column.to_numpy(zero_copy_only=True))
    values = _torch_values(column, spec)
    offsets = torch.from_numpy(column.offsets.to_numpy(zero_copy_only=True))
    if spec.tier == "per_token":
        return torch.nested.nested_tensor_from_jagged(values, offsets)
    present = torch.from_numpy(column.is_valid().to_numpy(zero_copy_only=False))
    return unbind(torch.nested.nested_tensor_from_jagged(values, offsets), present)


def _pyarrow(profile: Profile) -> Codec:
    def encode() -> pa.Buffer:
        columns = [
            pa.array(v.numpy())
            if isinstance(v, torch.Tensor)
            else _arrow_column(v, profile.fields[k])
            for k, v in profile.batch.items()
        ]
        record = pa.RecordBatch.from_arrays(columns, names=list(profile.batch))
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, record.schema) as writer:
            writer.write_batch(record)
        return sink.getvalue()

    def decode(wire: pa.Buffer) -> dict[str, Any]:
        record = pa.ipc.open_stream(wire).read_next_batch()
        return {k: _from_arrow(record.column(k), profile.fields[k]) for k in profile.batch}

    def rows(decoded: dict[str, Any]) -> Rows:
        return {
            k: unbind(v) if profile.fields[k].tier == "per_token" else v for k, v in decoded.items()
        }

    return Codec(encode, decode, rows)


PEERS = [
    Peer("memcpy → prealloc", _memcpy(fresh=False)),
    Peer("memcpy → fresh", _memcpy(fresh=True)),
    Peer("memcpy 1 block → prealloc", _memcpy_block, timed=("encode",)),
    Peer("pickle p5 in-band → rows", _pickle_inband),
    Peer("pickle p5 out-of-band → rows", _pickle_oob),
    Peer("pickle p5 oob, 1 blob → rows", _pickle_oob_packed),
    Peer("torch.save/load → rows", _torch_save),
    Peer("NeMo-RL nested+pickle → rows", _nemo),
    Peer("tensordict consolidate (from nested) → rows", _tensordict),
    Peer("safetensors flat+lengths → rows", _safetensors),
    Peer("pyarrow IPC → nested", _pyarrow),
]
