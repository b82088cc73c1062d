"""Micro-batches onto the GPU while the trainer computes (issue 29), side by side in one run.

    .venv/bin/python benchmarks/stage_overlap.py --prompts 16 --group 8 --micro 8 --reps 5

On a GRPO train batch of Qwen2.5-VL (``trainer_feed.train_batch``: ``--prompts`` x ``--group``
rows with their own pixels and per-token floats), encoded with ``nemo_rl/qwen2_5_vl``:

1. Throughput of the bytes each micro-batch puts on the device: the copy engine's floor (one
   pinned host buffer per micro-batch, ``copy_(non_blocking=True)``, the ``cudaMemcpyAsync`` of
   those bytes), against ``py_wire.trainer.iter_micro_batches(frame, micro, device="cuda")``
   with ``pin_memory=True`` and without, and against moving each micro-batch after the fact
   (``py_wire.trainer.to`` per micro-batch, one transfer per field: what a trainer does with a
   CPU iterator);
2. Overlap: a step of bf16 matmuls standing in for the forward and backward, sized to take
   ``--step-ratio`` times one micro-batch's copy, run after each micro-batch. The steps alone
   (their data already on the device), the staged iterator with the steps, and the serial
   baseline (copy, wait, compute). "hidden" is the share of the feed's own time that does not
   add to the steps' time: ``(feed + steps - staged_with_steps) / feed``.

Each figure is a median of ``--reps`` whole passes over the batch, timed from the first
``next`` to a ``torch.cuda.synchronize`` after the last step. Needs CUDA; prints a note and
exits 0 without it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import machine
import torch
from trainer_feed import train_batch

import py_wire
from py_wire._native import pack_into
from py_wire._staging import Stager, _plan, packing

SCHEMA = "nemo_rl/qwen2_5_vl"


def sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


def cuda_ms(fn: Callable[[], Any], reps: int) -> float:
    fn()
    sync()
    times = []
    for _ in range(reps):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e3


def consume(batch: dict[str, Any], sink: torch.Tensor) -> None:
    """Reads the micro-batch on the device (so a step depends on its copy)."""
    sink += batch["input_ids"].values()[:1].to(torch.float32).sum()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=16)
    parser.add_argument("--group", type=int, default=8)
    parser.add_argument("--images", type=int, default=1)
    parser.add_argument("--micro", type=int, default=8)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--step-ratio", type=float, default=1.5)
    parser.add_argument("--matmul", type=int, default=4096, help="the step's square matmul size")
    parser.add_argument(
        "--device", default="cuda", help="cpu: a dry run of the script's logic (no figures)"
    )
    args = parser.parse_args()
    if args.device == "cuda" and not torch.cuda.is_available():
        print("stage_overlap.py: no CUDA device here; skipped")
        return
    dev = torch.device(args.device)
    pin = dev.type == "cuda"
    torch.set_num_threads(1)
    threads = os.environ.get("PY_WIRE_THREADS") or str(len(os.sched_getaffinity(0)))
    own, _ = train_batch(args.prompts, args.group, args.images)
    frame = py_wire.encode(own, py_wire.load_schema(SCHEMA), stage="train", threads=1)
    del own
    trainer = py_wire.trainer

    # The bytes each micro-batch puts on the device, as the stager packs them.
    host_batches = list(trainer.iter_micro_batches(frame, args.micro))
    stager = Stager(dev)
    sizes = [stager.stage(mb)[2].numel() for mb in host_batches]
    total = sum(sizes)
    pinned = [torch.empty(n, dtype=torch.uint8, pin_memory=pin) for n in sizes]
    on_device = [torch.empty(n, dtype=torch.uint8, device=dev) for n in sizes]
    os.environ["PY_WIRE_THREADS"] = threads
    print(machine.describe())
    name = torch.cuda.get_device_name() if pin else str(dev)
    print(
        f"{name}; torch {torch.__version__}; frame "
        f"{frame.nbytes / 1e6:.1f} MB, {frame.num_rows} rows, {len(sizes)} micro-batches of "
        f"{args.micro} rows, {total / 1e6:.1f} MB staged ({min(sizes) / 1e6:.2f}-"
        f"{max(sizes) / 1e6:.2f} MB each); py_wire copy threads {threads}, torch threads 1; "
        f"medians of {args.reps}\n"
    )

    def floor() -> None:
        for src, dst in zip(pinned, on_device, strict=True):
            dst.copy_(src, non_blocking=True)

    def staged(pin: bool) -> Callable[[], None]:
        def run() -> None:
            sink = torch.zeros((), device=dev)
            for mb in trainer.iter_micro_batches(frame, args.micro, device=dev, pin_memory=pin):
                consume(mb, sink)

        return run

    plans = []
    for mb in host_batches:
        leaves: list[torch.Tensor] = []
        _plan(mb, leaves, {})
        plans.append((leaves, packing(leaves)[0]))

    def pack_alone() -> None:
        for (leaves, offsets), buf in zip(plans, pinned, strict=True):
            pack_into(leaves, offsets, buf.numpy())

    def one_thread() -> None:
        os.environ["PY_WIRE_THREADS"] = "1"
        try:
            staged(pin)()
        finally:
            os.environ["PY_WIRE_THREADS"] = threads

    def after_the_fact() -> None:
        sink = torch.zeros((), device=dev)
        for mb in trainer.iter_micro_batches(frame, args.micro):
            consume(trainer.to(mb, dev), sink)

    def host_only() -> None:
        for _ in trainer.iter_micro_batches(frame, args.micro):
            pass

    print("1. the micro-batches' bytes onto the device")
    floor_ms = cuda_ms(floor, args.reps)
    rows = [
        ("copy engine floor: pinned buffers -> device", floor_ms),
        ("iter_micro_batches(device=cuda, pin_memory=True)", cuda_ms(staged(pin), args.reps)),
        ("... the same, one copy thread", cuda_ms(one_thread, args.reps)),
        ("  its host side alone: pack_into pinned buffers", cuda_ms(pack_alone, args.reps)),
        ("iter_micro_batches(device=cuda), pageable", cuda_ms(staged(False), args.reps)),
        ("iter_micro_batches, then trainer.to(mb, cuda) each", cuda_ms(after_the_fact, args.reps)),
        ("iter_micro_batches on the host alone (no copy)", cuda_ms(host_only, args.reps)),
    ]
    for label, ms in rows:
        print(f"  {label:<52} {ms:8.2f} ms {total / ms / 1e6:7.1f} GB/s {ms / floor_ms:6.2f}x")

    # A step: bf16 matmuls sized to take step_ratio x one micro-batch's feed.
    feed_ms = rows[1][1]
    per_mb_ms = feed_ms / len(sizes)
    a = torch.randn(args.matmul, args.matmul, device=dev, dtype=torch.bfloat16) / args.matmul**0.5
    one = cuda_ms(lambda: a @ a, args.reps)
    matmuls = max(1, round(args.step_ratio * per_mb_ms / one))

    def step(sink: torch.Tensor) -> None:
        x = a
        for _ in range(matmuls):
            x = x @ a
        sink += x[0, 0].float()

    device_batches = [trainer.to(mb, dev) for mb in host_batches]

    def steps_alone() -> None:
        sink = torch.zeros((), device=dev)
        for mb in device_batches:
            consume(mb, sink)
            step(sink)

    def staged_with_steps() -> None:
        sink = torch.zeros((), device=dev)
        for mb in trainer.iter_micro_batches(frame, args.micro, device=dev, pin_memory=pin):
            consume(mb, sink)
            step(sink)

    def serial_with_steps() -> None:
        sink = torch.zeros((), device=dev)
        for mb in trainer.iter_micro_batches(frame, args.micro):
            moved = trainer.to(mb, dev)
            sync()
            consume(moved, sink)
            step(sink)

    compute = cuda_ms(steps_alone, args.reps)
    overlapped = cuda_ms(staged_with_steps, args.reps)
    serial = cuda_ms(serial_with_steps, args.reps)
    hidden = (feed_ms + compute - overlapped) / feed_ms
    print(
        f"\n2. overlap: a step of {matmuls} bf16 {args.matmul}^3 matmuls ({one:.2f} ms each) "
        f"after each micro-batch"
    )
    print(f"  {'steps alone (data already on the device)':<52} {compute:8.2f} ms")
    print(f"  {'staged feed alone (pinned, from 1.)':<52} {feed_ms:8.2f} ms")
    print(f"  {'staged iterator + steps':<52} {overlapped:8.2f} ms")
    print(f"  {'serial: trainer.to, synchronize, step':<52} {serial:8.2f} ms")
    print(
        f"  hidden: {hidden:.0%} of the staged feed overlaps the steps; staged + steps is "
        f"{overlapped / compute:.3f}x the steps alone, serial {serial / compute:.3f}x"
    )


if __name__ == "__main__":
    main()
