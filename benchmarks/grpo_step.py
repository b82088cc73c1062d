"""One whole GRPO step of a Qwen2.5-VL batch through the real TransferQueue, py_wire's adapter
against NeMo-RL's own TQ wire (the ``<key>__lengths`` companions of the branch ``zhiyul/tq_vlm``
of NVIDIA-NeMo/RL), in one run.

The step, as NeMo-RL runs it: the rollout puts the finished batch (no train-only fields); the
logprob worker fetches its stage (images included) and writes back ``prev_logprobs``; the
reference worker fetches its stage and writes back ``reference_policy_logprobs``; the driver
writes back ``advantages``; 4 DP ranks each take their share through TQ's
``SeqlenBalancedSampler`` (``get_meta``), fetch it and cut it into micro-batches of padded
tensors (py_wire's side fetches with ``py_wire.interop.nemo_rl.get``, which returns NeMo-RL's
own ``BatchedDataDict`` and ``PackedTensor``). py_wire runs twice: one TQ key per GRPO group
(a group's images once), and one key per sample as NeMo-RL keys its rows (each sample's text
row under its key, a group's images once under its first key); NeMo-RL stores one row
per sample (the images ``n`` times), its per-token fields as jagged nested tensors and its
packed media as nested tensors plus ``<key>__lengths`` companions, decoded by its own
``materialize`` and ``PackedTensor.from_nested_wire``. NeMo-RL's code is imported from the path
given (nothing of it is copied here; its imports need ``pillow``).

Beside each py_wire layout, in the same TQ, TQ's own floor for that layout (``TQFloor``): the
step's puts, fetches and sampler calls under the same keys with TQ's own encoder and no py_wire;
the per-sample / per-group ratio of TQ alone bounds py_wire's. The profiled step's table counts
the TQ calls each path makes (metadata lookups, fetches, puts) and splits its time into TQ's
calls and py_wire's parts (encode, decode, checks, frame ops, frame reads, tags), with the rest
of the step (outside every named part) in a column of its own.

Each side runs in a TQ of its own (the sampler is configured per side: one row per group for
py_wire keyed per group, ``n_samples_per_prompt`` rows per group for py_wire keyed per sample
and for NeMo-RL). After the timed rounds every
sample's train tensors on every DP rank are compared, py_wire's against NeMo-RL's, bit for bit
(rows cut to their lengths; NeMo-RL's padded widths differ by rank).

    .venv/bin/python benchmarks/grpo_step.py /work/ext/nemo_rl_tq_vlm --reps 3

(the path: a checkout of NeMo-RL's ``zhiyul/tq_vlm``, e.g. ``git archive d265750 nemo_rl``).

Defaults are NeMo-RL's Qwen2.5-VL GRPO recipe (``examples/configs/vlm_grpo_3B.yaml``: 8 prompts
per step, 16 generations each, 128 samples), on both TQ backends.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import machine
import ray
import torch
import transfer_queue as tq
from omegaconf import OmegaConf
from tensordict import TensorDict

import py_wire
from py_wire.interop import nemo_rl
from py_wire.interop import transfer_queue as ptq
from py_wire.synth.frameworks import nemo_rl_qwen2_5_vl_batch

SCHEMA = "nemo_rl/qwen2_5_vl"
GROUP = 4
RANKS = 4
MICRO = 2
LATER = ("prev_logprobs", "reference_policy_logprobs", "advantages")
PER_TOKEN = ("input_ids", "mm_token_type_ids", "token_mask", "generation_logprobs", *LATER)
MEDIA = ("pixel_values", "image_grid_thw")
SCALAR = ("input_lengths", "sample_mask")


class Where:
    """Where a step's time goes: the TQ client's calls, py_wire's encodes, decodes, checks,
    frame ops, frame reads and tags, each timed by a wrapper around the named function
    (outermost call only, so a category never counts another's time twice); and the payload
    bytes each write-back hands to TQ (``kv_batch_put`` of a write-back column, or NeMo-RL's
    ``write``)."""

    def __init__(self, extra: list[tuple[Any, str, str]] | None = None) -> None:
        from py_wire import _native

        # the modules (the package re-exports functions of the same names); each name is
        # wrapped where it is called (a module that imported it holds its own reference)
        ptq_get, ptq_put, ptq_wb, ptq_cols = (
            importlib.import_module(f"py_wire.interop.transfer_queue.{m}")
            for m in ("get", "put", "write_back", "columns")
        )

        client = type(tq.get_client()) if tq_started() else None
        self.spots: list[tuple[Any, str, str]] = [
            (tq, "kv_batch_put", "TQ calls"),
            (tq, "kv_batch_get", "TQ calls"),
            (tq, "kv_list", "TQ calls"),
            (tq, "kv_clear", "TQ calls"),
            (_native, "encode", "encode"),
            (ptq_put, "encode_with_codec", "encode"),
            (ptq_cols, "encode_with_codec", "encode"),
            (ptq_get, "encode_with_codec", "encode"),
            (ptq_get, "decode_selected", "decode"),
            (ptq_wb, "decode_selected", "decode"),
            (ptq_get, "_check_groups", "checks"),
            (ptq_get, "_check_sequences", "checks"),
            (ptq_get, "_check_media_rows", "checks"),
            (ptq_get, "_check_tags", "checks"),
            (ptq_put, "checked_fields", "checks"),
            (ptq_wb, "checked_fields", "checks"),
            (ptq_wb, "_check_written", "checks"),
            (ptq_wb, "_aligned", "checks"),
            (ptq_get, "concat", "frame ops"),
            (ptq_get, "take_rows", "frame ops"),
            (ptq_put, "split", "frame ops"),
            (ptq_put, "concat", "frame ops"),
            (ptq_wb, "split", "frame ops"),
            (ptq_wb, "concat", "frame ops"),
            (ptq_put, "frames_column", "frame ops"),
            (ptq_wb, "frames_column", "frame ops"),
            (ptq_get, "column_frames", "frame reads"),
            (ptq_put, "_tags", "tags"),
            (ptq_wb, "_recorded", "tags"),
            (ptq_get, "_media_sources", "tags"),
        ]
        self.spots += extra or []
        if client is not None:
            for name in ("get_data", "kv_retrieve_meta", "kv_retrieve_keys", "get_meta", "put"):
                self.spots.append((client, name, "TQ calls"))
        self.seconds: dict[str, float] = {}
        #: how many of each TQ call the step made (outermost calls: a kv_batch_get is one
        #: fetch, its own metadata call inside not counted again)
        self.calls: dict[str, int] = {}
        #: payload bytes of each write-back, in order (one kv_batch_put of write-back columns)
        self.write_backs: list[int] = []
        #: the same write-backs as TQ's own encoder writes them for its storage units (its
        #: msgpack header with each row's dtype and shape, and the buffers): what crosses
        self.write_back_wire: list[int] = []
        self.depth = 0
        #: TQ calls under way (a TQ call inside another is not counted again; one inside a
        #: py_wire part is counted, its time the part's)
        self.in_tq = 0
        #: seconds of the wrappers' own byte counting (not the step's)
        self.book = 0.0
        self.saved: list[tuple[Any, str, Any]] = []

    def __enter__(self) -> Where:
        for owner, name, what in self.spots:
            fn = getattr(owner, name)
            self.saved.append((owner, name, fn))
            setattr(owner, name, self._timed(fn, what))
        return self

    def __exit__(self, *exc: object) -> None:
        for owner, name, fn in reversed(self.saved):
            setattr(owner, name, fn)
        self.saved.clear()

    def _timed(self, fn: Callable[..., Any], what: str) -> Callable[..., Any]:
        def timed(*args: Any, **kwargs: Any) -> Any:
            if what == "TQ calls" and fn.__name__ in ("kv_batch_put", "put") and not self.in_tq:
                # the benchmark's own bookkeeping: kept out of the step's time
                t_book = time.perf_counter()
                fields = kwargs.get("fields", kwargs.get("data"))
                if fields is None:  # the client's put(data, metadata)
                    fields = next((a for a in args if isinstance(a, TensorDict)), None)
                written = [
                    payload_bytes(fields.select(c))
                    for c in (list(fields.keys()) if fields is not None else [])
                    if c.startswith(ptq.WRITE_BACK) or c in LATER
                ]
                if written:
                    self.write_backs.append(sum(written))
                    names = list(fields.keys())
                    cols = [c for c in names if c.startswith(ptq.WRITE_BACK) or c in LATER]
                    self.write_back_wire.append(encoded_bytes(fields.select(*cols)))
                self.book += time.perf_counter() - t_book
            if what == "TQ calls" and not self.in_tq:
                for kind in CALL_KINDS.get(fn.__name__, (fn.__name__,)):
                    self.calls[kind] = self.calls.get(kind, 0) + 1
            if self.depth:
                self.in_tq += what == "TQ calls"
                try:
                    return fn(*args, **kwargs)
                finally:
                    self.in_tq -= what == "TQ calls"
            self.in_tq += what == "TQ calls"
            self.depth += 1
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[what] = self.seconds.get(what, 0.0) + time.perf_counter() - t0
                self.depth -= 1
                self.in_tq -= what == "TQ calls"

        return timed

    @property
    def write_back_bytes(self) -> int:
        return sum(self.write_backs)


#: The TQ controller and storage calls each TQ client call makes, by kind (the Where table's
#: call counts): ``kv_batch_put`` and ``kv_batch_get`` look their keys up first.
CALL_KINDS = {
    "kv_batch_put": ("metas", "puts"),
    "put": ("puts",),
    "kv_batch_get": ("metas", "fetches"),
    "get_data": ("fetches",),
    "kv_retrieve_meta": ("metas",),
    "get_meta": ("metas",),
    "kv_retrieve_keys": ("metas",),
    "kv_list": ("metas",),
}


def tq_started() -> bool:
    try:
        tq.get_client()
    except Exception:
        return False
    return True


def start(sampler: Any, backend: str) -> None:
    """Ray and a fresh TQ on ``backend`` whose controller samples with ``sampler`` (an
    instance)."""
    if ray.is_initialized():
        tq.close()
        ray.shutdown()
    # address="local": a cluster of its own, never one another job on the machine started
    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=3 << 30,
    )
    # TQ logs an error that RayStore has no bootstrap: it needs none (its client makes its actor).
    logging.getLogger("transfer_queue").setLevel(logging.CRITICAL)
    conf = OmegaConf.create(
        {"controller": {"sampler": sampler}, "backend": {"storage_backend": backend}},
        flags={"allow_objects": True},
    )
    tq.init(conf)
    logging.getLogger("transfer_queue").setLevel(logging.ERROR)


def rank_shares(partition: str, total_rows: int, fields: list[str]) -> list[Any]:
    """Each DP rank's BatchMeta, chosen by TQ's SeqlenBalancedSampler (``get_meta``)."""
    client = tq.get_client()
    return [
        client.get_meta(
            data_fields=fields,
            batch_size=total_rows // RANKS,
            partition_id=partition,
            task_name="train",
            sampling_config={"dp_rank": r, "batch_index": 0},
        )
        for r in range(RANKS)
    ]


def micro_batches(padded: dict[str, Any]) -> list[dict[str, Any]]:
    n = len(padded["input_lengths"])
    return [
        {k: v[i : i + MICRO] if isinstance(v, torch.Tensor) else v for k, v in padded.items()}
        for i in range(0, n, MICRO)
    ]


# -- py_wire -----------------------------------------------------------------------------------


def pywire_step(
    batch: dict[str, Any], logp: dict[str, torch.Tensor], per_sample: bool = False
) -> list[list[Any]]:
    """The step through py_wire's adapter, one TQ key per group (``g<i>``) or, with
    ``per_sample``, one per sample (``s<i>``, as NeMo-RL keys its rows; each group's media
    stored once under its first key)."""
    rows = len(batch["input_ids"])
    keys = [
        f"s{i}" if per_sample else f"g{i}" for i in range(rows if per_sample else rows // GROUP)
    ]
    rollout = {k: v for k, v in batch.items() if k not in LATER}
    ptq.put(rollout, SCHEMA, keys, "grpo", group_size=GROUP, stage="logprob")
    nemo_rl.get(keys, "grpo", stage="logprob")
    ptq.write_back(keys, "grpo", {"prev_logprobs": logp["prev_logprobs"]})
    nemo_rl.get(keys, "grpo", stage="ref_logprob")
    ptq.write_back(keys, "grpo", {"reference_policy_logprobs": logp["reference_policy_logprobs"]})
    ptq.write_back(keys, "grpo", {"advantages": logp["advantages"]})
    out = []
    for meta in rank_shares("grpo", len(keys), [ptq.TEXT]):
        got = nemo_rl.get_by_meta(meta, stage="train")
        names = meta_keys(meta, "grpo")
        if per_sample:
            got["__samples__"] = [int(k[1:]) for k in names]
        else:
            got["__samples__"] = [int(k[1:]) * GROUP + j for k in names for j in range(GROUP)]
        out.append(micro_batches(got))
    return out


def meta_keys(meta: Any, partition: str) -> list[str]:
    return list(
        tq.get_client().kv_retrieve_keys(
            global_indexes=list(meta.global_indexes), partition_id=partition
        )
    )


# -- TQ's own floor -----------------------------------------------------------------------------


class TQFloor:
    """The step's TQ calls for a layout with TQ's own encoder and no py_wire: what TQ alone costs
    to store and serve the same rows under the same keys. Per-token fields as jagged nested
    tensors, scalars as dense ones, each group's images once (as py_wire stores them): per group,
    one TQ row per group (its samples' tokens end to end, its scalars ``[GROUP]``); per sample,
    one TQ row per sample and the group's images under its first key. The same puts, fetches
    and sampler calls as py_wire's step (``kv_batch_put`` / ``kv_batch_get``; no check, no
    decode)."""

    def __init__(self, batch: dict[str, Any], logp: dict[str, torch.Tensor]) -> None:
        self.rows = len(batch["input_ids"])
        self.stages = {
            s: py_wire.load_schema(SCHEMA).fields_for(s)
            for s in ("logprob", "ref_logprob", "train")
        }
        self.text = {False: self._text(batch, False), True: self._text(batch, True)}
        groups = range(0, self.rows, GROUP)
        self.media = TensorDict(
            {k: jagged([batch[k][g] for g in groups]) for k in MEDIA},
            batch_size=[len(groups)],
        )
        self.later = {
            per: {k: self._rows({k: list(logp_rows(logp[k], batch))}, per) for k in LATER}
            for per in (False, True)
        }

    def _rows(self, fields: dict[str, Any], per_sample: bool) -> TensorDict:
        out: dict[str, Any] = {}
        for k, v in fields.items():
            if isinstance(v, list):
                rows = v if per_sample else [torch.cat(v[g : g + GROUP]) for g in self._groups()]
                out[k] = jagged(rows)
            else:
                out[k] = v if per_sample else v.reshape(-1, GROUP)
        n = self.rows if per_sample else self.rows // GROUP
        return TensorDict(out, batch_size=[n])

    def _groups(self) -> range:
        return range(0, self.rows, GROUP)

    def _text(self, batch: dict[str, Any], per_sample: bool) -> TensorDict:
        fields = {k: v for k, v in batch.items() if k not in LATER and k not in MEDIA}
        return self._rows(fields, per_sample)

    def step(self, per_sample: bool) -> int:
        """One step; returns the rows the DP ranks fetched (every sample once)."""
        keys = [f"f{i}" for i in range(self.rows if per_sample else self.rows // GROUP)]
        holders = keys[::GROUP] if per_sample else keys
        text = self.text[per_sample]
        lengths = text["input_lengths"]
        tags = [{"total_lengths": int(n)} for n in (lengths if per_sample else lengths.sum(1))]
        if per_sample:
            tq.kv_batch_put(keys=holders, partition_id="grpo", fields=self.media)
            tq.kv_batch_put(keys=keys, partition_id="grpo", fields=text, tags=tags)
        else:
            both = TensorDict({**text, **self.media}, batch_size=[len(keys)])
            tq.kv_batch_put(keys=keys, partition_id="grpo", fields=both, tags=tags)
        later = self.later[per_sample]
        self._fetch(keys, holders, "logprob", per_sample)
        tq.kv_batch_put(keys=keys, partition_id="grpo", fields=later["prev_logprobs"])
        self._fetch(keys, holders, "ref_logprob", per_sample)
        for k in LATER[1:]:
            tq.kv_batch_put(keys=keys, partition_id="grpo", fields=later[k])
        fetched = 0
        for meta in rank_shares("grpo", len(keys), ["input_ids"]):
            ks = meta_keys(meta, "grpo")
            mine = sorted({f"f{int(k[1:]) // GROUP * GROUP}" for k in ks}) if per_sample else ks
            got = self._fetch(ks, mine, "train", per_sample)
            fetched += got.batch_size[0] * (1 if per_sample else GROUP)
        return fetched

    def _fetch(self, keys: list[str], holders: list[str], stage: str, per_sample: bool) -> Any:
        stored = [*self.text[False].keys(), *LATER]
        fields = [k for k in self.stages[stage] if k in stored]
        media = [k for k in self.stages[stage] if k in MEDIA]
        if not per_sample:
            fields, media = fields + media, []
        got = tq.kv_batch_get(keys=keys, partition_id="grpo", select_fields=fields)
        if media:
            tq.kv_batch_get(keys=holders, partition_id="grpo", select_fields=media)
        return got


def jagged(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nested.as_nested_tensor(rows, layout=torch.jagged)


def logp_rows(padded: torch.Tensor, batch: dict[str, Any]) -> list[torch.Tensor]:
    return [padded[i, : len(r)] for i, r in enumerate(batch["input_ids"])]


# -- NeMo-RL's wire ----------------------------------------------------------------------------


class NemoWire:
    """NeMo-RL's own wire functions, imported from its checkout."""

    def __init__(self, path: str) -> None:
        sys.path.insert(0, path)
        from nemo_rl.data.multimodal_utils import PackedTensor
        from nemo_rl.data_plane.codec import materialize, pack_jagged_fields

        self.PackedTensor = PackedTensor
        self.materialize = materialize
        self.pack = pack_jagged_fields

    def wire_fields(self, fields: dict[str, Any], lengths: torch.Tensor) -> TensorDict:
        """NeMo-RL's producer side: per-token fields jagged by ``lengths``
        (``pack_jagged_fields``), packed media as nested + ``__lengths`` (``to_nested_wire``)."""
        tensors: dict[str, Any] = {}
        media: dict[str, Any] = {}
        for k, v in fields.items():
            if k in MEDIA:
                nested, lens = self.PackedTensor(list(v), dim_to_pack=0).to_nested_wire()
                media[k], media[self.PackedTensor.lengths_key(k)] = nested, lens
            elif k in PER_TOKEN:
                tensors[k] = v if isinstance(v, torch.Tensor) else pad_rows(v)
            else:
                tensors[k] = v
        td = self.pack(tensors, lengths=lengths, token_aligned_fields=set(PER_TOKEN))
        for k, v in media.items():
            td[k] = v
        return td

    def fetch(self, keys: list[str], fields: list[str]) -> dict[str, Any]:
        select = [*fields, *(self.PackedTensor.lengths_key(k) for k in fields if k in MEDIA)]
        td = tq.kv_batch_get(keys=keys, partition_id="grpo", select_fields=select)
        data = dict(self.materialize(td, layout="padded"))
        for k in MEDIA:
            if k in data:
                lk = self.PackedTensor.lengths_key(k)
                data[k] = self.PackedTensor.from_nested_wire(data[k], data.pop(lk))
        return data

    def step(self, batch: dict[str, Any], logp: dict[str, torch.Tensor]) -> list[list[Any]]:
        n = len(batch["input_ids"])
        keys = [f"s{i}" for i in range(n)]
        lengths = batch["input_lengths"].to(torch.int64)
        rollout = {k: v for k, v in batch.items() if k not in LATER}
        tags = [{"total_lengths": int(x)} for x in lengths]
        tq.kv_batch_put(
            keys=keys, partition_id="grpo", fields=self.wire_fields(rollout, lengths), tags=tags
        )
        schema = py_wire.load_schema(SCHEMA)
        self.fetch(keys, schema.fields_for("logprob"))
        self.write(keys, {"prev_logprobs": logp["prev_logprobs"]}, lengths)
        self.fetch(keys, schema.fields_for("ref_logprob"))
        self.write(keys, {"reference_policy_logprobs": logp["reference_policy_logprobs"]}, lengths)
        self.write(keys, {"advantages": logp["advantages"]}, lengths)
        out = []
        for meta in rank_shares("grpo", n, ["input_ids"]):
            ks = meta_keys(meta, "grpo")
            got = self.fetch(ks, schema.fields_for("train"))
            got["__samples__"] = [int(k[1:]) for k in ks]
            out.append(micro_batches(got))
        return out

    def write(self, keys: list[str], fields: dict[str, Any], lengths: torch.Tensor) -> None:
        td = self.pack(fields, lengths=lengths, token_aligned_fields=set(PER_TOKEN))
        tq.kv_batch_put(keys=keys, partition_id="grpo", fields=td)


def pad_rows(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(list(rows), batch_first=True)


# -- comparison ---------------------------------------------------------------------------------


def by_sample(ranks: list[list[dict[str, Any]]]) -> dict[int, dict[str, Any]]:
    """Each sample's train tensors (rows cut to their lengths; media as the row's images)."""
    out: dict[int, dict[str, Any]] = {}
    for micro in ranks:
        samples = micro[0]["__samples__"] if micro else []
        i = 0
        for mb in micro:
            lengths = mb["input_lengths"]
            for j in range(len(lengths)):
                row: dict[str, Any] = {}
                for k, v in mb.items():
                    if k == "__samples__" or k == "attention_mask":
                        continue
                    if k in MEDIA:  # the rank's whole PackedTensor: its row i
                        segs = (
                            v.rows()[i]
                            if isinstance(v, py_wire.PackedTensor)
                            else v.slice([i]).tensors
                        )
                        row[k] = [s for s in (segs or []) if s is not None]
                    elif k in PER_TOKEN:
                        row[k] = v[j, : int(lengths[j])]
                    else:
                        row[k] = v[j]
                out[samples[i]] = row
                i += 1
    return out


def compare(a: list[list[Any]], b: list[list[Any]]) -> tuple[list[str], int]:
    """Where py_wire's samples (``a``) differ from NeMo-RL's (``b``), and how many (sample,
    field) pairs were compared."""
    sa, sb = by_sample(a), by_sample(b)
    problems = [] if set(sa) == set(sb) else [f"samples {sorted(set(sa) ^ set(sb))[:4]}"]
    compared = 0
    for s in sorted(set(sa) & set(sb)):
        if set(sa[s]) != set(sb[s]):
            problems.append(f"sample {s}: fields {sorted(set(sa[s]) ^ set(sb[s]))}")
        for k, x in sa[s].items():
            compared += 1
            y = sb[s].get(k)
            if isinstance(x, list):
                xs = torch.cat(x) if x else None
                ys = torch.cat(y) if y else None
                same = (xs is None and ys is None) or (
                    xs is not None and ys is not None and torch.equal(xs, ys)
                )
            else:
                same = y is not None and x.dtype == y.dtype and torch.equal(x, y)
            if not same:
                problems.append(f"sample {s} field {k}")
    return problems, compared


def stored_bytes(partition: str) -> int:
    """Payload bytes TQ holds for the partition (every field, every key; with per-sample keys
    the media column that only each group's first key holds, too)."""
    listed = tq.kv_list(partition).get(partition, {})
    keys = list(listed)
    total = payload_bytes(tq.kv_batch_get(keys=keys, partition_id=partition))
    holders = list(
        dict.fromkeys(t[ptq.MEDIA_HOLDER] for t in listed.values() if t.get(ptq.MEDIA_HOLDER))
    )
    if holders:
        media = tq.kv_batch_get(keys=holders, partition_id=partition, select_fields=[ptq.MEDIA])
        total += payload_bytes(media)
    return total


def payload_bytes(td: TensorDict) -> int:
    total = 0
    for name in td.keys(include_nested=True, leaves_only=False):
        v = td.get(name)
        if isinstance(v, torch.Tensor):
            total += (v.values() if v.is_nested else v).numel() * v.element_size()
        else:  # RayStore: py_wire.Frame objects (len() is the frame's bytes)
            total += sum(len(f) for f in v.tolist())
    return total


def encoded_bytes(td: TensorDict) -> int:
    """The bytes TQ's client encoder (``transfer_queue.utils.serial_utils.encode``, msgpack
    with zero-copy buffers) makes of ``td``: a jagged column goes as one buffer and one
    ``(dtype, shape)`` entry per row, a py_wire column as one frame per row."""
    from transfer_queue.utils import serial_utils

    return sum(memoryview(b).nbytes for b in serial_utils.encode(td))


def timed(
    fn: Callable[[], Any],
    reps: int,
    clear: Callable[[], None],
    extra: list[tuple[Any, str, str]] | None = None,
) -> tuple[float, Any, Where]:
    """The median of ``reps`` steps (ms), the last step's output, and where one more step's
    time went (run after the timed ones, under the wrappers)."""
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
        clear()
    with Where(extra) as where:
        t0 = time.perf_counter()
        out = fn()
        where.seconds["whole step"] = time.perf_counter() - t0 - where.book
    return statistics.median(times) * 1e3, out, where


def clear_partition() -> None:
    keys = list(tq.kv_list("grpo").get("grpo", {}))
    if keys:
        tq.kv_clear(keys=keys, partition_id="grpo")


def text_and_media_bytes(batch: dict[str, Any]) -> tuple[int, int]:
    """The batch's bytes outside the media fields (per sample) and its media bytes counted
    once per distinct tensor (a prompt's images, shared by its group)."""
    text = media = 0
    seen: set[int] = set()
    for k, v in batch.items():
        rows = v if isinstance(v, list) else [v]
        for r in rows:
            if not isinstance(r, torch.Tensor):
                continue
            if k in MEDIA:
                if r.data_ptr() not in seen:
                    seen.add(r.data_ptr())
                    media += r.numel() * r.element_size()
            else:
                text += r.numel() * r.element_size()
    return text, media


def run_backend(
    backend: str,
    nemo: NemoWire,
    floor: TQFloor,
    batch: dict[str, Any],
    logp: dict[str, Any],
    reps: int,
) -> dict[str, Any]:
    """Both sides' step on one TQ backend: times, stored bytes, the DP ranks' tensors."""
    from transfer_queue.sampler.seqlen_balanced_sampler import SeqlenBalancedSampler

    out: dict[str, Any] = {"backend": backend}
    start(SeqlenBalancedSampler(n_samples_per_prompt=1, dp_size=RANKS), backend)
    out["ours_ms"], out["ours"], out["ours_where"] = timed(
        lambda: pywire_step(batch, logp), reps, clear_partition
    )
    out["ours_bytes"] = stored_bytes("grpo")
    clear_partition()
    out["floor_ms"], out["floor"], out["floor_where"] = timed(
        lambda: floor.step(per_sample=False), reps, clear_partition
    )
    # Per-sample keys, sampled as NeMo-RL's are (n_samples_per_prompt rows per group).
    start(SeqlenBalancedSampler(n_samples_per_prompt=GROUP, dp_size=RANKS), backend)
    out["sample_ms"], out["sample"], out["sample_where"] = timed(
        lambda: pywire_step(batch, logp, per_sample=True), reps, clear_partition
    )
    out["sample_bytes"] = stored_bytes("grpo")
    clear_partition()
    out["floor_sample_ms"], out["floor_sample"], out["floor_sample_where"] = timed(
        lambda: floor.step(per_sample=True), reps, clear_partition
    )
    start(SeqlenBalancedSampler(n_samples_per_prompt=GROUP, dp_size=RANKS), backend)
    try:
        spots = [(nemo, "pack", "encode"), (nemo, "materialize", "decode")]
        out["theirs_ms"], out["theirs"], out["theirs_where"] = timed(
            lambda: nemo.step(batch, logp), reps, clear_partition, spots
        )
        out["theirs_bytes"] = stored_bytes("grpo")
    except Exception as e:  # TQ's RayStore puts tensors with NIXL, absent on CPU machines
        out["theirs_error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:100]}"
    tq.close()
    ray.shutdown()
    return out


#: The three paths the step tables list: (the results' key prefix, the row's label).
PATHS = (
    ("ours", "py_wire, a key per group"),
    ("sample", "py_wire, a key per sample"),
    ("theirs", "NeMo-RL __lengths wire"),
)


#: TQ's own floor for each layout (:class:`TQFloor`): (the results' key prefix, the row's label).
FLOORS = (
    ("floor", "TQ alone, a key per group"),
    ("floor_sample", "TQ alone, a key per sample"),
)


def main() -> None:
    global GROUP
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("nemo_rl", help="a checkout of NVIDIA-NeMo/RL's branch zhiyul/tq_vlm")
    parser.add_argument(
        "--rows",
        type=int,
        default=128,
        help="samples per step (NeMo-RL's vlm_grpo_3B.yaml: 8 prompts x 16 generations = 128)",
    )
    parser.add_argument(
        "--group", type=int, default=16, help="GRPO generations per prompt (NeMo-RL's: 16)"
    )
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument(
        "--shapes",
        choices=("recipe", "nemo-rl-builders"),
        default="recipe",
        help="recipe: py_wire's synthetic Qwen2.5-VL rows (up to 4 images of 256-2,048 patches "
        "a prompt, a quarter of prompts text-only); nemo-rl-builders: the shapes NeMo-RL's "
        "builders give (issue 48): 1-3 images of <= 1,024 patches a prompt, every prompt with "
        "images, bf16 pixels shared by the prompt's samples",
    )
    parser.add_argument(
        "--backends",
        default="SimpleStorage,RayStore",
        help="TQ storage backends, comma-separated (each side runs on each)",
    )
    args = parser.parse_args()
    GROUP = args.group
    if args.rows % (GROUP * RANKS):
        parser.error(f"--rows must be a multiple of --group x {RANKS} DP ranks")

    nemo = NemoWire(args.nemo_rl)
    if args.shapes == "nemo-rl-builders":
        batch = nemo_rl_qwen2_5_vl_batch(
            args.rows,
            group_size=GROUP,
            max_images=3,
            min_patches=64,
            max_patches=1024,
            text_only_fraction=0.0,
        )
    else:
        batch = nemo_rl_qwen2_5_vl_batch(args.rows, group_size=GROUP)
    logp = {k: pad_rows(batch[k]) for k in LATER}  # worker outputs: padded [B, W]
    rows_bytes = sum(r.numel() * r.element_size() for r in batch["pixel_values"] if r is not None)
    text, media = text_and_media_bytes({**batch, **logp})
    print(machine.describe())
    tokens = sum(len(r) for r in batch["input_ids"])
    print(
        f"shapes: {args.shapes}; {tokens} tokens ({tokens / args.rows:.0f} a row); "
        f"{sum(r.shape[0] for r in batch['image_grid_thw'][::GROUP] if r is not None)} "
        f"images in {args.rows // GROUP} prompts"
    )
    print(
        f"batch: {SCHEMA}, {args.rows} rows in groups of {GROUP}, pixel_values "
        f"{rows_bytes / 1e6:.1f} MB as the rows hold them ({media / 1e6:.1f} MB distinct), "
        f"{text / 1e6:.1f} MB of per-sample fields; {RANKS} DP ranks, micro-batches of "
        f"{MICRO}; median of {args.reps}"
    )
    # A store that keeps each prompt's media once and each sample's text once holds at least
    # text + media; a per-sample store holds text + GROUP x media.
    floor = (text + media) / (text + GROUP * media)
    print(
        f"lower bound of any per-group store against a per-sample one at groups of {GROUP}: "
        f"{floor:.3f} of the stored bytes"
    )
    tq_floor = TQFloor(batch, logp)
    results = [
        run_backend(b.strip(), nemo, tq_floor, batch, logp, args.reps)
        for b in args.backends.split(",")
    ]

    print("\n| TQ backend | path | step ms | stored MB |\n|---|---|---:|---:|")
    for r in results:
        for mode, label in (("ours", "a key per group"), ("sample", "a key per sample")):
            print(
                f"| {r['backend']} | py_wire, {label} | {r[mode + '_ms']:.0f} | "
                f"{r[mode + '_bytes'] / 1e6:.1f} |"
            )
        if "theirs_error" in r:
            print(f"| {r['backend']} | NeMo-RL __lengths wire | refused: {r['theirs_error']} | |")
        else:
            print(
                f"| {r['backend']} | NeMo-RL __lengths wire | {r['theirs_ms']:.0f} | "
                f"{r['theirs_bytes'] / 1e6:.1f} |"
            )
    print(
        "\nWhere one more step's time went (ms; TQ calls = the TQ client's puts, gets and "
        "metas; NeMo-RL's encode/decode = its pack_jagged_fields / materialize; frame reads = "
        "frames wrapped from what TQ's get returned, each checked to be its column's; tags = "
        "py_wire's tags built and read; the rest = the step's time outside every named part "
        "(argument checks, plan building, the benchmark's own loop):\n"
        "| TQ backend | path | whole step | TQ calls | encode | decode | checks | frame ops | "
        "frame reads | tags | the rest | write-back MB | TQ metas / fetches / puts |\n"
        "|---|---|" + "---:|" * 11
    )
    named = ("TQ calls", "encode", "decode", "checks", "frame ops", "frame reads", "tags")
    for r in results:
        for mode, label in (*PATHS, *FLOORS):
            w = r.get(mode + "_where")
            if w is None:
                continue
            rest = w.seconds.get("whole step", 0.0) - sum(w.seconds.get(k, 0.0) for k in named)
            cells = " | ".join(
                [
                    *(f"{w.seconds.get(k, 0.0) * 1e3:.0f}" for k in ("whole step", *named)),
                    f"{rest * 1e3:.0f}",
                ]
            )
            n = " / ".join(str(w.calls.get(k, 0)) for k in ("metas", "fetches", "puts"))
            print(f"| {r['backend']} | {label} | {cells} | {w.write_back_bytes / 1e6:.3f} | {n} |")
    baseline = next((r for r in results if "theirs_error" not in r), None)
    print(
        f"\nWrite-back payload bytes handed to TQ (each write-back's kv_batch_put; {args.rows} "
        "samples; x = of NeMo-RL's same write-back):\n| TQ backend | path | "
        + " | ".join(LATER)
        + " | total | bytes a sample |\n|---|---|"
        + "---:|" * (len(LATER) + 2)
    )
    for r in results:
        ref = r if "theirs_error" not in r else baseline
        theirs = None if ref is None else ref["theirs_where"].write_backs
        for mode, label in PATHS:
            w = r.get(mode + "_where")
            if w is None:
                continue
            cells = []
            for i, n in enumerate([*w.write_backs, w.write_back_bytes]):
                want = None if theirs is None else [*theirs, sum(theirs)][i]
                ratio = f" ({n / want:.3f}x)" if want and mode != "theirs" else ""
                cells.append(f"{n:,}{ratio}")
            per = w.write_back_bytes / args.rows
            print(f"| {r['backend']} | {label} | {' | '.join(cells)} | {per:,.0f} |")
    print(
        "\nThe same write-backs as TQ's encoder writes them for its storage units (msgpack "
        "header with each row's dtype and shape, plus the buffers: the bytes that cross):\n"
        "| TQ backend | path | "
        + " | ".join(LATER)
        + " | total |\n|---|---|"
        + "---:|" * (len(LATER) + 1)
    )
    for r in results:
        ref = r if "theirs_error" not in r else baseline
        theirs = None if ref is None else ref["theirs_where"].write_back_wire
        for mode, label in PATHS:
            w = r.get(mode + "_where")
            if w is None:
                continue
            cells = []
            for i, n in enumerate([*w.write_back_wire, sum(w.write_back_wire)]):
                want = None if theirs is None else [*theirs, sum(theirs)][i]
                ratio = f" ({n / want:.3f}x)" if want and mode != "theirs" else ""
                cells.append(f"{n:,}{ratio}")
            print(f"| {r['backend']} | {label} | {' | '.join(cells)} |")
    for r in results:
        ref = r if "theirs_error" not in r else baseline
        if ref is None:
            continue
        per_sample = ref["theirs_ms"] / r["sample_ms"]
        to_group = r["sample_ms"] / r["ours_ms"]
        wb = r["sample_where"].write_back_bytes / ref["theirs_where"].write_back_bytes
        wb_group = r["ours_where"].write_back_bytes / ref["theirs_where"].write_back_bytes
        print(
            f"{r['backend']} goals (issue 48): per-sample keys {per_sample:.1f}x NeMo-RL's wire "
            f"(goal >= 5x); per-sample {to_group:.2f}x the per-group step (goal <= 1.3x); "
            f"write-back bytes per sample {wb:.3f} / per group {wb_group:.3f} of NeMo-RL's "
            "(goal <= 1)"
        )
        floor = r["floor_sample_ms"] / r["floor_ms"]
        print(
            f"{r['backend']} TQ's own floor (the same keys, puts and fetches with TQ's encoder, "
            f"no py_wire): per group {r['floor_ms']:.0f} ms, per sample "
            f"{r['floor_sample_ms']:.0f} ms: per-sample {floor:.2f}x per-group in TQ alone; "
            f"py_wire's per-sample step {r['sample_ms'] / r['floor_sample_ms']:.2f}x TQ's "
            f"per-sample floor, its per-group step {r['ours_ms'] / r['floor_ms']:.2f}x TQ's "
            "per-group floor"
        )
    failed = False
    for r in results:
        ref = r if "theirs_error" not in r else baseline
        if ref is None:
            continue
        against = "" if ref is r else f" (against NeMo-RL on {ref['backend']})"
        print(
            f"{r['backend']}: per-sample keys {r['sample_bytes'] / r['ours_bytes']:.3f} of the "
            "per-group layout's stored bytes"
        )
        for mode, label in (("ours", "a key per group"), ("sample", "a key per sample")):
            print(
                f"{r['backend']}: py_wire, {label}: {ref['theirs_ms'] / r[mode + '_ms']:.1f}x "
                f"faster end to end, {r[mode + '_bytes'] / ref['theirs_bytes']:.3f} of the "
                f"stored bytes{against}"
            )
            problems, compared = compare(r[mode], ref["theirs"])
            fields = sorted(by_sample(r[mode])[0])
            if problems:
                failed = True
                print(f"  DIFFER: {problems[:8]} ({len(problems)} in all)")
            else:
                print(
                    f"  every DP rank's train tensors bit-equal to NeMo-RL's: {compared} "
                    f"(sample, field) pairs over {args.rows} samples, fields {fields}"
                )
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
