"""Moving a frame between two gloo processes on this machine: py_wire.distributed.send/recv
against torch.distributed.broadcast_object_list of the same frame (pickled in-band), and
py_wire.save/load + decode through a file. Prints medians in ms.

Then repeated receives of one frame size, side by side in the same processes: py_wire's pooled
receive buffer (the pages of the previous, dropped frame are reused) against a fresh
``torch.empty`` per receive (new pages: a page fault and a page clear per 4 KiB on first write),
alternating so both see the same machine load.

    .venv/bin/python benchmarks/transport.py --rows 96 --reps 5 --receives 10
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

import py_wire
from py_wire import distributed as pwd
from py_wire.synth.registry import generate


@contextmanager
def _fresh_receive_buffers() -> Iterator[None]:
    """py_wire.distributed as it was before the pool: a new torch.empty per receive."""

    def fresh(nbytes: int, device: torch.device) -> tuple[torch.Tensor, Any]:
        t = torch.empty(nbytes, dtype=torch.uint8, device=device)
        return t, t.numpy()

    pooled = pwd._receive_buffer
    pwd._receive_buffer = fresh  # type: ignore[assignment]
    try:
        yield
    finally:
        pwd._receive_buffer = pooled


def _repeated_receives(rank: int, frame: py_wire.Frame | None, receives: int) -> None:
    """``receives`` receives of one frame, pooled and fresh alternating; rank 1 times them."""
    times: dict[str, list[float]] = {"pooled": [], "fresh torch.empty": []}
    for i in range(2 * receives + 2):
        kind = "pooled" if i % 2 == 0 else "fresh torch.empty"
        dist.barrier()
        if rank == 0:
            pwd.send(frame, 1)
            continue
        with _fresh_receive_buffers() if kind != "pooled" else nullcontext():
            t = time.perf_counter()
            got = pwd.recv(0)
            elapsed = time.perf_counter() - t
        nbytes = len(got)
        del got  # dropped before the next receive, as a consumer that is done with it would
        if i >= 2:  # the first of each kind is a warm-up
            times[kind].append(elapsed)
    if rank == 1:
        med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
        print(f"  {receives} receives of a {nbytes / 1e6:.1f} MB frame each way, medians:")
        for k, v in med.items():
            print(f"  recv into {k:26s} {v:8.1f} ms")
        print(f"  fresh / pooled: {med['fresh torch.empty'] / med['pooled']:.2f}x")


def _worker(rank: int, port: int, rows: int, reps: int, receives: int) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    frame = py_wire.encode(generate("qwen2_5_vl", rows), "qwen2_5_vl") if rank == 0 else None
    times: dict[str, list[float]] = {
        "py_wire send/recv + decode": [],
        "broadcast_object_list + decode": [],
    }
    for _ in range(reps):
        dist.barrier()
        t = time.perf_counter()
        if rank == 0:
            pwd.send(frame, 1)
        else:
            py_wire.decode(pwd.recv(0))
        dist.barrier()
        times["py_wire send/recv + decode"].append(time.perf_counter() - t)
        t = time.perf_counter()
        obj = [frame] if rank == 0 else [None]
        dist.broadcast_object_list(obj, src=0)
        if rank == 1:
            py_wire.decode(obj[0])
        dist.barrier()
        times["broadcast_object_list + decode"].append(time.perf_counter() - t)
    if rank == 0:
        print(f"frame: {rows} rows, {len(frame) / 1e6:.1f} MB; medians of {reps}")
        for k, v in times.items():
            print(f"  {k:34s} {statistics.median(v) * 1e3:8.1f} ms")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "f.safetensors")
            save, load = [], []
            for _ in range(reps):
                t = time.perf_counter()
                py_wire.save(frame, path)
                save.append(time.perf_counter() - t)
                t = time.perf_counter()
                py_wire.decode(py_wire.load(path))
                load.append(time.perf_counter() - t)
            print(
                f"  {'save (write + fsync + rename)':34s} {statistics.median(save) * 1e3:8.1f} ms"
            )
            print(
                f"  {'load + decode (mmap, no read)':34s} {statistics.median(load) * 1e3:8.1f} ms"
            )
        out = py_wire.decode(frame)
        groups = py_wire.trainer.micro_batches(frame, 16384, padded=False)
        t = time.perf_counter()
        for g in groups:
            py_wire.decode(frame, rows=range(g[0], g[-1] + 1))
        per = (time.perf_counter() - t) / len(groups)
        t = time.perf_counter()
        for g in groups:
            py_wire.take_rows(frame, range(g[0], g[-1] + 1))
        per_sel = (time.perf_counter() - t) / len(groups)
        print(
            f"  micro-batch (16384 tokens) as a row window: {per * 1e3:.2f} ms each, "
            f"select (copy): {per_sel * 1e3:.2f} ms each, {len(groups)} micro-batches"
        )
        t = time.perf_counter()
        bins = py_wire.trainer.pack_sequences(frame, 16384)
        print(
            f"  pack_sequences(16384): {len(bins)} bins in {(time.perf_counter() - t) * 1e3:.2f} ms"
        )
        del out
    dist.barrier()
    _repeated_receives(rank, frame, receives)
    dist.destroy_process_group()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=96)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--receives", type=int, default=10)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_worker, args=(port, a.rows, a.reps, a.receives), nprocs=2, join=True)


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
