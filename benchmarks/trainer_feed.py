"""The trainer's end, side by side in one run with NeMo-RL's real ``BatchedDataDict`` (issue 29).

    .venv/bin/python benchmarks/trainer_feed.py --nemo-rl /path/to/NeMo-RL/checkout --reps 20

NeMo-RL is not on PyPI: pass a checkout (``git clone https://github.com/NVIDIA-NeMo/RL``); its
``nemo_rl.distributed.batched_data_dict`` is imported from there, unmodified. That module's
imports reach ``nemo_rl.data.multimodal_utils``, which imports Pillow and transformers at module
level for image and audio loading; when one is not installed, an empty stand-in module is put in
``sys.modules`` (nothing measured calls into it) and the run says so.

On a GRPO batch of Qwen2.5-VL (``grpo_shard.build``: ``--prompts`` x ``--group`` rows,
``--images`` images a prompt, every row its own pixels as NeMo-RL holds them with deduplication
off; per-token ``generation_logprobs``, ``prev_logprobs`` and ``advantages``, NeMo-RL's
advantages ``expand``ed over ``[B, L]``):

1. micro-batches of ``--micro`` rows: ``BatchedDataDict.make_microbatch_iterator`` over the batch
   already in memory against ``py_wire.trainer.iter_micro_batches`` over one decoded frame
   (default jagged layout, and padded), pre-decoded and including the decode; and
   ``py_wire.interop.nemo_rl.iter_micro_batches`` (NeMo-RL's shapes, decode included), with and
   without ``per_micro_batch_width`` (the padded cells it saves);
2. what NeMo-RL's shapes look like: ``nemo_rl.from_frame`` against the original dict, bit for
   bit on valid and padded cells;
3. pickled bytes of a micro-batch, a row window and a packed row against their own bytes;
4. ``decode`` of a 1-row and a 1k-row frame (``compact_frames.batch``), warm, beside the wrap
   and a memcpy of the same bytes;
5. the first default decode in a fresh process (``import py_wire`` not counted).

One thread (``torch.set_num_threads(1)``, ``PY_WIRE_THREADS=1``). "torch's floor" is the jagged
constructors a jagged micro-batch needs (one per per-token field), timed alone.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pickle
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import machine
import torch
from compact_frames import batch as small_batch
from grpo_shard import build
from timing import medians_ms_interleaved

import py_wire
from py_wire._jagged import jagged as jagged_tensor
from py_wire.interop import nemo_rl as nemo_interop

SCHEMA = "nemo_rl/qwen2_5_vl"
STUBBED: list[str] = []


STAND_INS = (
    ("PIL", {"Image": types.SimpleNamespace(Image=object)}),
    ("requests", {}),
    ("transformers", {"PreTrainedTokenizerBase": object}),
    ("transformers.audio_utils", {"load_audio": None}),
    ("transformers.video_utils", {"load_video": None}),
)


def import_batched_data_dict(checkout: Path) -> Any:
    """NeMo-RL's ``BatchedDataDict`` from ``checkout``, unmodified. Where an installed
    transformers lacks a name NeMo-RL's media loaders import, every stand-in is used."""
    sys.path.insert(0, str(checkout))
    for module, attrs in STAND_INS:
        try:
            importlib.import_module(module)
        except Exception:  # any import failure: stand in for it
            _stand_in(module, attrs)
    try:
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict
    except ImportError:
        for name in [m for m in sys.modules if m.split(".")[0] == "nemo_rl"]:
            del sys.modules[name]
        for module, attrs in STAND_INS:
            if module not in STUBBED:
                _stand_in(module, attrs)
        from nemo_rl.distributed.batched_data_dict import BatchedDataDict

    return BatchedDataDict


def _stand_in(module: str, attrs: dict[str, Any]) -> None:
    stub = types.ModuleType(module)
    stub.__dict__.update(attrs)
    sys.modules[module] = stub
    STUBBED.append(module)


def train_batch(prompts: int, group: int, images: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(py_wire's rows, NeMo-RL's padded dict) with the per-token floats a train step holds."""
    _, own, nemo = build(prompts, group, images)
    gen = torch.Generator().manual_seed(2)
    rows, width = nemo["input_ids"].shape
    lengths = own["input_lengths"].tolist()
    for name in ("generation_logprobs", "prev_logprobs"):
        own[name] = [torch.randn(n, generator=gen) for n in lengths]
        nemo[name] = torch.zeros((rows, width))
        for i, row in enumerate(own[name]):
            nemo[name][i, : len(row)] = row
    per_sample = torch.randn(rows, generator=gen)
    nemo["advantages"] = per_sample.unsqueeze(-1).expand(rows, width)  # GRPO's estimators
    own["advantages"] = [per_sample[i].expand(n).clone() for i, n in enumerate(lengths)]
    return own, nemo


def nemo_packed(nemo: dict[str, Any]) -> dict[str, Any]:
    from nemo_rl.data.multimodal_utils import PackedTensor

    out = dict(nemo)
    for k in ("pixel_values", "image_grid_thw"):
        out[k] = PackedTensor(nemo[k], dim_to_pack=0)
    return out


def micro_section(bdd: Any, frame: py_wire.Frame, micro: int, reps: int) -> None:
    rows = frame.num_rows
    print(f"1. micro-batches of {micro} rows over a {rows}-row batch ({frame.nbytes / 1e6:.0f} MB)")
    trainer = py_wire.trainer
    jagged = trainer.iter_micro_batches(frame, micro)
    padded = trainer.iter_micro_batches(frame, micro, layout="padded")

    def consume(batches: Any) -> None:
        for mb in batches:
            for _ in mb.values():
                pass

    # torch's floor for jagged micro-batches: only the jagged constructors a micro-batch needs
    # (one per per-token field, over tensors that already exist), nothing else.
    first = next(iter(jagged))
    fields = [v for v in first.values() if isinstance(v, torch.Tensor) and v.is_nested]
    values = [v.values() for v in fields]
    offsets = fields[0].offsets()
    constructors = len(values) * len(jagged)

    def floor() -> None:
        for _ in range(len(jagged)):
            own = offsets.clone()  # each micro-batch's own offsets: a new ragged dim
            for v in values:
                jagged_tensor(v, own)

    fns = {
        "nemo": lambda: consume(bdd.make_microbatch_iterator(micro)),
        "floor": floor,
        "jagged": lambda: consume(jagged),
        "jagged+decode": lambda: consume(trainer.iter_micro_batches(frame, micro)),
        "padded": lambda: consume(padded),
        "padded+decode": lambda: consume(trainer.iter_micro_batches(frame, micro, layout="padded")),
        "nemo_rl": lambda: consume(nemo_interop.iter_micro_batches(frame, micro)),
        "nemo_rl narrow": lambda: consume(
            nemo_interop.iter_micro_batches(frame, micro, per_micro_batch_width=True)
        ),
    }
    # The floor of the padded micro-batches' decode: one memcpy of the padded bytes they hold.
    padded_bytes = sum(
        v.nbytes
        for mb in nemo_interop.iter_micro_batches(frame, micro)
        for v in mb.values()
        if isinstance(v, torch.Tensor) and v.dim() > 1
    )
    src = torch.empty(padded_bytes, dtype=torch.uint8)
    dst = torch.empty(padded_bytes, dtype=torch.uint8)
    fns["memcpy"] = lambda: dst.copy_(src)
    t = medians_ms_interleaved(fns, reps)
    base = t["nemo"]
    print(f"   NeMo-RL make_microbatch_iterator({micro}), in memory: {base:.3f} ms")
    print(
        f"   one memcpy of the padded bytes they return ({padded_bytes / 1e6:.1f} MB): "
        f"{t['memcpy']:.3f} ms ({t['memcpy'] / base:.2f}x)"
    )
    for name, label in (
        ("floor", f"torch's floor: {constructors} jagged constructors alone"),
        ("jagged", "py_wire jagged (default layout), pre-decoded"),
        ("jagged+decode", "py_wire jagged, including the decode"),
        ("padded", "py_wire padded, pre-decoded"),
        ("padded+decode", "py_wire padded, including the decode"),
        ("nemo_rl", "nemo_rl.iter_micro_batches (NeMo-RL shapes), with decode"),
        ("nemo_rl narrow", "  ... per_micro_batch_width=True"),
    ):
        print(f"   {label:58} {t[name]:8.3f} ms  {t[name] / base:6.2f}x")
    print(
        f"   jagged against torch's floor: {t['jagged'] / t['floor']:.2f}x pre-decoded, "
        f"{t['jagged+decode'] / t['floor']:.2f}x with the decode; nemo_rl.iter_micro_batches "
        f"against the memcpy: {t['nemo_rl'] / t['memcpy']:.2f}x"
    )
    full = sum(mb["input_ids"].numel() for mb in nemo_interop.iter_micro_batches(frame, micro))
    narrow = sum(
        mb["input_ids"].numel()
        for mb in nemo_interop.iter_micro_batches(frame, micro, per_micro_batch_width=True)
    )
    print(
        f"   per_micro_batch_width=True: {narrow:,} padded cells per field against {full:,} "
        f"at the batch's width ({1 - narrow / full:.1%} fewer)"
    )


def shapes_section(frame: py_wire.Frame, original: dict[str, Any]) -> None:
    out = nemo_interop.from_frame(frame)
    same = []
    for k, v in original.items():
        if isinstance(v, torch.Tensor):
            same.append(
                f"{k} {tuple(out[k].shape)} {'equal' if torch.equal(out[k], v) else 'DIFFER'}"
            )
    print("\n2. nemo_rl.from_frame against the original dict (valid and padded cells):")
    print("   " + "; ".join(same))


def pickle_section(frame: py_wire.Frame, micro: int) -> None:
    print("\n3. pickled bytes against their own bytes (pickle protocol 5)")
    mb = next(iter(py_wire.trainer.iter_micro_batches(frame, micro)))
    window = py_wire.decode(frame, rows=range(0, micro))
    row = py_wire.decode(frame)["pixel_values"][0]

    nemo_mb = next(iter(nemo_interop.iter_micro_batches(frame, micro)))

    def own_bytes(value: Any) -> int:
        if isinstance(value, torch.Tensor):
            return own_bytes([value.values(), value.offsets()]) if value.is_nested else value.nbytes
        if isinstance(value, py_wire.PackedTensor):
            return sum(t.nbytes for t in value.segments)
        if hasattr(value, "tensors") and hasattr(value, "dim_to_pack"):  # NeMo-RL's
            return own_bytes([t for t in value.tensors if t is not None])
        if hasattr(value, "data") and isinstance(value.data, dict):  # a BatchedDataDict
            return own_bytes(value.data)
        if isinstance(value, dict):
            return sum(own_bytes(v) for v in value.values())
        if isinstance(value, list | tuple):
            return sum(own_bytes(v) for v in value)
        return 0

    for name, value in (
        (f"micro-batch of {micro} rows", mb),
        (f"nemo_rl micro-batch of {micro}", nemo_mb),
        (f"decode(rows=range(0, {micro}))", window),
        ("pixel_values row 0", row),
    ):
        size, own = len(pickle.dumps(value, protocol=5)), own_bytes(value)
        print(
            f"   {name:30} {size / 1e6:9.3f} MB pickled, {own / 1e6:9.3f} MB own "
            f"({size / own:.3f}x)"
        )


def small_section(reps: int) -> None:
    print("\n4. decode of small frames, warm (text_grpo, 16 tokens a row), medians in us")
    for rows in (1, 1000):
        frame = py_wire.encode(small_batch(rows), "text_grpo")
        raw = bytes(frame)
        dst = bytearray(len(raw))
        t = medians_ms_interleaved(
            {
                "decode": lambda f=frame: py_wire.decode(f),
                "decode(bytes)": lambda r=raw: py_wire.decode(r),
                "wrap": lambda r=raw: py_wire.Frame.from_buffer(r),
                "memcpy": lambda r=raw, d=dst: d.__setitem__(slice(None), r),
            },
            reps * 50,
        )
        print(
            f"   {rows:5} rows ({len(raw):7} B): decode {t['decode'] * 1e3:7.1f}, "
            f"decode of bytes {t['decode(bytes)'] * 1e3:7.1f}, wrap {t['wrap'] * 1e3:6.1f}, "
            f"memcpy {t['memcpy'] * 1e3:6.1f}"
        )
    print("   layout='padded' (what NeMo-RL takes), against one memcpy of the bytes it returns:")
    for rows, tokens in ((1, 16), (1000, 16), (1000, 1024)):
        frame = py_wire.encode(small_batch(rows, tokens), "text_grpo")
        padded = py_wire.decode(frame, layout="padded")
        nbytes = sum(v.nbytes for v in padded.values() if isinstance(v, torch.Tensor))
        src, dst = torch.empty(nbytes, dtype=torch.uint8), torch.empty(nbytes, dtype=torch.uint8)
        t = medians_ms_interleaved(
            {
                "padded": lambda f=frame: py_wire.decode(f, layout="padded"),
                "memcpy": lambda s=src, d=dst: d.copy_(s),
            },
            reps * 50 if tokens <= 16 else reps * 5,
        )
        print(
            f"   {rows:5} rows of {tokens:4} tokens ({nbytes / 1e3:8.1f} kB padded): "
            f"decode {t['padded'] * 1e3:8.1f}, memcpy {t['memcpy'] * 1e3:7.1f} "
            f"({t['padded'] / t['memcpy']:.1f}x)"
        )


def floor_section(reps: int, micro: int) -> None:
    """Issue 48's floor for padded micro-batches: what any decoder must do to hand a trainer
    padded micro-batches from a jagged frame is write the padded bytes once (one glibc memcpy:
    numpy's ``copyto`` into a buffer written once before, transparent huge pages off for it)
    and slice a padded dict into micro-batches (what NeMo-RL's iterator does)."""
    import numpy as np

    multiarray = getattr(np, "_core", np).multiarray
    with_hugepages = multiarray._get_madvise_hugepage()  # type: ignore[attr-defined]
    multiarray._set_madvise_hugepage(False)  # type: ignore[attr-defined]
    print(
        f"\n6. frame -> every padded micro-batch of {micro} rows (1,024 rows of text_grpo, "
        "decode included) against the floor: one memcpy of the padded bytes + slicing a "
        "padded dict (issue 48: 1.3x at 1,024 tokens a row, 1.5x at 16)"
    )
    try:
        for tokens, goal in ((1024, 1.3), (16, 1.5)):
            frame = py_wire.encode(small_batch(1024, tokens), "text_grpo")
            padded = py_wire.decode(frame, layout="padded")
            tensors = {k: v for k, v in padded.items() if isinstance(v, torch.Tensor)}
            nbytes = sum(v.nbytes for v in tensors.values())
            src = np.ones(nbytes, dtype=np.uint8)
            dst = np.ones(nbytes, dtype=np.uint8)  # written once: its pages are faulted in

            def slices(d: dict[str, torch.Tensor] = tensors) -> None:
                n = len(next(iter(d.values())))
                for i in range(0, n, micro):
                    {k: v[i : i + micro] for k, v in d.items()}

            def floor(s: Any = src, d: Any = dst) -> None:
                np.copyto(d, s)
                slices()

            t = medians_ms_interleaved(
                {
                    "ours": lambda f=frame: [
                        None for _ in py_wire.trainer.iter_micro_batches(f, micro, layout="padded")
                    ],
                    "memcpy": lambda s=src, d=dst: np.copyto(d, s),
                    "slices": slices,
                    "floor": floor,
                },
                reps * (5 if tokens > 16 else 20),
            )
            print(
                f"   {tokens:4} tokens a row ({nbytes / 1e6:6.2f} MB padded): py_wire "
                f"{t['ours']:7.3f} ms; memcpy {t['memcpy']:7.3f} + slicing {t['slices']:6.3f} "
                f"= floor {t['floor']:7.3f} ms; {t['ours'] / t['floor']:.2f}x the floor "
                f"(goal <= {goal}x)"
            )
        one = py_wire.encode(small_batch(1, 16), "text_grpo")
        t = medians_ms_interleaved(
            {"padded": lambda: py_wire.decode(one, layout="padded")}, reps * 50
        )
        print(f"   warm 1-row padded decode: {t['padded'] * 1e3:.1f} us (goal <= 50 us)")
    finally:
        multiarray._set_madvise_hugepage(with_hugepages)  # type: ignore[attr-defined]


TEXT_SCHEMA = "nemo_rl/text"


def text_batch(rows: int, longest: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """NeMo-RL's padded GRPO train data for text (``nemo_rl/text``'s fields, its dtypes): rows of
    ``longest // 4`` to ``longest`` tokens padded to the longest, int32 lengths, advantages
    ``expand``ed over ``[B, L]`` as its estimators return them."""
    gen = torch.Generator().manual_seed(seed)
    lengths = torch.randint(longest // 4, longest + 1, (rows,), generator=gen)
    width = int(lengths.max())
    mask = torch.arange(width) < lengths[:, None]
    per_sample = torch.randn(rows, generator=gen)

    def padded(values: torch.Tensor) -> torch.Tensor:  # pad value 0 (+0.0), as NeMo-RL pads
        return torch.where(mask, values, torch.zeros((), dtype=values.dtype))

    return {
        "input_ids": padded(torch.randint(1, 150_000, (rows, width), generator=gen)),
        "input_lengths": lengths.to(torch.int32),
        "token_mask": mask.to(torch.int64),
        "sample_mask": torch.ones(rows),
        "advantages": per_sample.unsqueeze(-1).expand(rows, width),
        "generation_logprobs": padded(torch.randn(rows, width, generator=gen)),
        "prev_logprobs": padded(torch.randn(rows, width, generator=gen)),
    }


def _touch(batches: Any) -> int:
    """Iterate micro-batches as a trainer loop does, touching each value once."""
    n = 0
    for mb in batches:
        for _ in mb.values():
            n += 1
    return n


def ray_section(
    checkout: Path, reps: int, micro: int, rows: int = 1024, longest: int = 1024
) -> None:
    """Issue 48: the whole path on one node. NeMo-RL: the rollout actor returns its padded
    ``BatchedDataDict`` (a Ray object), the trainer actor fetches it and runs
    ``make_microbatch_iterator``. py_wire: the rollout returns the frame of that batch, the
    trainer fetches it and runs ``nemo_rl.iter_micro_batches``. Timed at the driver from the
    rollout call to the trainer's return; the bytes each object takes in the object store are
    Ray's own count (its serializer's ``total_bytes``)."""
    import ray

    here = str(Path(__file__).resolve().parent)
    root = str(Path(__file__).resolve().parent.parent)
    path = os.pathsep.join([here, root, str(checkout), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path, "PY_WIRE_THREADS": "1", "OMP_NUM_THREADS": "1"}

    @ray.remote
    class Rollout:
        def __init__(self) -> None:
            import_batched_data_dict(checkout)
            from nemo_rl.distributed.batched_data_dict import BatchedDataDict

            torch.set_num_threads(1)
            self.batch = BatchedDataDict(text_batch(rows, longest))
            self.frame = nemo_interop.to_frame(self.batch, TEXT_SCHEMA)

        def nemo(self) -> Any:
            return self.batch

        def frame_of(self) -> py_wire.Frame:
            return self.frame

        def encoded(self) -> py_wire.Frame:
            return nemo_interop.to_frame(self.batch, TEXT_SCHEMA)

        def store_bytes(self) -> tuple[int, int]:
            from ray._private.worker import global_worker

            context = global_worker.get_serialization_context()
            return (
                context.serialize(self.batch).total_bytes,
                context.serialize(self.frame).total_bytes,
            )

    @ray.remote
    class Trainer:
        def __init__(self) -> None:
            import_batched_data_dict(checkout)
            torch.set_num_threads(1)

        def nemo(self, refs: list[Any]) -> int:
            return _touch(ray.get(refs[0]).make_microbatch_iterator(micro))

        def wire(self, refs: list[Any]) -> int:
            return _touch(nemo_interop.iter_micro_batches(ray.get(refs[0]), micro))

        def equal(self, refs: list[Any]) -> bool:
            nemo, frame = ray.get(refs)
            ours = nemo_interop.iter_micro_batches(frame, micro)
            for a, b in zip(nemo.make_microbatch_iterator(micro), ours, strict=True):
                for k, v in a.items():
                    w = b[k]
                    if not torch.equal(v.contiguous().view(torch.uint8), w.view(torch.uint8)):
                        return False
            return True

    ray.init(
        address="local",
        num_cpus=4,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        runtime_env={"env_vars": env},
    )
    try:
        rollout, trainer = Rollout.remote(), Trainer.remote()  # type: ignore[attr-defined]
        nemo_bytes, frame_bytes = ray.get(rollout.store_bytes.remote())
        same = ray.get(trainer.equal.remote([rollout.nemo.remote(), rollout.frame_of.remote()]))
        t = medians_ms_interleaved(
            {
                "nemo": lambda: ray.get(trainer.nemo.remote([rollout.nemo.remote()])),
                "wire": lambda: ray.get(trainer.wire.remote([rollout.frame_of.remote()])),
                "wire+encode": lambda: ray.get(trainer.wire.remote([rollout.encoded.remote()])),
            },
            reps,
        )
    finally:
        ray.shutdown()
    print(
        f"\n7. the whole path on one node, two Ray actors ({rows} rows of {longest // 4}-{longest} "
        f"tokens, {TEXT_SCHEMA}, micro-batches of {micro}; issue 48: py_wire no slower)"
    )
    print(
        f"   NeMo-RL: padded BatchedDataDict as a Ray object -> fetch -> make_microbatch_iterator: "
        f"{t['nemo']:8.2f} ms, {nemo_bytes / 1e6:6.2f} MB through the object store"
    )
    print(
        f"   py_wire: frame as a Ray object -> fetch -> nemo_rl.iter_micro_batches:            "
        f"{t['wire']:8.2f} ms, {frame_bytes / 1e6:6.2f} MB ({t['wire'] / t['nemo']:.2f}x the time)"
    )
    print(
        f"   py_wire, the rollout's to_frame included:                                       "
        f"{t['wire+encode']:8.2f} ms ({t['wire+encode'] / t['nemo']:.2f}x)"
    )
    print(f"   every micro-batch bit for bit NeMo-RL's: {same}")


def device_section(reps: int, micro: int, rows: int = 1024, longest: int = 1024) -> None:
    """Issue 48 item 5: micro-batches padded on the device from the jagged bytes copied once
    (``pad_on_device=True``) against the H2D copy of those bytes alone (pinned, one copy), and
    the bytes NeMo-RL's padded batch would move instead."""
    print(
        f"\n8. padded on the device: {rows} rows of {longest // 4}-{longest} tokens "
        f"({TEXT_SCHEMA}), micro-batches of {micro} (issue 48: within 1.2x of the H2D copy)"
    )
    if not torch.cuda.is_available():
        print("   no CUDA device: not measured (tests/trainer/test_micro.py runs the path on CPU)")
        return
    batch = text_batch(rows, longest)
    frame = nemo_interop.to_frame(batch, TEXT_SCHEMA)
    host = torch.frombuffer(frame, dtype=torch.uint8).pin_memory()
    padded = sum(v.nbytes for v in batch.values() if v.dim() == 2 and v.stride(-1) == 1)

    def h2d() -> None:
        host.to("cuda", non_blocking=True)
        torch.cuda.synchronize()

    def on_device() -> None:
        for mb in py_wire.trainer.iter_micro_batches(
            frame, micro, layout="padded", device="cuda", pin_memory=True, pad_on_device=True
        ):
            for _ in mb.values():
                pass
        torch.cuda.synchronize()

    t = medians_ms_interleaved({"h2d": h2d, "ours": on_device}, reps)
    print(
        f"   H2D of the jagged bytes ({frame.nbytes / 1e6:.2f} MB; NeMo-RL's padded batch: "
        f"{padded / 1e6:.2f} MB): {t['h2d']:.3f} ms; padded micro-batches on the device: "
        f"{t['ours']:.3f} ms ({t['ours'] / t['h2d']:.2f}x, goal <= 1.2x); "
        f"{torch.cuda.get_device_name()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nemo-rl", type=Path, required=True, help="a NeMo-RL checkout")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--prompts", type=int, default=4)
    parser.add_argument("--group", type=int, default=16)
    parser.add_argument("--images", type=int, default=1)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument(
        "--floor-only",
        action="store_true",
        help="only sections 6-8 (issue 48's figures: the floor, the Ray whole path, the device)",
    )
    args = parser.parse_args()
    # One thread, as the other side-by-side scripts: on a loaded machine torch's intra-op pool
    # turns a 0.3 ms elementwise pass into 12 ms.
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    torch.set_num_threads(1)
    if args.floor_only:
        print(machine.describe())
        floor_section(args.reps, args.micro)
        ray_section(args.nemo_rl, args.reps, args.micro)
        device_section(args.reps, args.micro)
        return
    bdd_class = import_batched_data_dict(args.nemo_rl)
    # The checkout's own commit: not that of a repository it merely sits inside.
    top, _, commit = subprocess.run(
        ["git", "-C", str(args.nemo_rl), "rev-parse", "--show-toplevel", "--short", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.partition("\n")
    if not top or Path(top).resolve() != args.nemo_rl.resolve():
        commit = ""
    commit = commit.strip()
    print(machine.describe())
    print(
        f"NeMo-RL {args.nemo_rl} ({commit or 'not a git checkout'}); stand-ins for modules "
        f"not installed: {', '.join(STUBBED) or 'none'}\n"
    )
    own, nemo = train_batch(args.prompts, args.group, args.images)
    frame = nemo_interop.to_frame(nemo_packed(nemo), SCHEMA)
    original = nemo_packed(nemo)
    bdd = bdd_class(original)
    del own
    micro_section(bdd, frame, args.micro, args.reps)
    shapes_section(frame, original)
    pickle_section(frame, args.micro)
    small_section(args.reps)
    floor_section(args.reps, args.micro)
    ray_section(args.nemo_rl, args.reps, args.micro)
    device_section(args.reps, args.micro)
    try:
        from second_hop import cold_section  # imports Ray: here, so stage_overlap.py runs without
    except ImportError as e:
        print(f"\n5. the first decode in a fresh process: skipped ({e})")
        return
    cold_section()


if __name__ == "__main__":
    main()
