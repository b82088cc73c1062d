"""Small batches shared by the tests."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

import py_wire
from py_wire import PackedTensor
from py_wire.interop.verl import RESPONSE_KEYS


def small_text_batch(lengths: tuple[int, ...] = (5, 0, 7)) -> dict[str, object]:
    ids = [torch.arange(n, dtype=torch.int64) + 10 for n in lengths]
    return {
        "input_ids": ids,
        "advantages": [torch.full((n,), 0.5) for n in lengths],
        "generation_logprobs": [-torch.arange(n, dtype=torch.float32) for n in lengths],
        "input_lengths": torch.tensor(lengths, dtype=torch.int64),
        "loss_multiplier": torch.ones(len(lengths)),
        "reward": torch.arange(len(lengths), dtype=torch.float32),
    }


START, PAD, END = 151652, 151655, 151653


def small_vlm_batch() -> dict[str, object]:
    """Three rows: a shared 8-patch image, none, and a 4-patch image then the shared one, with
    placeholder runs that match (t*h*w / 4 tokens per image)."""
    batch = small_text_batch((6, 3, 9))
    batch["input_ids"] = [
        torch.tensor([1, START, PAD, PAD, END, 2]),
        torch.tensor([3, 4, 5]),
        torch.tensor([START, PAD, END, 6, START, PAD, PAD, END, 7]),
    ]
    shared = torch.randn(8, 1176)
    batch["pixel_values"] = [shared, None, [torch.randn(4, 1176), shared]]
    batch["image_grid_thw"] = [
        torch.tensor([[1, 2, 4]]),
        None,
        torch.tensor([[1, 2, 2], [1, 2, 4]]),
    ]
    return batch


#: verl's response-aligned tensors ([B, R] in a DataProto) are packed fields in the verl schemas
#: (one [r_i] segment per row) but not media: each belongs to the stage that computes it.
VERL_RESPONSE_ALIGNED = RESPONSE_KEYS


def media_fields(name: str, schema: py_wire.Schema) -> set[str]:
    """The packed and token-type fields of a bundled schema that every forward stage must get."""
    skip = VERL_RESPONSE_ALIGNED if name.startswith("verl/") else frozenset()
    return {
        n
        for n, f in schema.fields.items()
        if (f.tier == "packed" or n in ("mm_token_type_ids", "token_type_ids")) and n not in skip
    }


def mapping_of(address: int) -> str:
    """The /proc/self/maps line of the mapping that holds ``address``."""
    for line in Path("/proc/self/maps").read_text().splitlines():
        lo, hi = (int(x, 16) for x in line.split()[0].split("-"))
        if lo <= address < hi:
            return line
    raise AssertionError(f"{address:#x} is not mapped")


class HugeLen(Sequence[int]):
    """Claims 2**62 items, yields three."""

    def __len__(self) -> int:
        return 2**62

    def __getitem__(self, i: Any) -> Any:
        if i >= 3:
            raise IndexError(i)
        return i


class HugeLenPlain:
    """The same, not a registered Sequence."""

    __len__ = HugeLen.__len__
    __getitem__ = HugeLen.__getitem__


@contextmanager
def local_ray(object_store_mb: int) -> Iterator[None]:
    """A one-CPU local Ray whose object store holds ``object_store_mb`` MB (small enough to
    force the store to reuse memory when a test wants that)."""
    import ray  # requirements-dev.txt installs it: a missing ray fails the test that asks

    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        object_store_memory=object_store_mb * 1024**2,
    )
    try:
        yield
    finally:
        ray.shutdown()


def with_metadata(frame: py_wire.Frame, **extra: str) -> py_wire.Frame:
    """``frame`` re-encoded with its caller metadata, ``extra`` written over it (a frame whose
    recorded facts a hostile writer chose)."""
    caller = {k: v for k, v in frame.metadata.items() if not k.startswith("py_wire.")}
    return py_wire.encode(py_wire.decode(frame), frame.schema, metadata={**caller, **extra})


def decoded_tensors(decoded: dict[str, Any]) -> list[tuple[str, torch.Tensor]]:
    """Every tensor a decode returned that must be a view into the frame."""
    out = []
    for name, value in decoded.items():
        if isinstance(value, PackedTensor):
            for r in range(len(value)):
                for s, seg in enumerate(value[r] or []):
                    out.append((f"{name}[{r}][{s}]", seg))
        elif isinstance(value, torch.Tensor) and value.is_nested:
            out.append((f"{name}.values()", value.values()))
            out.append((f"{name}.offsets()", value.offsets()))
        elif isinstance(value, torch.Tensor):
            out.append((name, value))
        elif isinstance(value, list):
            for r, row in enumerate(value):
                if isinstance(row, torch.Tensor):
                    out.append((f"{name}[{r}]", row))
                for s, seg in enumerate(row if isinstance(row, list) else []):
                    out.append((f"{name}[{r}][{s}]", seg))
    return out
