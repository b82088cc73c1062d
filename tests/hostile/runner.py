"""Child process of the hostile-input suite: runs mutants through every public entry point.

``python -m tests.hostile.runner SEEDS_FILE CAMPAIGN START STOP PROGRESS RESULTS``

Before each mutant it writes the mutant's index to PROGRESS (flushed), so that the parent can
name the mutant that killed or hung this process. Each finding is one JSON line in RESULTS;
the last line is a summary of outcome classes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import pickle
import resource
import sys
import tempfile
import time
import traceback
from collections import Counter
from typing import Any

AS_LIMIT = int(os.environ.get("PY_WIRE_HOSTILE_AS_LIMIT", str(6 << 30)))
#: Growth of peak RSS that one mutant may cause beyond a fixed allowance, per input byte.
RSS_ALLOWANCE = 256 << 20
RSS_PER_BYTE = 64


def main(argv: list[str]) -> int:
    seeds_file, campaign, start, stop, progress, results = argv
    resource.setrlimit(resource.RLIMIT_AS, (AS_LIMIT, AS_LIMIT))
    os.environ.setdefault("PY_WIRE_THREADS", "1")
    import torch

    torch.set_num_threads(1)
    import py_wire  # noqa: F401
    from tests.hostile.mutate import mutant

    with open(seeds_file, "rb") as fh:
        seeds = pickle.load(fh)
    pairs = [(s.name, s.data) for s in seeds]
    by_name = {s.name: s for s in seeds}
    refs: dict[str, Any] = {}
    tmp = tempfile.mkdtemp(prefix="py_wire_hostile_")
    classes: Counter[str] = Counter()
    out = open(results, "a", buffering=1)  # noqa: SIM115
    prog = open(progress, "w", buffering=1)  # noqa: SIM115
    for i in range(int(start), int(stop)):
        m = mutant(pairs, i, campaign)
        prog.write(f"{i}\n")
        prog.flush()
        seed = by_name[m.seed_name]
        if seed.name not in refs:
            refs[seed.name] = _reference(seed)
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        t0 = time.monotonic()
        findings, outcome = run_mutant(m.data, seed, refs[seed.name], tmp)
        took = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        if after - before > RSS_ALLOWANCE + RSS_PER_BYTE * len(m.data):
            findings.append(
                {
                    "kind": "allocation",
                    "entry": "*",
                    "type": "-",
                    "message": f"peak RSS grew by {(after - before) >> 20} MiB on a "
                    f"{len(m.data)}-byte input",
                }
            )
        classes[outcome] += 1
        for f in findings:
            f.update(index=i, seed=m.seed_name, mutation=m.describe(), seconds=round(took, 3))
            out.write(json.dumps(f) + "\n")
    prog.write("done\n")
    out.write(json.dumps({"summary": dict(classes)}) + "\n")
    out.close()
    return 0


# -- one mutant ----------------------------------------------------------------------------------


class Calls:
    """Runs entry points; anything but a correct result or a WireError is a finding."""

    def __init__(self) -> None:
        import py_wire

        self.wire_error = py_wire.WireError
        self.findings: list[dict[str, Any]] = []
        self.accepted: list[str] = []
        self.rejected: list[str] = []

    def __call__(self, entry: str, fn: Any) -> tuple[bool, Any]:
        try:
            value = fn()
        except self.wire_error as e:
            self.rejected.append(entry)
            return False, e
        except BaseException as e:
            if isinstance(e, KeyboardInterrupt):
                raise
            self.finding("escape", entry, e)
            return False, e
        self.accepted.append(entry)
        return True, value

    def finding(self, kind: str, entry: str, e: BaseException | None, message: str = "") -> None:
        tb = ""
        if e is not None:
            frames = traceback.extract_tb(e.__traceback__)[-4:]
            tb = " <- ".join(
                f"{os.path.basename(f.filename)}:{f.lineno} {f.name}" for f in reversed(frames)
            )
            message = message or str(e)
        self.findings.append(
            {
                "kind": kind,
                "entry": entry,
                "type": "" if e is None else f"{type(e).__module__}.{type(e).__qualname__}",
                "message": message[:600],
                "where": tb,
            }
        )

    def mismatch(self, entry: str, message: str) -> None:
        self.finding("wrong-result", entry, None, message)


def run_mutant(data: bytes, seed: Any, ref: Any, tmp: str) -> tuple[list[dict[str, Any]], str]:
    import py_wire

    calls = Calls()
    if seed.schema:  # a reader of compact frames holds the schema
        py_wire.load_schema(seed.schema)
    ok, frame = calls("Frame.from_buffer", lambda: py_wire.Frame.from_buffer(data))
    if ok:
        calls("Frame.schema", lambda: frame.schema)
        calls("Frame.metadata", lambda: dict(frame.metadata))
        calls("Frame.num_rows", lambda: frame.num_rows)
        calls("pickle", lambda: pickle.loads(pickle.dumps(frame, protocol=5)).num_rows)

    stages = [*list(seed.stages), "no-such-stage"]
    base = nested = None
    for layout in (None, "padded", "list"):
        for stage in [None, *stages]:
            entry = f"decode(layout={layout!r}, stage={stage!r})"
            good, value = calls(entry, lambda s=stage, lay=layout: _materialize(
                py_wire.decode(data, stage=s, layout=lay), lay))  # fmt: skip
            if good and stage is None and layout == "list":
                base = value
                if nested is not None:
                    _compare(calls, "decode(layout=None) vs decode(layout='list')", nested, base)
            if good and stage is None and layout is None:
                nested = value
            if good and stage == "no-such-stage":
                calls.mismatch(entry, "decode accepted a stage the schema does not have")
    if seed.schema:
        calls(
            f"decode(data, {seed.schema!r})",
            lambda: _materialize(py_wire.decode(data, seed.schema), None),
        )

    if ok:
        calls("check_contracts", lambda: py_wire.check_contracts(frame))
        _ops(calls, frame, base, ref, seed.data)
    _cli(calls, data, tmp, frame_ok=ok)

    rejected = [e for e in calls.rejected if "no-such-stage" not in e]
    if calls.findings:
        outcome = "finding"
    elif not rejected:
        outcome = "accepted everywhere"
    elif not ok:
        outcome = f"rejected by Frame.from_buffer ({type(frame).__name__})"
    elif base is None:
        outcome = "Frame ok, decode rejects"
    else:
        outcome = "decodes; some entry points reject"
    return calls.findings, outcome


def _materialize(out: dict[str, Any], layout: str | None) -> dict[str, list[Any]]:
    """Touch every decoded value the ways a consumer does; return rows per field (lists of
    tensors, ``None`` for packed rows without segments) for comparisons."""
    import torch

    import py_wire

    rows: dict[str, list[Any]] = {}
    for name, v in out.items():
        if isinstance(v, py_wire.PackedTensor):
            v.segment_counts()
            len(v)
            whole = v.as_tensor()
            if whole is not None:
                whole.sum()
            r = v.rows()
            for seg_list in v:
                for s in seg_list or ():
                    s.sum()
            v.csr()
            if layout is None and len(v):
                v[0]
                v[-1]
            rows[name] = r
        elif isinstance(v, list):  # layout="list": per-token or packed rows, or encoded values
            for r in v:
                if isinstance(r, torch.Tensor):
                    r.sum()
                elif isinstance(r, list):
                    for s in r:
                        if isinstance(s, torch.Tensor):
                            s.sum()
            rows[name] = v
        elif v.is_nested:
            parts = list(v.unbind())
            v.values().sum()
            for p in parts:
                p.sum()
            rows[name] = parts
        else:
            v.sum()
            rows[name] = list(v.unbind(0)) if v.dim() else [v]
    return rows


def _reference(seed: Any) -> dict[str, list[Any]]:
    import py_wire

    if seed.schema:
        py_wire.load_schema(seed.schema)
    return _materialize(py_wire.decode(seed.data, layout="list"), "list")


def _same(a: Any, b: Any) -> bool:
    import torch

    if a is None or b is None:
        return a is None and b is None
    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        if isinstance(a, list) and isinstance(b, list):
            return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
        return type(a) is type(b) and a == b  # a row of an encoded field: a Python value
    if isinstance(a, list) or isinstance(b, list):
        return (
            isinstance(a, list)
            and isinstance(b, list)
            and len(a) == len(b)
            and all(_same(x, y) for x, y in zip(a, b, strict=True))
        )
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return torch.equal(a.contiguous().reshape(-1).view(torch.uint8),
                       b.contiguous().reshape(-1).view(torch.uint8))  # fmt: skip


def _expect(parts: list[tuple[dict[str, list[Any]], list[int]]]) -> dict[str, list[Any]]:
    """Rows picked from decoded frames; a field some parts lack is rows without segments."""
    names: list[str] = []
    for rows, _ in parts:
        names += [n for n in rows if n not in names]
    out: dict[str, list[Any]] = {}
    for n in names:
        out[n] = []
        for rows, picks in parts:
            out[n] += [rows[n][i] if n in rows else None for i in picks]
    return out


def _compare(
    calls: Calls, entry: str, got: dict[str, list[Any]], want: dict[str, list[Any]]
) -> None:
    for n in sorted(set(got) | set(want)):
        g, w = got.get(n), want.get(n)
        if g is None or w is None:
            # a packed field absent on both sides of the op decodes as absent
            if (g is None and w is not None and any(x is not None for x in w)) or (
                w is None and g is not None and any(x is not None for x in g)
            ):
                calls.mismatch(entry, f"field {n!r} present on one side only")
            continue
        if len(g) != len(w):
            calls.mismatch(entry, f"field {n!r}: {len(g)} rows, expected {len(w)}")
            return
        for i, (x, y) in enumerate(zip(g, w, strict=True)):
            if not _same(x, y):
                calls.mismatch(entry, f"field {n!r} row {i} differs from the rows it was made from")
                return


def _ops(calls: Calls, frame: Any, base: Any, ref: Any, seed_data: bytes) -> None:
    import py_wire

    ok, n = calls("Frame.num_rows", lambda: frame.num_rows)
    if not ok:
        return
    n = int(n)
    picks = [n - 1, 0, n - 1] if n else []
    seed_frame_rows = len(next(iter(ref.values()))) if ref else 0
    ops: list[tuple[str, Any, list[tuple[Any, list[int]]] | None]] = [
        (f"select(F, {picks})", lambda: [py_wire.take_rows(frame, picks)], [(base, picks)]),
        ("select(F, slice(None))", lambda: [py_wire.take_rows(frame, slice(None))], [(base, list(range(n)))]),  # noqa: E501
        ("select(F, range)", lambda: [py_wire.take_rows(frame, range(n))], [(base, list(range(n)))]),  # noqa: E501
        (f"split(F, {2 if n >= 2 else 1})", lambda: py_wire.chunk(frame, 2 if n >= 2 else 1), [(base, list(range(n)))]),  # noqa: E501
        (f"split(F, [{n}])", lambda: py_wire.split(frame, [n]), [(base, list(range(n)))]),
        ("shard(F, 1, 2)", lambda: [py_wire.shard(frame, 1, 2)], [(base, list(range(n - n // 2, n)))]),  # noqa: E501
        ("concat([F, F])", lambda: [py_wire.concat([frame, frame])], [(base, list(range(n))), (base, list(range(n)))]),  # noqa: E501
        ("concat([F, seed])", lambda: [py_wire.concat([frame, py_wire.Frame.from_buffer(seed_data)])],  # noqa: E501
         [(base, list(range(n))), (ref, list(range(seed_frame_rows)))]),
    ]  # fmt: skip
    for entry, fn, want in ops:
        good, outs = calls(entry, fn)
        if not good:
            continue
        decoded = []
        for k, out in enumerate(outs):
            g, rows = calls(
                f"decode({entry}[{k}])",
                lambda o=out: _materialize(py_wire.decode(o, layout="list"), "list"),
            )
            if not g:
                calls.mismatch(entry, f"output {k} does not decode: {type(rows).__name__}: {rows}")
                break
            calls(f"{entry}[{k}].schema", lambda o=out: o.schema)
            decoded.append(rows)
        else:
            if base is None or want is None or any(w is None for w, _ in want):
                if base is None:
                    calls.mismatch(
                        entry, "accepted a frame that decode(F) rejects (its output decodes)"
                    )
                continue
            got = _expect(
                [(d, list(range(len(next(iter(d.values()))) if d else 0))) for d in decoded]
            )
            _compare(calls, entry, got, _expect(want))


def _cli(calls: Calls, data: bytes, tmp: str, frame_ok: bool) -> None:
    """``py-wire inspect FILE`` in process (the parent runs the real command on a sample): exit
    status 0, or 1 with a one-line ``error:`` message; never an escaping exception."""
    from py_wire import cli

    path = os.path.join(tmp, "mutant.safetensors")
    with open(path, "wb") as fh:
        fh.write(data)
    err, out = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
        good, rc = calls("py-wire inspect", lambda: cli.main(["inspect", path]))
    if not good:
        if isinstance(rc, BaseException) and not any(
            f["entry"] == "py-wire inspect" for f in calls.findings
        ):
            calls.finding("cli", "py-wire inspect", rc, f"a WireError escaped main: {rc}")
        return
    lines = err.getvalue().strip().splitlines()
    if rc == 0 and not frame_ok:
        calls.mismatch("py-wire inspect", "exit 0 on a frame that Frame.from_buffer rejects")
    elif rc not in (0, 1) or (rc == 1 and (len(lines) != 1 or not lines[0].startswith("error:"))):
        calls.finding("cli", "py-wire inspect", None, f"exit {rc}, stderr {err.getvalue()[:300]!r}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
