"""verl: a ``DataProto`` to a frame and back.

``to_frame(data, "verl/qwen2_5_vl")`` encodes verl's batch as it is, with no edits to it:

- per-token tensors (``input_ids``; ``position_ids`` ``[B, L]`` for text) are cut by
  ``attention_mask``: a row is exactly the tokens the mask marks, wherever they are (verl
  left-pads prompts and right-pads responses; nothing here assumes either side);
- mRoPE ``position_ids`` ``[B, C, L]`` become one ``[C, L_i]`` segment per row (the mask's
  columns), ``C`` as the schema declares (4 on verl main: text row + t/h/w);
- response-aligned ``[B, R]`` tensors (``responses``, ``response_mask``, ``old_log_probs``,
  ``advantages``, ...) become one ``[r_i]`` segment per row, ``r_i`` the response tokens that
  ``attention_mask[:, -R:]`` marks (verl's ``compute_response_mask``);
- ``non_tensor_batch["multi_modal_inputs"]`` (per-row dicts, ``None`` or ``{}`` for text-only
  rows) gives one packed field per dict key (``pixel_values``, ``image_grid_thw``,
  ``images_seqlens``); rows that hold the same tensor objects (a GRPO group after
  ``DataProto.repeat``) share one segment, stored once on the wire;
- ``non_tensor_batch["uid"]`` strings become packed UTF-8 bytes (a group's equal strings are
  stored once).

``attention_mask`` itself is the row structure and ``prompts`` is ``input_ids[:, :P]``: both
are consumed, not stored (``prompts`` is checked to equal that slice). Any other key the schema
lacks raises :class:`~py_wire.BatchError` naming it, as does a non-empty ``meta_info`` unless
``drop_meta_info=True`` (a frame carries no free-form metadata; hand it to ``from_frame``).

``from_frame(frame)`` gives what verl holds: padded ``batch`` tensors (``input_ids``,
``attention_mask`` rebuilt int64, ``prompts`` left-padded, ``responses`` and the other
response-side tensors right-padded, ``position_ids``), ``non_tensor_batch`` numpy object arrays
(``uid`` strings; ``multi_modal_inputs`` dicts, rows sharing media sharing one dict, ``{}`` for
text-only rows), and ``meta_info``; a real ``DataProto`` when ``verl`` is importable.

What round-trips bit-exactly: every cell the mask marks (tokens, positions, log-probs,
advantages, ...), the media tensors and their sharing, the ``uid`` strings, and the row order.
What cannot: values verl wrote into padded cells. They come back as verl's builders write
them: ``input_ids`` / ``prompts`` / ``responses`` padded with ``pad_token_id``;
``attention_mask``, ``response_mask`` and float fields with 0; text ``position_ids`` as
``compute_position_id_with_mask`` does (0 on the left, the last position repeated on the right);
mRoPE ``position_ids`` with 1 (``get_rope_index``'s fill). The padded widths are the batch's
longest prompt and response unless ``prompt_length`` / ``response_length`` (verl's
``rollout.prompt_length`` / ``response_length``) are given. A mask with holes inside a row comes
back compacted (prompt tokens right-aligned, response tokens left-aligned), and a batch whose
padded cells held other values comes back with the values above.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire._args import count, optional_count
from py_wire._decode import Writable, checked_schema, decode
from py_wire._dtypes import DTYPES
from py_wire._encode import encode
from py_wire._errors import with_context
from py_wire._native import BatchError, Frame
from py_wire._packed import PackedTensor
from py_wire._schema import FieldDef, Schema, load_schema
from py_wire._source import as_frame

#: ``batch`` keys consumed by the adapter rather than stored.
DERIVED_KEYS = ("attention_mask", "prompts")
#: ``non_tensor_batch`` key whose per-row dicts become packed media fields.
MM_KEY = "multi_modal_inputs"
UID_KEY = "uid"
#: Response-aligned ``[B, R]`` tensors verl keeps in ``batch``: each becomes one ``[r_i]``
#: segment per row (a packed field of the schema).
RESPONSE_KEYS = frozenset(
    {
        "responses",
        "response_mask",
        "rollout_log_probs",
        "old_log_probs",
        "ref_log_prob",
        "values",
        "token_level_scores",
        "token_level_rewards",
        "advantages",
        "returns",
    }
)


def _err(message: str, **context: Any) -> BatchError:
    return with_context(BatchError(message), **context)


#: The longest prompt_length / response_length from_frame pads to: 16M tokens, far beyond any
#: context window, and small enough that a mistyped width fails here, not in the allocator.
MAX_SEQUENCE = 1 << 24


def dataproto_class() -> type | None:
    """verl's ``DataProto`` class, or None when ``verl`` is not importable."""
    try:
        from verl import DataProto  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        return None
    return DataProto  # type: ignore[no-any-return, unused-ignore]


class _Shared:
    """Packed rows in the CSR form ``encode`` accepts from NeMo-RL-shaped objects: physical
    ``tensors``, ``_row_offsets`` over logical references, ``_segment_indices`` into
    ``tensors``."""

    def __init__(self, tensors: list[Any], offsets: list[int], indices: list[int]) -> None:
        self.tensors = tensors
        self.dim_to_pack = 0
        self._row_offsets = offsets
        self._segment_indices = indices

    def __len__(self) -> int:
        return len(self._row_offsets) - 1


def _shared_rows(rows: list[Any], key: Any) -> _Shared:
    """One segment (or none) per row; rows whose ``key`` is equal share a physical segment."""
    tensors: list[Any] = []
    seen: dict[Any, int] = {}
    offsets, indices = [0], []
    for row in rows:
        if row is not None:
            k = key(row)
            if k not in seen:
                seen[k] = len(tensors)
                tensors.append(row)
            indices.append(seen[k])
        offsets.append(len(indices))
    return _Shared(tensors, offsets, indices)


def _keys(batch: Any) -> list[str]:
    """A ``TensorDict``'s or dict's keys (iterating a ``TensorDict`` walks its batch dim)."""
    return list(batch.keys())


def _parts(data: Any) -> tuple[Mapping[str, Any], Mapping[str, Any], Mapping[str, Any]]:
    if hasattr(data, "batch") and hasattr(data, "non_tensor_batch"):
        batch = {} if data.batch is None else data.batch
        return batch, data.non_tensor_batch or {}, getattr(data, "meta_info", None) or {}
    if not isinstance(data, Mapping):
        raise _err(
            f"expected a DataProto (.batch, .non_tensor_batch, .meta_info) or a mapping, "
            f"not {type(data).__name__}"
        )
    if "batch" in data and "non_tensor_batch" in data:  # from_frame's dict form
        return data["batch"] or {}, data["non_tensor_batch"] or {}, data.get("meta_info") or {}
    tensors = {k: v for k, v in data.items() if isinstance(v, torch.Tensor)}
    return tensors, {k: v for k, v in data.items() if k not in tensors}, {}


def _jagged(flat: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    offsets = torch.zeros(lengths.numel() + 1, dtype=torch.int64)
    torch.cumsum(lengths, 0, out=offsets[1:])
    return torch.nested.nested_tensor_from_jagged(flat, offsets=offsets)


def _split(flat: torch.Tensor, lengths: list[int], dim: int = 0) -> list[torch.Tensor]:
    return list(torch.split(flat, lengths, dim=dim))


def to_frame(
    data: Any,
    schema: Schema | str | Path = "verl/qwen2_5_vl",
    stage: str | None = None,
    *,
    drop_meta_info: bool = False,
) -> Frame:
    """Encode a verl ``DataProto`` (or a mapping of its tensors and numpy arrays) with no edits
    to it (see the module docstring)."""
    sch = load_schema(schema)
    batch, non_tensor, meta = _parts(data)
    if meta and not drop_meta_info:
        raise _err(
            f"meta_info keys {sorted(meta)} have no place in a frame (py_wire never drops data "
            "silently): pass drop_meta_info=True and hand meta_info to from_frame(...)"
        )
    unknown = [
        f"batch[{k!r}]" for k in _keys(batch) if k not in sch.fields and k not in DERIVED_KEYS
    ]
    unknown += [
        f"non_tensor_batch[{k!r}]"
        for k in non_tensor
        if k not in sch.fields and k not in (MM_KEY, UID_KEY)
    ]
    if unknown:
        raise _err(
            f"{unknown} are not in schema {sch.name!r} (declare them; py_wire never drops a "
            f"field silently). Schema fields: {list(sch.fields)}",
            field=unknown[0],
        )
    out: dict[str, Any] = {}
    if _keys(batch):
        out.update(_tensor_fields(batch, sch))
    for key, value in non_tensor.items():
        if key == MM_KEY:
            out.update(_media_fields(value, sch))
        elif key == UID_KEY and sch.fields.get(UID_KEY) is not None:
            out[UID_KEY] = _uid_field(value)
        elif key == UID_KEY:
            raise _err(f"non_tensor_batch['uid'] is not in schema {sch.name!r}", field="uid")
        else:
            out[key] = value
    return encode(out, sch, stage=stage)


def _tensor_fields(batch: Mapping[str, Any], sch: Schema) -> dict[str, Any]:
    keys = _keys(batch)
    if "attention_mask" not in keys:
        raise _err(
            "batch['attention_mask'] is missing: it marks each row's tokens",
            field="attention_mask",
        )
    mask = batch["attention_mask"].bool()
    if mask.dim() != 2:
        raise _err(
            f"batch['attention_mask'] must be [B, L], not {list(mask.shape)}",
            field="attention_mask",
            kind="rank",
        )
    b, total = mask.shape
    lengths = mask.sum(1)
    responses = batch["responses"] if "responses" in keys else None
    r_len = 0 if responses is None else int(responses.shape[1])
    if r_len > total:
        raise _err(
            f"batch['responses'] has {r_len} columns but attention_mask only {total}",
            field="responses",
            kind="shape",
        )
    resp_mask = mask[:, total - r_len :]
    r_lengths = resp_mask.sum(1).tolist()
    prompts = batch["prompts"] if "prompts" in keys else None
    if prompts is not None and not torch.equal(prompts, batch["input_ids"][:, : total - r_len]):
        raise _err(
            "batch['prompts'] differs from input_ids[:, :P] (it is not stored: it would be lost)",
            field="prompts",
        )
    out: dict[str, Any] = {}
    for key in keys:
        if key in DERIVED_KEYS:
            continue
        value = batch[key]
        field = sch.fields[key]
        if field.tier == "per_token":
            _check_shape(key, value, (b, total))
            out[key] = _jagged(value[mask], lengths)
        elif key == "position_ids":
            out[key] = _position_rows(value, mask, lengths.tolist(), field)
        elif field.tier == "packed":
            if key not in RESPONSE_KEYS:
                raise _err(
                    f"batch[{key!r}] is a packed field of schema {sch.name!r} but not a "
                    f"response-aligned key verl uses ({sorted(RESPONSE_KEYS)}): py_wire cannot "
                    "tell how its padding maps to rows",
                    field=key,
                )
            _check_shape(key, value, (b, r_len))
            out[key] = _split(value[resp_mask], r_lengths)
        else:
            out[key] = value
    return out


def _check_shape(key: str, value: Any, want: tuple[int, int]) -> None:
    if not isinstance(value, torch.Tensor) or tuple(value.shape[:2]) != want:
        found = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
        raise _err(
            f"batch[{key!r}] must be [B, {want[1]}] like the mask it is cut by, not {found}",
            field=key,
            kind="shape",
            expected=list(want),
            found=found,
        )


def _position_rows(value: Any, mask: torch.Tensor, lengths: list[int], field: FieldDef) -> Any:
    if value.dim() != 3 or value.shape[0] != mask.shape[0] or value.shape[2] != mask.shape[1]:
        raise _err(
            f"batch['position_ids'] must be [B, C, L] (mRoPE) for schema field shape "
            f"{field.shape}, not {list(value.shape)}",
            field="position_ids",
            kind="shape",
            expected=["B", "C", list(mask.shape)[1]],
            found=list(value.shape),
        )
    cols = value.transpose(1, 2)[mask].t().contiguous()  # [C, sum L]
    return _split(cols, lengths, dim=1)


def _media_fields(value: Any, sch: Schema) -> dict[str, Any]:
    rows = list(value)
    keys: list[str] = []
    for row in rows:
        for k in row or {}:
            if k not in keys:
                keys.append(k)
    bad = [k for k in keys if sch.fields.get(k) is None or sch.fields[k].tier != "packed"]
    if bad:
        raise _err(
            f"non_tensor_batch['multi_modal_inputs'] keys {bad} are not packed fields of schema "
            f"{sch.name!r} (py_wire never drops a field silently)",
            field=bad[0],
        )
    return {k: _shared_rows([(row or {}).get(k) for row in rows], id) for k in keys}


def _uid_field(value: Any) -> _Shared:
    def utf8(s: Any) -> torch.Tensor:
        if not isinstance(s, str):
            raise _err(f"non_tensor_batch['uid'] holds {type(s).__name__}, not str", field="uid")
        return torch.from_numpy(np.frombuffer(bytearray(s.encode()), dtype=np.uint8))

    strings = list(value)
    shared = _shared_rows(strings, lambda s: s)
    shared.tensors = [utf8(s) for s in shared.tensors]
    return shared


def from_frame(
    frame: Any,
    stage: str | None = None,
    *,
    meta_info: Mapping[str, Any] | None = None,
    pad_token_id: int = 0,
    prompt_length: int | None = None,
    response_length: int | None = None,
    writable: Writable = "auto",
) -> Any:
    """The frame as verl holds it (see the module docstring): a ``DataProto`` when ``verl`` is
    importable, else ``{"batch": ..., "non_tensor_batch": ..., "meta_info": ...}``. Padded
    tensors are new; media tensors and scalars are views, under :func:`py_wire.decode`'s
    ``writable`` policy (the default copies a read-only source, such as a Ray object, once)."""
    prompt_length = optional_count("prompt_length", prompt_length, maximum=MAX_SEQUENCE)
    response_length = optional_count("response_length", response_length, maximum=MAX_SEQUENCE)
    pad_token_id = count("pad_token_id", pad_token_id, minimum=-(2**63), maximum=2**63 - 1)
    if meta_info is not None and not isinstance(meta_info, Mapping):
        raise TypeError(f"meta_info must be a mapping, not {type(meta_info).__name__}")
    frame = as_frame(frame)
    sch = checked_schema(frame)
    dtypes = {k: DTYPES[f.dtype] for k, f in sch.fields.items()}
    shapes = {k: tuple(f.shape) for k, f in sch.fields.items()}
    fields = decode(frame, stage=stage, writable=writable)
    out = _to_verl(fields, dtypes, shapes, pad_token_id, prompt_length, response_length)
    meta = dict(meta_info or {})
    cls: Any = dataproto_class()
    if cls is None:
        return {"batch": out[0], "non_tensor_batch": out[1], "meta_info": meta}
    return cls.from_dict(tensors=out[0] or None, non_tensors=out[1], meta_info=meta)


def _row_numel(pt: PackedTensor) -> torch.Tensor:
    """Elements per row of a decoded packed field, from its tables (O(1) torch calls)."""
    csr = pt._csr()
    if csr is None:  # not frame-backed (never, for decoded values): count per row
        return torch.tensor([sum(s.numel() for s in r or []) for r in pt.rows()], dtype=torch.int64)
    _, _, seg_offsets, row_offsets, row_segments = csr
    per_ref = torch.diff(seg_offsets)[row_segments]
    cs = torch.zeros(per_ref.numel() + 1, dtype=torch.int64)
    torch.cumsum(per_ref, 0, out=cs[1:])
    return cs[row_offsets[1:]] - cs[row_offsets[:-1]]


def _to_verl(
    fields: dict[str, Any],
    dtypes: dict[str, torch.dtype],
    shapes: dict[str, tuple[Any, ...]],
    pad_id: int,
    p_len: int | None,
    r_len: int | None,
) -> tuple[dict[str, torch.Tensor], dict[str, np.ndarray]]:
    ids = fields.get("input_ids")
    if ids is None:
        raise _err("the frame has no input_ids", field="input_ids")
    lengths = ids.offsets().diff()
    b = lengths.numel()
    resp = fields.get("responses")
    r = _row_numel(resp) if isinstance(resp, PackedTensor) else torch.zeros(b, dtype=torch.int64)
    p = lengths - r
    if bool((p < 0).any()):
        row = int(torch.nonzero(p < 0)[0, 0])
        raise _err(
            f"row {row}: {int(r[row])} response tokens but only {int(lengths[row])} tokens",
            field="responses",
            row=row,
        )
    big_p = _width(p, p_len, "prompt_length")
    big_r = _width(r, r_len, "response_length")
    cols = torch.arange(big_p + big_r)
    mask = (cols >= big_p - p[:, None]) & (cols < big_p + r[:, None])
    resp_mask = mask[:, big_p:]
    batch: dict[str, torch.Tensor] = {}
    non_tensor: dict[str, np.ndarray] = {}
    media: dict[str, PackedTensor] = {}
    for name, value in fields.items():
        if name == UID_KEY:
            non_tensor[name] = _strings(value)
        elif isinstance(value, PackedTensor) and name == "position_ids":
            batch[name] = _mrope(value, mask, shapes[name], lengths)
        elif isinstance(value, PackedTensor) and name in RESPONSE_KEYS:
            got = _row_numel(value)
            if not torch.equal(got, r):
                row = int(torch.nonzero(got != r)[0, 0])
                raise _err(
                    f"field {name!r}, row {row}: {int(got[row])} values for "
                    f"{int(r[row])} response tokens",
                    field=name,
                    row=row,
                    kind="length",
                    expected=int(r[row]),
                    found=int(got[row]),
                )
            pad = pad_id if name == "responses" else 0
            flat = value.as_tensor()
            dtype = dtypes[name] if flat is None else flat.dtype
            full = torch.full((b, big_r), pad, dtype=dtype)
            if flat is not None:
                full[resp_mask] = flat.reshape(-1)
            batch[name] = full
        elif isinstance(value, PackedTensor):
            media[name] = value
        elif isinstance(value, torch.Tensor) and value.is_nested:
            flat = value.values()
            if name == "position_ids":
                full = torch.clamp(torch.cumsum(mask.long(), 1) - 1, min=0).to(flat.dtype)
            else:
                full = torch.full((b, big_p + big_r), pad_id, dtype=flat.dtype)
            full[mask] = flat
            batch[name] = full
        else:
            batch[name] = value
    batch["attention_mask"] = mask.long()
    batch["prompts"] = batch["input_ids"][:, :big_p]
    if media:
        non_tensor[MM_KEY] = _media_rows(media, b)
    return batch, non_tensor


def _width(lengths: torch.Tensor, want: int | None, name: str) -> int:
    longest = int(lengths.max()) if lengths.numel() else 0
    if want is None:
        return longest
    if want < longest:
        raise _err(f"{name}={want} is shorter than the frame's longest ({longest})")
    return want


def _mrope(
    value: PackedTensor, mask: torch.Tensor, channels: tuple[Any, ...], lengths: torch.Tensor
) -> torch.Tensor:
    flat = value.as_tensor()  # [C, sum L] (pack dim 1)
    if flat is not None:
        # Each row must hold exactly its own tokens' positions: otherwise the scatter below
        # would move values across row boundaries whenever the totals agree.
        got = _row_numel(value) // max(flat.shape[0], 1)
        if not torch.equal(got, lengths):
            row = int(torch.nonzero(got != lengths)[0, 0])
            raise _err(
                f"field 'position_ids', row {row}: positions for {int(got[row])} tokens, but "
                f"the row has {int(lengths[row])} (input_ids)",
                field="position_ids",
                row=row,
                kind="length",
                expected=int(lengths[row]),
                found=int(got[row]),
            )
    if flat is None:  # no tokens at all: [B, C, L] of the fill
        lead = next((d for d in channels if isinstance(d, int)), 0)
        return torch.ones((mask.shape[0], lead, mask.shape[1]), dtype=torch.int64)
    full = torch.ones((mask.shape[0], flat.shape[0], mask.shape[1]), dtype=flat.dtype)
    full.transpose(1, 2)[mask] = flat.t()
    return full


def _strings(value: PackedTensor) -> np.ndarray:
    out = np.empty(len(value), dtype=object)
    cache: dict[tuple[int, int], str] = {}
    for i, row in enumerate(value.rows()):
        if row is not None and len(row) > 1:
            raise _err(
                f"field {UID_KEY!r}, row {i}: {len(row)} strings where a row holds one",
                field=UID_KEY,
                row=i,
            )
        seg = row[0] if row else None
        if seg is None:
            out[i] = None
            continue
        key = (seg.data_ptr(), seg.numel())  # an empty segment shares its neighbour's ptr
        if key not in cache:
            try:
                cache[key] = bytes(seg.numpy()).decode()
            except UnicodeDecodeError as e:
                raise _err(
                    f"field {UID_KEY!r}, row {i}: not UTF-8 ({e.reason} at byte {e.start})",
                    field=UID_KEY,
                    row=i,
                ) from None
        out[i] = cache[key]
    return out


def _media_rows(media: dict[str, PackedTensor], b: int) -> np.ndarray:
    """Per-row dicts; rows referencing the same segments of every field share one dict object
    (as ``DataProto.repeat`` leaves a GRPO group)."""
    out = np.empty(b, dtype=object)
    refs: list[list[tuple[int, ...]]] = []
    for value in media.values():
        csr = value._csr()
        if csr is None:  # not frame-backed: no sharing to keep
            refs.append([(i,) for i in range(b)])
            continue
        offsets, segments = csr[3].tolist(), csr[4].tolist()
        refs.append([tuple(segments[offsets[i] : offsets[i + 1]]) for i in range(b)])
    rows = {k: v.rows() for k, v in media.items()}
    made: dict[tuple[tuple[int, ...], ...], dict[str, Any]] = {}
    for i in range(b):
        key = tuple(r[i] for r in refs)
        if key not in made:
            d: dict[str, Any] = {}
            for name, segs in rows.items():
                row = segs[i]
                if row:
                    dim = media[name].dim_to_pack
                    d[name] = row[0] if len(row) == 1 else torch.cat(list(row), dim=dim)
            made[key] = d
        out[i] = made[key]
    return out
