"""Which frames py_wire writes with streaming stores (``memory/stream.rs``): the smaller of half
the last-level cache and glibc's own ``x86_non_temporal_threshold``, or ``PY_WIRE_STREAMING``.
Each case runs in a fresh process, since both are read once per process."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

MIB = 2**20
AUTO_FLOOR = MIB  # auto never streams a frame this small
NO_CACHE_REPORT = 16 * MIB  # half the last-level cache when the CPU reports none

_REPORT = "from py_wire import _native; print(*_native.streaming_threshold())"

# Every frame op's bytes, hashed: a batch whose token rows are 3 bytes off every alignment and
# long enough (> 16 KiB) that streamed copies run through whole blocks of pages and ragged tails.
_FRAMES = textwrap.dedent(
    """
    import hashlib, torch, py_wire
    gen = torch.Generator().manual_seed(3)
    lengths = [5_003 + 977 * i for i in range(12)]
    ids = torch.randint(0, 50_000, (sum(lengths) + 3,), generator=gen, dtype=torch.int64)[3:]
    values = torch.nested.nested_tensor_from_jagged(
        ids, torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    )
    logprobs = torch.nested.nested_tensor_from_jagged(ids.float() / 7, values.offsets())
    batch = {
        "input_ids": values, "advantages": logprobs, "generation_logprobs": logprobs,
        "input_lengths": torch.tensor(lengths), "loss_multiplier": torch.ones(12),
        "reward": torch.rand(12, generator=gen),
    }
    frame = py_wire.encode(batch, py_wire.load_schema("text_grpo"), threads=1)
    frames = [frame, py_wire.take_rows(frame, [7, 0, 11, 3, 3, 5])]
    frames += [py_wire.concat(py_wire.chunk(frame, 2)), *py_wire.chunk(frame, 5)]
    print(*(hashlib.sha256(bytes(f)).hexdigest() for f in frames))
    """
)


def _run(code: str, **env: str) -> str:
    clean = {
        k: v for k, v in os.environ.items() if k not in ("PY_WIRE_STREAMING", "GLIBC_TUNABLES")
    }
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env=clean | env,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def _report(**env: str) -> tuple[int, int | None, int | None]:
    threshold, cache, glibc = (
        None if v == "None" else int(v) for v in _run(_REPORT, **env).split()
    )
    assert threshold is not None
    return threshold, cache, glibc


def test_glibcs_own_threshold_caps_py_wires_when_glibc_streams_earlier() -> None:
    glibc_threshold = 3 * MIB
    tunable = f"glibc.cpu.x86_non_temporal_threshold={glibc_threshold:#x}"
    threshold, cache, glibc = _report(GLIBC_TUNABLES=tunable)
    assert glibc == glibc_threshold, "the loader reports the tunable this process started with"
    half_cache = cache // 2 if cache else NO_CACHE_REPORT
    assert threshold == max(min(half_cache, glibc_threshold), AUTO_FLOOR)
    # Without the tunable glibc's default takes part the same way.
    threshold, cache, glibc = _report()
    assert glibc is not None
    assert threshold == max(min(half_cache, glibc), AUTO_FLOOR)


def test_py_wire_streaming_overrides_the_choice() -> None:
    auto = _report()[0]
    assert _report(PY_WIRE_STREAMING="always")[0] == 0
    assert _report(PY_WIRE_STREAMING="never")[0] == 2**64 - 1
    assert _report(PY_WIRE_STREAMING="5000000")[0] == 5_000_000
    assert _report(PY_WIRE_STREAMING="auto")[0] == auto
    assert _report(PY_WIRE_STREAMING="bogus")[0] == auto, "a bad knob falls back, not fails"


def test_streamed_frames_and_frame_ops_hold_the_same_bytes_as_ordinary_ones() -> None:
    streamed = _run(_FRAMES, PY_WIRE_STREAMING="always").split()
    ordinary = _run(_FRAMES, PY_WIRE_STREAMING="never").split()
    assert len(streamed) == 8
    assert streamed == ordinary
