"""TQ's side of a call: the ``transfer_queue`` module, keys, partitions and metas, each
argument checked before TQ sees it."""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

from py_wire import BatchError
from py_wire.adapters import names, with_context


def tq_module() -> Any:
    """The ``transfer_queue`` module (imported on use: it is not a dependency of py_wire)."""
    return importlib.import_module("transfer_queue")


def with_field(err: BatchError, field: str) -> BatchError:
    return with_context(err, field=field)


def partition(partition_id: object) -> str:
    if not isinstance(partition_id, str):
        raise TypeError(
            f"partition_id must be a str, not {type(partition_id).__name__} {partition_id!r:.60}"
        )
    return partition_id


def refuse_repeats(items: Sequence[Any], what: str) -> None:
    """A key (or sample) named twice is a BatchError naming it and both places."""
    if len(set(items)) == len(items):
        return
    seen: dict[Any, int] = {}
    for i, item in enumerate(items):
        if item in seen:
            raise with_context(
                BatchError(f"{item!r} is named twice ({what} {seen[item]} and {i})"),
                field=what,
                row=i,
            )
        seen[item] = i


def key_list(keys: Sequence[str] | str) -> list[str]:
    keys = [keys] if isinstance(keys, str) else names("keys", keys)
    if not keys:
        raise with_field(BatchError("keys is empty: nothing to get"), "keys")
    refuse_repeats(keys, "keys")
    return keys


def retrieve_meta(keys: list[str], partition_id: str) -> Any:
    """TQ's metadata of ``keys`` (no data moved): the columns every key holds."""
    partition(partition_id)
    meta = (
        tq_module()
        .get_client()
        .kv_retrieve_meta(keys=keys, partition_id=partition_id, create=False)
    )
    if meta.size != len(keys):
        held = set(tq_module().kv_list(partition_id).get(partition_id, {}))
        missing = [k for k in keys if k not in held] or keys
        raise with_field(
            BatchError(f"keys {missing[:4]} are not in TQ partition {partition_id!r}"), "keys"
        )
    return meta


def selected(meta: Any, columns: Sequence[str]) -> Any:
    """``meta.select_fields(columns)`` for TQ's ``get_data``, without the per-key copies TQ's
    own makes: it deep-copies every key's tags (``custom_meta``: py_wire's seven a key) and
    field table each call, O(keys) per fetch, though ``get_data`` reads neither. The same
    ``BatchMeta`` of those columns (each key's storage entries for them kept), with no tags."""
    columns = list(columns)
    backend = getattr(meta, "_custom_backend_meta", None)
    schema = getattr(meta, "field_schema", None)
    if not isinstance(backend, list) or not isinstance(schema, dict):
        return meta.select_fields(columns)
    wanted = set(columns)
    try:
        return type(meta)(
            global_indexes=meta.global_indexes,
            partition_ids=meta.partition_ids,
            field_schema={c: schema[c] for c in columns if c in schema},
            production_status=meta.production_status,
            extra_info=meta.extra_info,
            _custom_backend_meta=[
                {f: v for f, v in m.items() if f.startswith("_") or f in wanted} for m in backend
            ],
        )
    except TypeError:  # a TQ whose BatchMeta is built otherwise: its own selection
        return meta.select_fields(columns)


def meta_keys(meta: Any) -> tuple[list[str], str]:
    """The keys and partition a meta addresses: TQ's ``KVBatchMeta`` (``keys``) or
    ``BatchMeta`` (global indexes of one partition, resolved by TQ), or NeMo-RL's
    ``KVBatchMeta`` (``sample_ids``)."""
    keys = getattr(meta, "keys", None)
    if keys is None:
        keys = getattr(meta, "sample_ids", None)
    partition_id = getattr(meta, "partition_id", None)
    if keys is None and not hasattr(meta, "partition_ids"):
        raise TypeError(
            f"meta must be TQ's KVBatchMeta (keys, partition_id) or BatchMeta, or NeMo-RL's "
            f"KVBatchMeta (sample_ids, partition_id), not {type(meta).__name__}"
        )
    if keys is None:  # a BatchMeta: global indexes of one partition
        parts = set(meta.partition_ids)
        if len(parts) != 1:
            raise with_field(
                BatchError(f"the BatchMeta spans partitions {sorted(parts)}; give one"), "meta"
            )
        (partition_id,) = parts
        keys = (
            tq_module()
            .get_client()
            .kv_retrieve_keys(global_indexes=list(meta.global_indexes), partition_id=partition_id)
        )
    if not isinstance(partition_id, str):
        raise TypeError(f"meta has no partition_id: {type(meta).__name__}")
    return names("meta.keys", keys), partition_id
