"""The second hop, side by side in one run: what a decoded batch costs when it moves on.

    .venv/bin/python benchmarks/second_hop.py --reps 5

On a Qwen2.5-VL GRPO batch (``grpo_shard.build``: 2 prompts x 16 generations, 4 images each,
every row its own pixels as NeMo-RL holds them with deduplication off; ~257 MB):

1. A 4-row shard of the batch decoded as NeMo-RL's objects (``py_wire.interop.nemo_rl``) against
   the same shard of the original dict: pickled bytes and ``ray.put`` time; then the same for a
   chunk of a decoded verl ``DataProto`` (real verl; the small batch of
   ``tests/interop/test_verl.py``, 48 rows) against the original's chunk.
2. A ~300 MB frame through Ray: a task's ``ray.get`` + ``decode`` under the default
   (``writable="auto"``: copy-on-write where the process may remap the store's pages) against
   ``writable="view"``; the same for a read-only ``mmap`` of a file in ``/dev/shm``.
3. Fixed micro-batches (4 rows) over one decoded frame (``iter_micro_batches``) against NeMo-RL's
   ``make_microbatch_iterator`` over a dict already in memory (its ``slice``: tensors sliced,
   ``PackedTensor.slice``), for the VLM batch and a text batch.
4. The first ``decode(layout="padded")`` in a fresh process (and, for reference, the first
   jagged one).

NeMo-RL is not installable from PyPI: its ``PackedTensor`` is ``tests/nemo_rl_model.py`` (the
same slicing rules) and its ``BatchedDataDict.slice`` is modelled below in two lines.
"""

from __future__ import annotations

import argparse
import mmap
import os
import pickle
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from pathlib import Path
from typing import Any

import machine
import ray
import torch
from grpo_shard import build
from timing import medians_ms_interleaved

import py_wire
from py_wire.synth.registry import generate

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from tests import nemo_rl_model  # noqa: E402  (the model of NeMo-RL's PackedTensor)

SCHEMA = "nemo_rl/qwen2_5_vl"


def train_batch() -> tuple[dict[str, Any], dict[str, Any]]:
    """(py_wire's batch, NeMo-RL's dict): the shard with the per-token floats a train step holds."""
    _, own, nemo = build(2, 16, 4)
    gen = torch.Generator().manual_seed(2)
    for name in ("generation_logprobs", "prev_logprobs", "advantages"):
        own[name] = [torch.randn(len(t), generator=gen) for t in own["input_ids"]]
        nemo[name] = torch.zeros(nemo["input_ids"].shape, dtype=torch.float32)
        for i, row in enumerate(own[name]):
            nemo[name][i, : len(row)] = row
    return own, nemo


def install_nemo_model() -> None:
    pkg, data = types.ModuleType("nemo_rl"), types.ModuleType("nemo_rl.data")
    sys.modules.setdefault("nemo_rl", pkg)
    sys.modules.setdefault("nemo_rl.data", data)
    sys.modules.setdefault("nemo_rl.data.multimodal_utils", nemo_rl_model)


def nemo_slice(batch: dict[str, Any], a: int, b: int) -> dict[str, Any]:
    """``BatchedDataDict.slice(a, b)``."""
    return {
        k: v.slice(list(range(a, b))) if isinstance(v, nemo_rl_model.PackedTensor) else v[a:b]
        for k, v in batch.items()
    }


def nemo_original(nemo: dict[str, Any]) -> dict[str, Any]:
    out = dict(nemo)
    for k in ("pixel_values", "image_grid_thw"):
        out[k] = nemo_rl_model.PackedTensor(nemo[k], dim_to_pack=0)
    return out


@ray.remote
def get_and_decode(refs: list[Any], writable: str) -> float:
    frame = ray.get(refs[0])
    t = time.perf_counter()
    out = py_wire.decode(frame, writable=writable)  # type: ignore[arg-type]
    float(out["reward"].sum())
    return time.perf_counter() - t


@ray.remote
def remap_path(refs: list[Any]) -> str:
    frame = ray.get(refs[0])
    return frame.copy_on_write_refusal() or "copy-on-write"


def warm_object_store() -> None:
    """Touches the object store's pages once (1 GB of puts, then freed), so that the first
    section measured does not pay the shared memory's first page faults for every other."""
    block = torch.zeros(100 * 1024**2, dtype=torch.uint8)
    refs = [ray.put(block) for _ in range(10)]  # held together: ten distinct regions
    del refs


def shard_section(reps: int) -> None:
    from py_wire.interop import nemo_rl

    own, nemo = train_batch()
    frame = py_wire.encode(own, SCHEMA)
    original = nemo_original(nemo)
    print(f"1. shard of 4 rows of a {frame.nbytes / 1e6:.1f} MB NeMo-RL batch (32 rows)")
    for source_name, source in (("Frame", frame), ("bytes", bytes(frame))):
        decoded = nemo_rl.from_frame(source)
        ours, theirs = nemo_slice(decoded, 0, 4), nemo_slice(original, 0, 4)
        compare_moves(source_name, "shard", ours, theirs, reps)


def compare_moves(source_name: str, what: str, ours: Any, theirs: Any, reps: int) -> None:
    """Pickled bytes and ``ray.put`` time of a decoded object against the original's."""
    a, b = len(pickle.dumps(ours, protocol=5)), len(pickle.dumps(theirs, protocol=5))
    times = medians_ms_interleaved(
        {"decoded": lambda: ray.put(ours), "original": lambda: ray.put(theirs)}, reps
    )
    print(
        f"   from {source_name:5}: pickled {a / 1e6:8.2f} MB vs original {what} "
        f"{b / 1e6:.2f} MB ({a / b:.2f}x); ray.put {times['decoded']:.1f} ms vs "
        f"{times['original']:.1f} ms ({times['decoded'] / times['original']:.2f}x)"
    )


def verl_section(reps: int) -> None:
    """A chunk of a decoded verl DataProto (the real class) against the same chunk of the
    original: verl's ``DataProto.chunk`` then pickle / ``ray.put``, as a driver sends chunks."""
    from py_wire.interop import verl
    from tests.interop.test_verl import verl_batch

    original = verl_batch(True, n=16)
    frame = verl.to_frame(original, "verl/qwen2_5_vl")
    print(
        f"1b. chunk of 12 rows of a {frame.nbytes / 1e6:.1f} MB verl DataProto "
        f"({len(original)} rows, Qwen2.5-VL)"
    )
    for source_name, source in (("Frame", frame), ("bytes", bytes(frame))):
        ours, theirs = verl.from_frame(source).chunk(4)[0], original.chunk(4)[0]
        compare_moves(source_name, "chunk", ours, theirs, reps)


def ray_section(reps: int) -> None:
    b = generate("qwen2_5_vl", 80, seed=1)
    frame = py_wire.encode(b, "qwen2_5_vl")
    ref = ray.put(frame)
    path = ray.get(remap_path.remote([ref]))
    print(
        f"\n2. a {frame.nbytes / 1e6:.0f} MB frame: ray.get + decode in a task "
        f"(default path here: {path})"
    )
    ends: dict[str, list[float]] = {"auto": [], "view": []}
    inner: dict[str, list[float]] = {"auto": [], "view": []}
    for _ in range(reps + 1):
        for w in ("auto", "view"):
            t = time.perf_counter()
            seconds = ray.get(get_and_decode.remote([ref], w))
            ends[w].append(time.perf_counter() - t)
            inner[w].append(seconds)

    def med(v: list[float]) -> float:
        return sorted(v[1:])[len(v[1:]) // 2] * 1e3

    print(
        f"   decode in the task: auto {med(inner['auto']):.2f} ms, view "
        f"{med(inner['view']):.2f} ms ({med(inner['auto']) / med(inner['view']):.2f}x); "
        f"end to end auto {med(ends['auto']):.1f} ms, view {med(ends['view']):.1f} ms "
        f"({med(ends['auto']) / med(ends['view']):.2f}x)"
    )
    shm = Path("/dev/shm") if Path("/dev/shm").is_dir() else Path(tempfile.gettempdir())
    file = shm / f"py_wire_second_hop_{os.getpid()}.frame"
    py_wire.save(frame, file)
    try:
        with open(file, "rb") as f:
            source = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        wrapped = py_wire.Frame.from_buffer(source)
        times = medians_ms_interleaved(
            {
                "auto": lambda: py_wire.decode(source),
                "view": lambda: py_wire.decode(source, writable="view"),
                "copy": lambda: py_wire.decode(source, writable="copy"),
            },
            reps,
        )
        print(
            f"   read-only mmap of {file.parent}: auto {times['auto']:.2f} ms "
            f"({wrapped.copy_on_write_refusal() or 'copy-on-write'}), view "
            f"{times['view']:.2f} ms ({times['auto'] / times['view']:.2f}x), a private copy "
            f"{times['copy']:.1f} ms"
        )
        del wrapped
        source.close()
    finally:
        file.unlink()


def micro_section(reps: int) -> None:
    from py_wire.interop import nemo_rl

    print("\n3. fixed micro-batches of 4 rows over one decoded batch")
    own, _ = train_batch()
    vlm = py_wire.encode(own, SCHEMA)
    text = py_wire.encode(generate("nemo_rl/text", 32, seed=1), "nemo_rl/text")
    for name, frame in (("VLM", vlm), ("text", text)):
        in_memory = nemo_rl.from_frame(frame)
        rows = frame.num_rows
        batches = py_wire.trainer.iter_micro_batches(frame, 4, layout="padded")

        def nemo_iter(batch: dict[str, Any] = in_memory, rows: int = rows) -> None:
            for a in range(0, rows, 4):
                nemo_slice(batch, a, a + 4)

        def ours(mbs: Any = batches) -> None:
            for _ in mbs:
                pass

        def ours_with_decode(f: py_wire.Frame = frame) -> None:
            for _ in py_wire.trainer.iter_micro_batches(f, 4, layout="padded"):
                pass

        def rows_decode(f: py_wire.Frame = frame, rows: int = rows) -> None:
            for a in range(0, rows, 4):
                py_wire.decode(f, rows=range(a, a + 4), layout="padded")

        t = medians_ms_interleaved(
            {"nemo": nemo_iter, "ours": ours, "decode+ours": ours_with_decode, "rows": rows_decode},
            reps * 4,
        )
        print(
            f"   {name:4}: NeMo-RL slice iterator {t['nemo']:.2f} ms; py_wire views "
            f"{t['ours']:.2f} ms ({t['ours'] / t['nemo']:.2f}x); decode once + views "
            f"{t['decode+ours']:.2f} ms ({t['decode+ours'] / t['nemo']:.2f}x); "
            f"decode(rows=) per micro-batch {t['rows']:.2f} ms"
        )


COLD = textwrap.dedent(
    """
    import sys, time
    import py_wire
    from py_wire.synth.registry import generate
    raw = bytes(py_wire.encode(generate("qwen2_5_vl", 8, seed=1), "qwen2_5_vl"))
    t = time.perf_counter()
    py_wire.decode(raw, layout=sys.argv[1])
    print((time.perf_counter() - t) * 1e3)
    """
)


def cold_section() -> None:
    print("\n4. the first decode in a fresh process (after import py_wire)")
    for layout in ("padded", "nested"):
        runs = [
            float(subprocess.check_output([sys.executable, "-c", COLD, layout], text=True))
            for _ in range(3)
        ]
        print(f"   layout={layout:6}: " + ", ".join(f"{ms:.0f} ms" for ms in runs))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    install_nemo_model()
    print(machine.describe(), "\n")
    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        object_store_memory=1200 * 1024**2,
    )
    try:
        warm_object_store()
        shard_section(args.reps)
        verl_section(args.reps)
        ray_section(args.reps)
    finally:
        ray.shutdown()
    micro_section(args.reps)
    cold_section()


if __name__ == "__main__":
    main()
