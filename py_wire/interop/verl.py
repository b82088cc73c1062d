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
- ``non_tensor_batch`` columns are fields the schema declares: per-row strings and JSON values
  (``uid``, ``data_source``, ``reward_model``, ``extra_info``, ``index``, ``raw_prompt``, ...:
  ``encoding = "utf8"`` / ``"json"``, equal values stored once, so a GRPO group's ``uid`` is one
  segment) and numeric arrays (``__num_turns__`` as ``num_turns``), the agent loop's
  ``turn_scores``, ``tool_rewards``, ``min_global_steps``, ``max_global_steps``, ``extras`` and
  ``reward_extra_info`` included. A batch with keys of its own declares them in a schema that
  ``extends`` the bundled one, one by one or by pattern: the columns a reward function adds
  (``acc``, ``pred``, ...) are gathered into ``reward_extras`` (``gather = ["*"]``, one JSON
  object per row) and spread back with their numpy dtypes. A value JSON would not give back
  equal (a tuple, NaN) is refused with the field and row named.

``attention_mask`` itself is the row structure and ``prompts`` is ``input_ids[:, :P]``: both
are consumed, not stored (``prompts`` is checked to equal that slice). Any other key the schema
lacks raises :class:`~py_wire.BatchError` naming it.

What rebuilds the original shapes travels in the frame's metadata (``verl.*`` entries): the
padded widths ``P`` and ``R``, the value each padded tensor's padding held (``pad_token_id``
for tokens, 0 for masks, when a tensor's padded cells hold one value), ``meta_info`` as JSON
(a value JSON would not give back equal is refused, naming the key, unless
``drop_meta_info=True``), and which fields were ``non_tensor_batch`` columns. Frame operations
keep it, so a chunk or shard keeps verl's widths.

``from_frame(frame)``, with no arguments, gives what verl held: padded ``batch`` tensors
(``input_ids``, ``attention_mask`` rebuilt int64, ``prompts`` left-padded, ``responses`` and
the other response-side tensors right-padded, ``position_ids``), ``non_tensor_batch`` numpy
arrays (strings and JSON values, rows sharing a stored value sharing one object;
``multi_modal_inputs`` dicts, rows sharing media sharing one dict, ``{}`` for text-only rows),
and ``meta_info``: a real ``DataProto`` when ``verl`` is importable. Arguments override the
record (``pad_token_id``, ``prompt_length``, ``response_length``, ``meta_info``).

What round-trips bit-exactly: every cell verl's builders write (tokens, masks, positions,
rollout log-probs, reward scores, padding included), model outputs on the cells the mask marks,
the media tensors and their sharing, the ``non_tensor_batch`` values and the row order. What
cannot: garbage in padded cells of model outputs (``old_log_probs``, ...): it comes back as 0.
Text ``position_ids`` padding comes back as ``compute_position_id_with_mask`` writes it, mRoPE
padding as ``get_rope_index`` does (1). A mask with holes inside a row comes back compacted
(prompt tokens right-aligned, response tokens left-aligned).
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from py_wire import (
    BatchError,
    FieldDef,
    Frame,
    FrameError,
    PackedTensor,
    Schema,
    WireError,
    decode,
    encode,
    load_schema,
)
from py_wire.adapters import (
    DTYPES,
    Writable,
    as_frame,
    as_jagged,
    checked_schema,
    count,
    encode_rows,
    fill_value,
    gathering_field,
    json_text,
    optional_count,
    padded_cells_backed,
    shared_rows,
    tier_items,
    with_context,
)

__all__ = [
    "dataproto_class",
    "from_fields",
    "from_frame",
    "to_fields",
    "to_frame",
]

#: ``batch`` keys consumed by the adapter rather than stored.
DERIVED_KEYS = ("attention_mask", "prompts")
#: ``non_tensor_batch`` key whose per-row dicts become packed media fields.
MM_KEY = "multi_modal_inputs"
UID_KEY = "uid"
#: ``non_tensor_batch`` keys stored under another field name (py_wire names cannot start with
#: ``__``, which the frame reserves for its own tensors).
KEY_TO_FIELD = {"__num_turns__": "num_turns"}
FIELD_TO_KEY = {v: k for k, v in KEY_TO_FIELD.items()}
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
        "rm_scores",
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


def _split(flat: torch.Tensor, lengths: list[int], dim: int = 0) -> list[torch.Tensor]:
    return list(torch.split(flat, lengths, dim=dim))


#: Frame metadata written by :func:`to_frame` and read back by :func:`from_frame`.
META_KEYS = {
    "prompt_length": "verl.prompt_length",  # P of the source's [B, P + R]
    "response_length": "verl.response_length",  # R
    "pad_values": "verl.pad_values",  # JSON {key: value} of batch tensors padded uniformly
    "meta_info": "verl.meta_info",  # JSON of DataProto.meta_info
    "non_tensor": "verl.non_tensor",  # JSON list: fields that were non_tensor_batch arrays
    "gathered": "verl.gathered",  # JSON {key: [numpy dtype, row shape]} of gathered keys
}


def to_frame(
    data: Any,
    schema: Schema | str | Path = "verl/qwen2_5_vl",
    stage: str | None = None,
    *,
    drop_meta_info: bool = False,
) -> Frame:
    """Encode a verl ``DataProto`` (or a mapping of its tensors and numpy arrays) with no edits
    to it (see the module docstring). What :func:`from_frame` needs to rebuild the original
    shapes travels in the frame's metadata: the padded widths ``P`` and ``R``, the value each
    padded tensor was padded with (when its padding holds one value), ``meta_info`` as JSON
    (refused, naming the key, when it would not come back equal, unless ``drop_meta_info``)."""
    sch = load_schema(schema)
    out, metadata = to_fields(data, sch, drop_meta_info=drop_meta_info)
    return encode(out, sch, stage=stage, metadata=metadata)


def to_fields(
    data: Any, schema: Schema | str | Path = "verl/qwen2_5_vl", *, drop_meta_info: bool = False
) -> tuple[dict[str, Any], dict[str, str]]:
    """What :func:`to_frame` encodes, not encoded yet: the fields of ``schema`` that ``data``
    (a ``DataProto`` or a mapping, as :func:`to_frame` takes) gives, and the ``verl.*`` frame
    metadata that rebuilds its shapes, for a caller that adds fields of its own (declared in a
    schema that extends the adapter's) before its one :func:`py_wire.encode`. Refuses what
    :func:`to_frame` refuses, with the same errors."""
    sch = load_schema(schema)
    batch, non_tensor, meta = _parts(data)
    unknown = [
        f"batch[{k!r}]" for k in _keys(batch) if k not in sch.fields and k not in DERIVED_KEYS
    ]
    gathered = _gathered_keys(non_tensor, sch)
    unknown += [
        f"non_tensor_batch[{k!r}]" for k in non_tensor if _undeclared(k, sch) and k not in gathered
    ]
    if unknown:
        raise _err(
            f"{unknown} are not in schema {sch.name!r} (declare them, e.g. a field with "
            'encoding = "json" in a schema that extends this one, or list a pattern that '
            "matches them in the gather of its reward_extras field; py_wire never drops a field "
            f"silently). Schema fields: {list(sch.fields)}",
            field=unknown[0],
        )
    out: dict[str, Any] = {}
    metadata: dict[str, str] = {}
    if _keys(batch):
        out.update(_tensor_fields(batch, sch, metadata))
    carried: list[str] = []
    if gathered:
        name, rows, record = _gather(gathered, sch)
        out[name] = rows
        carried.append(name)
        metadata[META_KEYS["gathered"]] = json.dumps(record, separators=(",", ":"))
    for key, value in non_tensor.items():
        if key in gathered:
            continue
        if key == MM_KEY:
            out.update(_media_fields(value, sch))
            carried.append(key)  # so that a batch whose rows hold no media keeps the column
            continue
        name = KEY_TO_FIELD.get(key, key)
        field = sch.fields[name]
        if field.encoding is not None:
            out[name] = encode_rows(name, list(value), field.encoding)
        elif tier_items(field.tier) == "segments" and field.dtype == "uint8":
            raise _err(
                f"non_tensor_batch[{key!r}]: field {name!r} of schema {sch.name!r} declares no "
                'encoding (encoding = "utf8" for strings, "json" for other values)',
                field=name,
            )
        else:
            out[name] = value
        carried.append(name)
    metadata[META_KEYS["non_tensor"]] = json.dumps(carried)
    if meta and not drop_meta_info:
        metadata[META_KEYS["meta_info"]] = _meta_json(meta)
    return out, metadata


def _undeclared(key: str, sch: Schema) -> bool:
    """A ``non_tensor_batch`` key no field of ``sch`` stores (media dicts are fields' own)."""
    return KEY_TO_FIELD.get(key, key) not in sch.fields and key != MM_KEY


def _gathered_keys(non_tensor: Mapping[str, Any], sch: Schema) -> dict[str, Any]:
    """The ``non_tensor_batch`` columns no field declares that the schema's gathering field
    (``gather = [patterns]``) takes, in the batch's order."""
    gathering = gathering_field(sch)
    if gathering is None:
        return {}
    name, patterns = gathering
    out = {
        k: v
        for k, v in non_tensor.items()
        if _undeclared(k, sch) and any(fnmatch.fnmatchcase(k, p) for p in patterns)
    }
    if out and name in non_tensor:
        raise _err(
            f"non_tensor_batch[{name!r}] is the field that gathers {sorted(out)} (gather = "
            f"{list(patterns)}): rename the column or narrow the patterns",
            field=name,
        )
    return out


#: numpy dtypes a gathered column may have (``np.dtype.str``): bool, integers, floats,
#: unicode strings and objects; their values must come back equal from JSON.
_GATHERED_DTYPE = re.compile(r"^[<>|=]?(b1|[iu][1248]|f[248]|U\d{1,6}|O)$")


def _gather(columns: Mapping[str, Any], sch: Schema) -> tuple[str, Any, dict[str, Any]]:
    """One JSON object per row holding each gathered column's value (numpy values as the
    Python values ``tolist`` gives), and the record that spreads them back (each column's
    dtype and row shape)."""
    gathering = gathering_field(sch)
    assert gathering is not None
    name = gathering[0]
    rows: list[dict[str, Any]] | None = None
    record: dict[str, Any] = {}
    for key, column in columns.items():
        if not isinstance(column, np.ndarray) or column.ndim < 1:
            raise _err(
                f"non_tensor_batch[{key!r}] is a {type(column).__name__}, not a numpy array of "
                "one value per row",
                field=key,
            )
        if not _GATHERED_DTYPE.match(column.dtype.str):
            raise _err(
                f"non_tensor_batch[{key!r}] has dtype {column.dtype}: a gathered column holds "
                "bools, ints, floats, str or objects (JSON values)",
                field=key,
                found=str(column.dtype),
            )
        if column.dtype == object and column.ndim != 1:
            raise _err(
                f"non_tensor_batch[{key!r}] is a {list(column.shape)} object array: a gathered "
                "object column holds one value per row (build it with np.fromiter, as verl's "
                "collate_fn does)",
                field=key,
            )
        values = list(column) if column.dtype == object else column.tolist()
        if rows is None:
            rows = [{} for _ in values]
        if len(values) != len(rows):
            raise _err(
                f"non_tensor_batch[{key!r}] has {len(values)} rows, "
                f"non_tensor_batch[{next(iter(columns))!r}] {len(rows)}",
                field=key,
            )
        for row, value in zip(rows, values, strict=True):
            row[key] = value
        record[key] = [column.dtype.str, list(column.shape[1:])]
    return name, encode_rows(name, rows or [], "json"), record


def _object_array(values: list[Any]) -> np.ndarray:
    """Decoded per-row values as the numpy object array verl keeps (one Python object a row,
    never broadcast into more dims)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _spread(name: str, rows: list[Any], record: Mapping[str, Any], b: int) -> dict[str, np.ndarray]:
    """The gathered columns back, each with its recorded dtype and row shape: the inverse of
    :func:`_gather`. Rows that are not JSON objects holding every recorded key are a
    :class:`BatchError` naming the field, row and key."""
    out: dict[str, np.ndarray] = {}
    for key, (dtype, tail) in record.items():
        values = []
        for i, row in enumerate(rows):
            if not isinstance(row, dict) or key not in row:
                raise _err(
                    f"field {name!r}, row {i}: {row!r:.80} holds no {key!r}, which the frame "
                    f"metadata {META_KEYS['gathered']!r} records",
                    field=name,
                    row=i,
                )
            values.append(row[key])
        if dtype.endswith("O"):
            column = np.empty(len(values), dtype=object)
            for i, v in enumerate(values):
                column[i] = v
        else:
            try:
                column = np.array(values, dtype=np.dtype(dtype))
            except (TypeError, ValueError, OverflowError) as e:
                raise _err(
                    f"field {name!r}: the values of {key!r} do not make a {dtype} array ({e})",
                    field=name,
                ) from None
            if column.shape != (b, *tail):
                raise _err(
                    f"field {name!r}: the values of {key!r} make shape {list(column.shape)}, "
                    f"not {[b, *tail]} as recorded",
                    field=name,
                )
        out[key] = column
    return out


def _meta_json(meta: Mapping[str, Any]) -> str:
    entries = []
    for key, value in sorted(meta.items(), key=lambda kv: str(kv[0])):
        try:
            if not isinstance(key, str):
                raise ValueError("a key that is not a str")
            entries.append(f"{json.dumps(key)}:{json_text(value)}")
        except ValueError as e:
            raise _err(
                f"meta_info[{key!r}]: {e} (py_wire never drops data silently): store JSON "
                "values, or pass drop_meta_info=True and hand meta_info to from_frame(...)",
                field=f"meta_info[{key!r}]",
            ) from None
    return "{" + ",".join(entries) + "}"


def _tensor_fields(
    batch: Mapping[str, Any], sch: Schema, metadata: dict[str, str]
) -> dict[str, Any]:
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
    row_lengths = mask.sum(1).tolist()
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
    tokens, answer = _Cells(mask), _Cells(resp_mask)
    prompts = batch["prompts"] if "prompts" in keys else None
    if prompts is not None and not torch.equal(prompts, batch["input_ids"][:, : total - r_len]):
        raise _err(
            "batch['prompts'] differs from input_ids[:, :P] (it is not stored: it would be lost)",
            field="prompts",
        )
    metadata[META_KEYS["prompt_length"]] = str(total - r_len)
    metadata[META_KEYS["response_length"]] = str(r_len)
    pads: dict[str, int | float | bool] = {}
    out: dict[str, Any] = {}
    for key in keys:
        if key in DERIVED_KEYS:
            continue
        value = batch[key]
        field = sch.fields[key]
        if tier_items(field.tier) == "tokens":
            _check_shape(key, value, (b, total))
            # Each row a view of the masked values (a list: cheaper to build and to encode
            # than a jagged nested tensor, and the same frame).
            out[key] = _split(tokens.on(value), row_lengths)
            if key != "position_ids":  # from_frame rebuilds text positions by verl's rule
                _record_pad(pads, key, tokens.off(value))
        elif key == "position_ids":
            out[key] = _position_rows(value, mask, row_lengths, field)
        elif tier_items(field.tier) == "segments":
            if key not in RESPONSE_KEYS:
                raise _err(
                    f"batch[{key!r}] is a packed field of schema {sch.name!r} but not a "
                    f"response-aligned key verl uses ({sorted(RESPONSE_KEYS)}): py_wire cannot "
                    "tell how its padding maps to rows",
                    field=key,
                )
            _check_shape(key, value, (b, r_len))
            out[key] = _split(answer.on(value), r_lengths)
            _record_pad(pads, key, answer.off(value))
        else:
            out[key] = value
    metadata[META_KEYS["pad_values"]] = json.dumps(pads, sort_keys=True, separators=(",", ":"))
    return out


class _Cells:
    """The cells a ``[B, W]`` mask marks (and those it does not), as flat indices found once:
    cutting each tensor by them costs a tenth of indexing it by the boolean mask."""

    def __init__(self, mask: torch.Tensor) -> None:
        self.shape = tuple(mask.shape)
        self.mask = mask.reshape(-1)
        self.marked = self.mask.nonzero().squeeze(1)
        self.unmarked: torch.Tensor | None = None

    @staticmethod
    def _flat(value: torch.Tensor) -> torch.Tensor:
        return value.reshape(-1, *value.shape[2:])

    def on(self, value: torch.Tensor) -> torch.Tensor:
        """``value[mask]``."""
        return self._flat(value).index_select(0, self.marked)

    def off(self, value: torch.Tensor) -> torch.Tensor:
        """``value[~mask]``."""
        if self.unmarked is None:
            self.unmarked = (~self.mask).nonzero().squeeze(1)
        return self._flat(value).index_select(0, self.unmarked)

    def scatter(self, full: torch.Tensor, values: torch.Tensor) -> None:
        """``full[mask] = values``."""
        self._flat(full).index_copy_(0, self.marked, values.reshape(-1, *full.shape[2:]))


def _record_pad(pads: dict[str, int | float | bool], key: str, cells: torch.Tensor) -> None:
    """The value a tensor's padded cells hold, when they all hold one (verl's builders pad
    with ``pad_token_id`` or 0); model outputs with garbage in their padding record none."""
    if cells.numel() == 0:
        return
    first = cells.reshape(-1)[0]
    if bool((cells == first).all()):
        value = first.item()
        if not isinstance(value, float) or math.isfinite(value):
            pads[key] = value


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
    bad = [
        k for k in keys if sch.fields.get(k) is None or tier_items(sch.fields[k].tier) != "segments"
    ]
    if bad:
        raise _err(
            f"non_tensor_batch['multi_modal_inputs'] keys {bad} are not packed fields of schema "
            f"{sch.name!r} (py_wire never drops a field silently)",
            field=bad[0],
        )
    return {k: shared_rows([(row or {}).get(k) for row in rows], id) for k in keys}


def from_frame(
    frame: Any,
    stage: str | None = None,
    *,
    meta_info: Mapping[str, Any] | None = None,
    pad_token_id: int | None = None,
    prompt_length: int | None = None,
    response_length: int | None = None,
    writable: Writable = "auto",
) -> Any:
    """The frame as verl holds it (see the module docstring): a ``DataProto`` when ``verl`` is
    importable, else ``{"batch": ..., "non_tensor_batch": ..., "meta_info": ...}``. Padded
    tensors are new; media tensors and scalars are views, under :func:`py_wire.decode`'s
    ``writable`` policy (the default copies a read-only source, such as a Ray object, once).

    With no arguments, what :func:`to_frame` recorded rebuilds the source: its widths ``P`` and
    ``R`` (or the longest rows, where a frame operation made a row longer), each tensor's pad
    value, ``meta_info`` and which fields were ``non_tensor_batch`` arrays. Arguments override
    the record: ``pad_token_id`` pads ``input_ids``, ``prompts`` and ``responses``; the widths
    must hold the longest row; ``meta_info`` replaces the recorded one."""
    prompt_length = optional_count("prompt_length", prompt_length, maximum=MAX_SEQUENCE)
    response_length = optional_count("response_length", response_length, maximum=MAX_SEQUENCE)
    if pad_token_id is not None:
        pad_token_id = count("pad_token_id", pad_token_id, minimum=-(2**63), maximum=2**63 - 1)
    if meta_info is not None and not isinstance(meta_info, Mapping):
        raise TypeError(f"meta_info must be a mapping, not {type(meta_info).__name__}")
    frame = as_frame(frame)
    sch = checked_schema(frame)
    record = _Record.read(frame, sch)
    if pad_token_id is not None:
        record.pads.update(dict.fromkeys(TOKEN_KEYS, pad_token_id))
    fields = decode(frame, stage=stage, writable=writable)
    return _dataproto(
        fields,
        sch,
        record,
        (prompt_length, response_length),
        dict(meta_info) if meta_info is not None else record.meta_info,
    )


def from_fields(
    fields: Mapping[str, Any],
    frame: Any,
    *,
    record: Mapping[str, str] | None = None,
    meta_info: Mapping[str, Any] | None = None,
) -> Any:
    """What :func:`from_frame` gives, from ``fields``, ``frame``'s fields as
    :func:`py_wire.decode` returned them (by default; less any the caller's own schema added
    to the adapter's), for a caller that decoded the frame already. ``record``: the ``verl.*``
    entries :func:`to_fields` returned, where they were kept apart from ``frame``'s metadata
    (None: the frame's own); ``meta_info`` replaces the recorded one. Values that are not
    ``decode``'s for ``frame`` (another kind, other rows or tokens) are refused naming the
    field."""
    if meta_info is not None and not isinstance(meta_info, Mapping):
        raise TypeError(f"meta_info must be a mapping, not {type(meta_info).__name__}")
    if record is not None and not (
        isinstance(record, Mapping)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in record.items())
    ):
        raise TypeError(
            "record must be a mapping of str to str (the verl.* metadata to_fields returns), "
            f"not {type(record).__name__}"
        )
    frame = as_frame(frame)
    sch = checked_schema(frame)
    _check_decoded(fields, sch, frame.num_rows)
    rec = _Record.read(frame, sch, meta=record)
    meta = dict(meta_info) if meta_info is not None else rec.meta_info
    return _dataproto(dict(fields), sch, rec, (None, None), meta)


def _check_decoded(fields: Any, sch: Schema, rows: int) -> None:
    """``fields`` are ``decode``'s values for a frame of ``sch`` with ``rows`` rows: each a
    field of ``sch``, of the kind its tier and encoding decode to, ``rows`` long, and each
    per-token field cut as ``input_ids`` is."""
    if not isinstance(fields, Mapping):
        raise TypeError(
            f"fields must be a mapping (what py_wire.decode returned), not {type(fields).__name__}"
        )
    ids = fields.get("input_ids")
    if not (isinstance(ids, torch.Tensor) and ids.is_nested and ids.layout == torch.jagged):
        raise _err(
            "fields['input_ids'] (the rows' tokens, as py_wire.decode gives them: a jagged "
            f"nested tensor) is {type(ids).__name__}",
            field="input_ids",
        )
    offsets = as_jagged(ids).offsets()
    for name, value in fields.items():
        field = sch.fields.get(name) if isinstance(name, str) else None
        if field is None:
            raise _err(
                f"fields: {name!r} is not a field of the frame's schema {sch.name!r}",
                field=name if isinstance(name, str) else repr(name),
            )
        n = _decoded_rows(value, field, offsets)
        if n != rows:
            raise _err(
                f"fields[{name!r}]: not what py_wire.decode gives field {name!r} of this frame "
                f"({rows} rows{', cut as input_ids' if tier_items(field.tier) == 'tokens' else ''}"
                f"), but a {type(value).__name__}" + (f" of {n} rows" if n is not None else ""),
                field=name,
            )


def _decoded_rows(value: Any, field: FieldDef, offsets: torch.Tensor) -> int | None:
    """How many rows ``value`` holds, where it is of the kind ``decode`` gives ``field`` (a
    per-token field: cut by ``offsets``, the ``input_ids`` rows); else None."""
    items = tier_items(field.tier)
    if field.encoding is not None:
        return len(value) if isinstance(value, list) else None
    if items == "segments":
        return len(value) if isinstance(value, PackedTensor) else None
    if not isinstance(value, torch.Tensor) or value.dim() == 0 or value.device.type == "meta":
        return None
    if items == "rows":
        return None if value.is_nested else value.shape[0]
    if not (value.is_nested and value.layout == torch.jagged):
        return None
    own = as_jagged(value).offsets()
    return value.size(0) if own.device == offsets.device and torch.equal(own, offsets) else None


def _dataproto(
    fields: dict[str, Any],
    sch: Schema,
    record: _Record,
    widths: tuple[int | None, int | None],
    meta: dict[str, Any],
) -> Any:
    """:func:`from_frame`'s result from a frame's decoded ``fields`` and its ``record``;
    ``widths``: the prompt and response widths asked for (None: the recorded ones)."""
    batch, non_tensor = _to_verl(
        fields,
        sch,
        record,
        widths[0] if widths[0] is not None else record.prompt_length,
        widths[1] if widths[1] is not None else record.response_length,
        strict=(widths[0] is not None, widths[1] is not None),
    )
    cls: Any = dataproto_class()
    if cls is None:
        return {"batch": batch, "non_tensor_batch": non_tensor, "meta_info": meta}
    return cls.from_dict(tensors=batch or None, non_tensors=non_tensor, meta_info=meta)


#: ``batch`` keys padded with the tokenizer's pad id.
TOKEN_KEYS = ("input_ids", "prompts", "responses")


class _Record:
    """What :func:`to_frame` wrote into the frame's metadata, read as hostile input: a value
    that is not what ``to_frame`` writes is a :class:`FrameError` naming its key."""

    def __init__(self) -> None:
        self.prompt_length: int | None = None
        self.response_length: int | None = None
        self.pads: dict[str, int | float | bool] = {}
        self.meta_info: dict[str, Any] = {}
        self.non_tensor: set[str] = set()
        self.gathered: dict[str, tuple[str, list[int]]] = {}
        self.frame_nbytes = 0

    @classmethod
    def read(cls, frame: Frame, sch: Schema, meta: Mapping[str, str] | None = None) -> _Record:
        """``frame``'s record, from its metadata or ``meta`` (a record kept apart from the
        frame's metadata, e.g. by a stream whose frames share one metadata)."""
        record = cls()
        record.frame_nbytes = len(frame)
        meta = frame.metadata if meta is None else meta
        for attr in ("prompt_length", "response_length"):
            key = META_KEYS[attr]
            if key in meta:
                text = meta[key]
                if not (text.isascii() and text.isdigit()) or int(text) > MAX_SEQUENCE:
                    raise _bad_record(key, text, f"a width of 0..{MAX_SEQUENCE}")
                setattr(record, attr, int(text))
        pads = _json_record(meta, META_KEYS["pad_values"], dict)
        for name, value in pads.items():
            field = sch.fields.get(name)
            if field is None or isinstance(value, (dict, list, str)) or value is None:
                raise _bad_record(META_KEYS["pad_values"], meta[META_KEYS["pad_values"]], "")
            try:
                # Checked against the dtype the values decode as (the wire dtype) too.
                for dtype in (field.stored_dtype, field.dtype):
                    record.pads[name] = fill_value(name, value, DTYPES[dtype])
            except WireError as e:
                raise _bad_record(META_KEYS["pad_values"], repr(value), str(e)) from None
        record.meta_info = _json_record(meta, META_KEYS["meta_info"], dict)
        names = _json_record(meta, META_KEYS["non_tensor"], list)
        if not all(isinstance(n, str) and (n in sch.fields or n == MM_KEY) for n in names):
            raise _bad_record(META_KEYS["non_tensor"], meta[META_KEYS["non_tensor"]], "")
        record.non_tensor = set(names)
        gathered = _json_record(meta, META_KEYS["gathered"], dict)
        for key, entry in gathered.items():
            if not (
                isinstance(entry, list)
                and len(entry) == 2
                and isinstance(entry[0], str)
                and _GATHERED_DTYPE.match(entry[0])
                and isinstance(entry[1], list)
                and len(entry[1]) <= 8
                and all(isinstance(d, int) and 0 <= d <= MAX_SEQUENCE for d in entry[1])
            ):
                raise _bad_record(
                    META_KEYS["gathered"], f"{key}: {entry!r:.80}", "[numpy dtype, row shape]"
                )
            record.gathered[key] = (entry[0], entry[1])
        return record


def _json_record(meta: Mapping[str, str], key: str, kind: type) -> Any:
    if key not in meta:
        return kind()
    try:
        value = json.loads(meta[key])
    except (ValueError, RecursionError):
        value = None
    if not isinstance(value, kind):
        raise _bad_record(key, meta[key][:200], f"JSON {kind.__name__}")
    return value


def _bad_record(key: str, found: str, want: str) -> FrameError:
    return with_context(
        FrameError(
            f"frame metadata {key!r} is {found!r}, not what verl.to_frame writes"
            + (f" ({want})" if want else "")
        ),
        field=key,
    )


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
    sch: Schema,
    record: _Record,
    p_len: int | None,
    r_len: int | None,
    *,
    strict: tuple[bool, bool],
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
    big_p = _width(p, p_len, "prompt_length", strict[0])
    big_r = _width(r, r_len, "response_length", strict[1])
    if not all(strict) and not padded_cells_backed(b * (big_p + big_r), record.frame_nbytes):
        # A recorded width is hostile input: it may not size more than the frame backs.
        key = META_KEYS["prompt_length" if not strict[0] else "response_length"]
        raise with_context(
            FrameError(
                f"frame metadata {META_KEYS['prompt_length']!r} / "
                f"{META_KEYS['response_length']!r} give widths {big_p} + {big_r}: {b} rows "
                f"padded to them make {b * (big_p + big_r)} cells, more than the frame's "
                f"{record.frame_nbytes} bytes justify (damaged or hostile metadata?)"
            ),
            field=key,
            found=[big_p, big_r],
        )
    cols = torch.arange(big_p + big_r)
    mask = (cols >= big_p - p[:, None]) & (cols < big_p + r[:, None])
    resp_mask = mask[:, big_p:]
    tokens, answer = _Cells(mask), _Cells(resp_mask)
    batch: dict[str, torch.Tensor] = {}
    non_tensor: dict[str, np.ndarray] = {}
    media: dict[str, PackedTensor] = {}
    for name, value in fields.items():
        field = sch.fields[name]
        pad = record.pads.get(name, 0)
        if field.gather is not None and record.gathered:
            non_tensor.update(_spread(name, value, record.gathered, b))
        elif field.encoding is not None:
            non_tensor[FIELD_TO_KEY.get(name, name)] = _object_array(value)
        elif name in record.non_tensor and isinstance(value, torch.Tensor):
            non_tensor[FIELD_TO_KEY.get(name, name)] = value.numpy()
        elif isinstance(value, PackedTensor) and name == "position_ids":
            batch[name] = _mrope(value, mask, tuple(field.shape), lengths)
        elif isinstance(value, PackedTensor) and name in RESPONSE_KEYS:
            batch[name] = _response_tensor(name, value, r, answer, pad, DTYPES[field.dtype])
        elif isinstance(value, PackedTensor):
            media[name] = value
        elif isinstance(value, torch.Tensor) and value.is_nested:
            flat = value.values()
            if name == "position_ids":  # compute_position_id_with_mask
                full = torch.clamp(torch.cumsum(mask.long(), 1) - 1, min=0).to(flat.dtype)
            else:
                full = torch.full((b, big_p + big_r), pad, dtype=flat.dtype)
            tokens.scatter(full, flat)
            batch[name] = full
        else:
            batch[name] = value
    batch["attention_mask"] = mask.long()
    batch["prompts"] = batch["input_ids"][:, :big_p]
    if media or MM_KEY in record.non_tensor:
        non_tensor[MM_KEY] = _media_rows(media, b)
    return batch, non_tensor


def _response_tensor(
    name: str,
    value: PackedTensor,
    r: torch.Tensor,
    answer: _Cells,
    pad: int | float | bool,
    dtype: torch.dtype,
) -> torch.Tensor:
    got = _row_numel(value)
    if not torch.equal(got, r):
        row = int(torch.nonzero(got != r)[0, 0])
        raise _err(
            f"field {name!r}, row {row}: {int(got[row])} values for {int(r[row])} response tokens",
            field=name,
            row=row,
            kind="length",
            expected=int(r[row]),
            found=int(got[row]),
        )
    flat = value.as_tensor()
    full = torch.full(answer.shape, pad, dtype=dtype if flat is None else flat.dtype)
    if flat is not None:
        answer.scatter(full, flat)
    return full


def _width(lengths: torch.Tensor, want: int | None, name: str, strict: bool) -> int:
    """``want`` (an argument, or the recorded width) when it holds the longest row; a recorded
    width a frame operation outgrew (a concat of batches padded differently) gives way to the
    longest row, an argument does not."""
    longest = int(lengths.max()) if lengths.numel() else 0
    if want is None:
        return longest
    if want < longest:
        if not strict:
            return longest
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
