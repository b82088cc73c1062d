"""A deterministic mutation engine for py_wire frames (safetensors files).

``mutant(seeds, index, campaign)`` is a pure function of its arguments: the same index always
gives the same bytes, so a failure found in a long campaign is reproduced from its index alone
(and the harness also writes the mutant to a file).

Structural mutations re-serialise the JSON header and re-pad it with spaces so that the data
section stays 64-byte aligned: they get past the first checks and reach the layout, CSR and
schema code. Byte-level mutations (bit flips, truncation, header-length lies) do not.
"""

from __future__ import annotations

import hashlib
import json
import random
import struct
from collections.abc import Callable
from dataclasses import dataclass, field

# -- parsing and re-serialising ------------------------------------------------------------------

BOUNDARY = [0, -1, 1, 2, 2**31, 2**31 - 1, 2**32, 2**40, 2**62, 2**63 - 1, -(2**63), 2**64 - 1]
CSR_SUFFIXES = (".seg_shapes", ".seg_offsets", ".row_offsets", ".row_segments")
INDEX_DTYPE = "I64"
DTYPES = ["F64", "F32", "F16", "BF16", "I64", "I32", "I16", "I8", "U8", "U16", "U32", "U64",
          "BOOL", "F8_E4M3", "F8_E5M2", "C64", "XX", "", "f32"]  # fmt: skip
META = "__metadata__"


@dataclass
class Parsed:
    """A frame split into its header entries (in order; keys may repeat) and its data."""

    entries: list[tuple[str, object]]
    data: bytes
    header_text: bytes = b""

    @classmethod
    def of(cls, frame: bytes) -> Parsed:
        n = struct.unpack_from("<Q", frame, 0)[0]
        text = frame[8 : 8 + n]
        header = json.loads(text, object_pairs_hook=list)
        return cls(list(header), frame[8 + n :], text)

    def get(self, key: str) -> object:
        for k, v in self.entries:
            if k == key:
                return v
        raise KeyError(key)

    def set(self, key: str, value: object) -> None:
        for i, (k, _) in enumerate(self.entries):
            if k == key:
                self.entries[i] = (k, value)
                return
        self.entries.append((key, value))

    def tensors(self) -> list[str]:
        return [k for k, v in self.entries if k != META and isinstance(v, list)]

    def meta(self) -> list[tuple[str, object]]:
        m = self.get(META)
        assert isinstance(m, list)
        return m

    def meta_get(self, key: str) -> object:
        for k, v in self.meta():
            if k == key:
                return v
        return None

    def meta_set(self, key: str, value: object) -> None:
        m = self.meta()
        for i, (k, _) in enumerate(m):
            if k == key:
                m[i] = (k, value)
                return
        m.append((key, value))

    def tensor(self, key: str) -> dict[str, object]:
        v = self.get(key)
        assert isinstance(v, list)
        return dict(v)

    def set_tensor(self, key: str, t: dict[str, object]) -> None:
        self.set(key, list(t.items()))

    def build(self, pad: bool = True) -> bytes:
        text = dump(self.entries).encode()
        if pad:
            text += b" " * (-(8 + len(text)) % 64)
        return struct.pack("<Q", len(text)) + text + self.data


def dump(value: object) -> str:
    """JSON text of a value where objects are lists of pairs (so keys may repeat)."""
    if (
        isinstance(value, list)
        and all(isinstance(p, tuple) and len(p) == 2 for p in value)
        and (value and isinstance(value[0][0], str))
    ):
        return "{" + ",".join(json.dumps(k) + ":" + dump(v) for k, v in value) + "}"
    if isinstance(value, list):
        if not value:
            return "[]"
        return "[" + ",".join(dump(v) for v in value) + "]"
    if isinstance(value, Raw):
        return value.text
    return json.dumps(value)


@dataclass
class Raw:
    """JSON text inserted verbatim (deep nesting, huge numbers)."""

    text: str


def fingerprint(schema_text: str) -> str:
    return "sha256:" + hashlib.sha256(schema_text.encode()).hexdigest()


# -- mutations -----------------------------------------------------------------------------------


@dataclass
class Ctx:
    rng: random.Random
    frame: bytes
    notes: list[str] = field(default_factory=list)

    def note(self, s: str) -> None:
        self.notes.append(s)


Mutation = Callable[[Ctx, Parsed], None]
STRUCTURAL: dict[str, Mutation] = {}
BYTEWISE: dict[str, Callable[[Ctx, bytes], bytes]] = {}


def structural(fn: Mutation) -> Mutation:
    STRUCTURAL[fn.__name__] = fn
    return fn


def bytewise(fn: Callable[[Ctx, bytes], bytes]) -> Callable[[Ctx, bytes], bytes]:
    BYTEWISE[fn.__name__] = fn
    return fn


def _pick_tensor(c: Ctx, p: Parsed, pred: Callable[[str], bool] = lambda k: True) -> str | None:
    names = [k for k in p.tensors() if pred(k)]
    return c.rng.choice(names) if names else None


def _weird_int(c: Ctx, near: int = 0) -> object:
    r = c.rng.random()
    if r < 0.6:
        return c.rng.choice([*BOUNDARY, near, near + 1, near - 1])
    if r < 0.7:
        return Raw("9" * c.rng.choice([20, 40, 400, 5000]))
    if r < 0.8:
        return c.rng.choice([1.5, -0.0, 1e300, True, None, "3", [1], {}])
    return c.rng.randrange(-(2**16), 2**16)


@structural
def tensor_shape(c: Ctx, p: Parsed) -> None:
    k = _pick_tensor(c, p)
    if k is None:
        return
    t = p.tensor(k)
    shape = list(t["shape"])  # type: ignore[arg-type]
    how = c.rng.choice(["dim", "dim", "append", "drop", "empty", "zero-huge", "nonlist"])
    if how == "dim" and shape:
        i = c.rng.randrange(len(shape))
        shape[i] = _weird_int(c, shape[i])
    elif how == "append":
        shape.append(c.rng.choice([1, 0, 2**40]))
    elif how == "drop" and shape:
        shape.pop(c.rng.randrange(len(shape)))
    elif how == "empty":
        shape = []
    elif how == "zero-huge":
        # zero bytes, huge element counts along another dim
        shape = [2**62, 0, *shape[2:]] if c.rng.random() < 0.5 else [0, 2**63 - 1, *shape[2:]]
    elif how == "nonlist":
        shape = c.rng.choice(["[1]", 3, None, {"a": 1}])  # type: ignore[assignment]
    t["shape"] = shape
    p.set_tensor(k, t)
    c.note(f"shape {k} -> {dump(shape) if isinstance(shape, list) else shape!r}")


@structural
def tensor_dtype(c: Ctx, p: Parsed) -> None:
    k = _pick_tensor(c, p)
    if k is None:
        return
    t = p.tensor(k)
    t["dtype"] = c.rng.choice([*DTYPES, 5, None])
    p.set_tensor(k, t)
    c.note(f"dtype {k} -> {t['dtype']!r}")


@structural
def tensor_offsets(c: Ctx, p: Parsed) -> None:
    k = _pick_tensor(c, p)
    if k is None:
        return
    t = p.tensor(k)
    b, e = t["data_offsets"]  # type: ignore[misc]
    n = len(p.data)
    choice = c.rng.choice(
        [
            "swap",
            "end+1",
            "end-8",
            "shift64",
            "zero",
            "huge",
            "neg",
            "other",
            "len3",
            "end=n",
            "begin=end",
            "end+64",
            "wrap",
        ]
    )
    off: object
    if choice == "swap":
        off = [e, b]
    elif choice == "end+1":
        off = [b, e + 1]
    elif choice == "end-8":
        off = [b, e - 8]
    elif choice == "shift64":
        off = [b + 64, e + 64]
    elif choice == "zero":
        off = [0, 0]
    elif choice == "huge":
        off = [b, _weird_int(c, e)]
    elif choice == "neg":
        off = [-64, e]
    elif choice == "other":
        o = _pick_tensor(c, p)
        off = p.tensor(o)["data_offsets"] if o else [b, e]
    elif choice == "len3":
        off = [b, e, e]
    elif choice == "end=n":
        off = [b, n + c.rng.choice([0, 1, 64])]
    elif choice == "begin=end":
        off = [e, e]
    elif choice == "end+64":
        off = [b, e + 64]
    else:
        off = [2**64 - 64, b]
    t["data_offsets"] = off
    p.set_tensor(k, t)
    c.note(f"data_offsets {k} {[b, e]} -> {dump(off)}")


@structural
def drop_entry(c: Ctx, p: Parsed) -> None:
    i = c.rng.randrange(len(p.entries))
    c.note(f"drop entry {p.entries[i][0]!r}")
    del p.entries[i]


@structural
def duplicate_entry(c: Ctx, p: Parsed) -> None:
    i = c.rng.randrange(len(p.entries))
    k, v = p.entries[i]
    j = c.rng.randrange(len(p.entries) + 1)
    if c.rng.random() < 0.5 and k != META:
        o = _pick_tensor(c, p)
        v = p.get(o) if o else v
    p.entries.insert(j, (k, v))
    c.note(f"duplicate entry {k!r} at {j}")


@structural
def rename_entry(c: Ctx, p: Parsed) -> None:
    i = c.rng.randrange(len(p.entries))
    k, v = p.entries[i]
    names = [n for n, _ in p.entries]
    new = c.rng.choice(
        [
            k + "2",
            k.upper(),
            "__pad.999",
            "__metadata__",
            "__seq_offsets",
            "",
            "x" * 300,
            k.split(".")[0],
            k + ".seg_shapes",
            "é",
            c.rng.choice(names),
        ]
    )
    p.entries[i] = (new, v)
    c.note(f"rename {k!r} -> {new!r}")


@structural
def swap_names(c: Ctx, p: Parsed) -> None:
    ts = p.tensors()
    if len(ts) < 2:
        return
    a, b = c.rng.sample(ts, 2)
    va, vb = p.get(a), p.get(b)
    p.set(a, vb)
    p.set(b, va)
    c.note(f"swap tensors {a!r} <-> {b!r}")


@structural
def reorder(c: Ctx, p: Parsed) -> None:
    c.rng.shuffle(p.entries)
    c.note("shuffle header entries")


NUM_ROWS_VALUES = ["0", "-1", "1e3", "2**40", " 1", "1 ", "+1", "01", "", "1.0", "0x10",
                   str(2**40), str(2**63 - 1), str(2**63), str(2**63 + 1), str(2**64 - 1),
                   str(2**64), "9" * 30, "9" * 5000, "٣"]  # fmt: skip


@structural
def meta_num_rows(c: Ctx, p: Parsed) -> None:
    cur = p.meta_get("py_wire.num_rows")
    b = int(cur) if isinstance(cur, str) and cur.isdigit() else 0
    v = c.rng.choice([*NUM_ROWS_VALUES, str(b + 1), str(b - 1), str(b + 1), str(b - 1)])
    if c.rng.random() < 0.05:
        v = c.rng.choice([3, None, ["1"]])  # type: ignore[assignment]
    p.meta_set("py_wire.num_rows", v)
    c.note(f"num_rows {cur!r} -> {v if not isinstance(v, str) or len(v) < 40 else v[:10] + '..'!r}")


@structural
def meta_format(c: Ctx, p: Parsed) -> None:
    v = c.rng.choice(["0", "1", "3", "1.0", "", " 2", "02", "9" * 100, "\uff12"])
    p.meta_set("py_wire.format", v)
    c.note(f"format -> {v!r}")


@structural
def meta_drop_or_add(c: Ctx, p: Parsed) -> None:
    m = p.meta()
    if c.rng.random() < 0.5 and m:
        i = c.rng.randrange(len(m))
        c.note(f"drop metadata {m[i][0]!r}")
        del m[i]
    else:
        k = c.rng.choice(["py_wire.extra", "py_wire.num_rows", "py_wire.fields", "x" * 1000])
        m.append((k, c.rng.choice(["", "1", "[]", "{}"])))
        c.note(f"add metadata {k[:20]!r}")


@structural
def meta_sequence_field(c: Ctx, p: Parsed) -> None:
    names = sorted({k.split(".")[0] for k in p.tensors() if not k.startswith("__")})
    v = c.rng.choice([*names, "", "nope", "__seq_offsets", "__metadata__"])
    # An embedded header carries no sequence field (one is refused as mixing forms); half the
    # time make it a format-1 header, which the reader refuses by its version.
    if c.rng.random() < 0.5 and to_format_1(p):
        c.note("as format 1")
    if c.rng.random() < 0.3:
        p.meta()[:] = [(k, x) for k, x in p.meta() if k != "py_wire.sequence_field"]
        c.note("drop sequence_field")
    else:
        p.meta_set("py_wire.sequence_field", v)
        c.note(f"sequence_field -> {v!r}")


@structural
def meta_not_strings(c: Ctx, p: Parsed) -> None:
    m = p.meta()
    i = c.rng.randrange(len(m))
    k = m[i][0]
    v = c.rng.choice([1, None, ["a"], [("a", "b")], True])
    m[i] = (k, v)
    c.note(f"metadata {k!r} -> non-string {v!r}")


def format_1_table(p: Parsed) -> list[dict[str, object]] | None:
    """The field table a format-1 writer put in ``py_wire.fields`` beside the embedded schema:
    the schema's fields that have a values tensor, as the codec's field specs (``"*"`` dims as
    null), or None when the header holds no readable schema."""
    s = _schema(p)
    decls = s.get("fields") if isinstance(s, dict) else None
    if not isinstance(decls, dict):
        return None
    names = set(p.tensors())
    table: list[dict[str, object]] = []
    for name, d in decls.items():
        if name not in names or not isinstance(d, dict):
            continue
        entry: dict[str, object] = {"name": name, "tier": d.get("tier"), "dtype": d.get("dtype")}
        if d.get("wire_dtype") is not None:
            entry["wire_dtype"] = d["wire_dtype"]
        entry["shape"] = [None if x == "*" else x for x in d.get("shape", [])]
        entry["pack_dim"] = d.get("pack_dim", 0)
        table.append(entry)
    return table


def to_format_1(p: Parsed) -> bool:
    """Rewrite an embedded header as a format-1 writer wrote it: version "1", the field table
    and the sequence field beside the schema (a format no longer read: refused by its version).
    False when the header holds no readable schema (nothing is changed then)."""
    table = format_1_table(p)
    if table is None:
        return False
    p.meta_set("py_wire.format", "1")
    p.meta_set("py_wire.fields", json.dumps(table))
    seq = (_schema(p) or {}).get("sequence_field")
    if isinstance(seq, str):
        p.meta_set("py_wire.sequence_field", seq)
    return True


def _fields(p: Parsed) -> list[dict[str, object]]:
    """The header's field table: a bare or format-1 header's own; an embedded header carries
    none, so it is made a format-1 header first (the table then what its schema says)."""
    if p.meta_get("py_wire.fields") is None and p.meta_get("py_wire.schema") is not None:
        to_format_1(p)
    return json.loads(p.meta_get("py_wire.fields"))  # type: ignore[arg-type]


def _edit_field_entry(c: Ctx, f: dict[str, object]) -> str:
    key = c.rng.choice(["tier", "dtype", "wire_dtype", "shape", "pack_dim", "name", "extra"])
    old = f.get(key)
    if key == "tier":
        f[key] = c.rng.choice(["packed", "per_token", "scalar", "x", None, 1])
    elif key in ("dtype", "wire_dtype"):
        f[key] = c.rng.choice(["float32", "bfloat16", "int64", "int8", "bool", "float64",
                               "uint8", "complex64", "float8_e4m3fn", "nope", None])  # fmt: skip
    elif key == "shape":
        shape = list(f.get("shape") or [])  # type: ignore[arg-type]
        how = c.rng.choice(["dim", "append", "drop", "nonlist", "deep"])
        if how == "dim" and shape:
            i = c.rng.randrange(len(shape))
            shape[i] = c.rng.choice([None, 0, 1, 3, -1, 2**40, 2**63, "*", 1.5, True])
            f[key] = shape
        elif how == "append":
            f[key] = shape + [c.rng.choice([None, 1, 2**62])] * c.rng.choice([1, 8, 20])
        elif how == "drop" and shape:
            f[key] = shape[1:]
        elif how == "nonlist":
            f[key] = c.rng.choice([None, 3, "x", {}])
        else:
            f[key] = json.loads("[" * 50 + "]" * 50)
    elif key == "pack_dim":
        f[key] = c.rng.choice([-1, 1, 2, 5, 2**63, -(2**63), None, "0", 1.0])
    elif key == "name":
        f[key] = c.rng.choice(["", "x", "input_ids", "__seq_offsets", "a.seg_shapes", None])
    else:
        f["extra"] = [[[1]]]
    return f"{key}: {old!r} -> {f.get(key)!r}"


@structural
def meta_fields_json(c: Ctx, p: Parsed) -> None:
    try:
        fields = _fields(p)
    except Exception:
        return
    how = c.rng.choice(["edit", "edit", "edit", "dup", "drop", "deep", "junk", "huge"])
    text: str
    if how == "edit" and fields:
        i = c.rng.randrange(len(fields))
        c.note(f"fields[{i}] ({fields[i].get('name')}) " + _edit_field_entry(c, fields[i]))
        text = json.dumps(fields)
    elif how == "dup" and fields:
        i = c.rng.randrange(len(fields))
        fields.insert(c.rng.randrange(len(fields) + 1), dict(fields[i]))
        c.note(f"fields: duplicate {fields[i].get('name')!r}")
        text = json.dumps(fields)
    elif how == "drop" and fields:
        i = c.rng.randrange(len(fields))
        c.note(f"fields: drop {fields.pop(i).get('name')!r}")
        text = json.dumps(fields)
    elif how == "deep":
        d = c.rng.choice([100, 1000, 100000])
        text = "[" * d + "]" * d
        c.note(f"fields: nested {d} deep")
    elif how == "huge":
        text = "[" + "9" * c.rng.choice([30, 5000]) + "]"
        c.note("fields: huge number")
    else:
        text = c.rng.choice(["", "{}", "null", "[", "[1,2]", '[{"name":"x"}]', '"[]"'])
        c.note(f"fields -> {text!r}")
    p.meta_set("py_wire.fields", text)


def _schema(p: Parsed) -> dict[str, object] | None:
    try:
        return json.loads(p.meta_get("py_wire.schema"))  # type: ignore[arg-type]
    except Exception:
        return None


def _set_schema(c: Ctx, p: Parsed, text: str, refingerprint: bool = True) -> None:
    p.meta_set("py_wire.schema", text)
    if refingerprint:
        p.meta_set("py_wire.fingerprint", fingerprint(text))


@structural
def meta_schema_json(c: Ctx, p: Parsed) -> None:
    """Replace or edit the embedded schema; the fingerprint is recomputed so it matches."""
    s = _schema(p)
    how = c.rng.choice(["deep", "huge-version", "huge-token", "edit-field", "edit-contract",
                        "junk", "stages", "drop-field", "canon"])  # fmt: skip
    if how == "deep" or s is None:
        d = c.rng.choice([100, 1000, 5000, 100000])
        opener = c.rng.choice(["[", '{"a":'])
        closer = "]" if opener == "[" else "}"
        text = opener * d + "1" + closer * d
        c.note(f"schema: nested {d} deep ({opener})")
    elif how == "huge-version":
        s["version"] = Raw("9" * c.rng.choice([20, 400, 5000]))  # type: ignore[index]
        text = dump(list(s.items()))
        c.note("schema: huge version")
    elif how == "huge-token":
        cs = s.get("contracts") or []
        if not cs:
            s["name"] = "x" * 10000
            text = json.dumps(s, sort_keys=True, separators=(",", ":"))
            c.note("schema: 10000-char name")
        else:
            con = cs[c.rng.randrange(len(cs))]  # type: ignore[index]
            keys = [
                k for k, v in con.items() if isinstance(v, int | float) and not isinstance(v, bool)
            ]  # type: ignore[union-attr]
            if keys:
                k = c.rng.choice(keys)
                con[k] = c.rng.choice([0, -1, 2**63 - 1, 2**64, 2**40, -(2**63), 1e308])  # type: ignore[index]
                c.note(f"schema: contract {k} -> {con[k]!r}")  # type: ignore[index]
            text = json.dumps(s, sort_keys=True, separators=(",", ":"))
    elif how == "edit-field":
        fs = s.get("fields") or {}
        if isinstance(fs, dict) and fs:
            name = c.rng.choice(sorted(fs))
            c.note(f"schema field {name}: " + _edit_field_entry(c, fs[name]))
        text = json.dumps(s, sort_keys=True, separators=(",", ":"))
    elif how == "edit-contract":
        cs = s.get("contracts") or []
        if cs:
            con = cs[c.rng.randrange(len(cs))]  # type: ignore[index]
            k = c.rng.choice(sorted(con))  # type: ignore[arg-type]
            con[k] = c.rng.choice([None, "input_ids", "pixel_values", "fixed", "grid_thw",  # type: ignore[index]
                                   "image_size", 0, 1, -2, 2**31, "nope"])  # fmt: skip
            c.note(f"schema: contract {k} -> {con[k]!r}")  # type: ignore[index]
        else:
            s["contracts"] = [{"kind": "placeholder", "name": "c", "media_field": "input_ids",
                               "token_id": 1, "count": "fixed", "tokens_per_image": 2**40}]  # fmt: skip  # noqa: E501
            c.note("schema: add a contract on a non-packed field")
        text = json.dumps(s, sort_keys=True, separators=(",", ":"))
    elif how == "stages":
        s["stages"] = c.rng.choice([[], ["train"], ["x"] * 3, None, "train"])
        c.note(f"schema stages -> {s['stages']!r}")
        text = json.dumps(s, sort_keys=True, separators=(",", ":"))
    elif how == "drop-field":
        fs = s.get("fields") or {}
        if isinstance(fs, dict) and fs:
            name = c.rng.choice(sorted(fs))
            del fs[name]
            c.note(f"schema: drop field {name}")
        text = json.dumps(s, sort_keys=True, separators=(",", ":"))
    elif how == "canon":
        text = json.dumps(s, indent=1)  # not canonical, but fingerprinted
        c.note("schema: non-canonical JSON with matching fingerprint")
    else:
        text = c.rng.choice(["", "null", "[]", "1", '"x"', "{", "{}", '{"name":1}'])
        c.note(f"schema -> {text!r}")
    _set_schema(c, p, text, refingerprint=c.rng.random() < 0.9)


@structural
def meta_fingerprint(c: Ctx, p: Parsed) -> None:
    v = c.rng.choice(["", "sha256:", "sha256:00", "md5:1", "x" * 10000, fingerprint("{}")])
    p.meta_set("py_wire.fingerprint", v)
    c.note(f"fingerprint -> {v[:20]!r}")


@structural
def meta_schema_ref(c: Ctx, p: Parsed) -> None:
    """A compact frame's schema reference: another held schema's fingerprint (its tensors are
    then the wrong schema's), an unknown or malformed one, or one beside an embedded schema."""
    import py_wire

    held = [py_wire.load_schema(n).fingerprint for n in ("text_grpo", "qwen2_5_vl", "smolvlm")]
    v = c.rng.choice([*held, *held, "sha256:" + "0" * 64, "sha256:", "", "x" * 10000,
                      fingerprint("{}"), "SHA256:" + "a" * 64])  # fmt: skip
    p.meta_set("py_wire.schema_ref", v)
    c.note(f"schema_ref -> {v[:20]!r}")


def _write_i64(data: bytearray, pos: int, value: int) -> None:
    data[pos : pos + 8] = struct.pack("<Q", value % 2**64)


@structural
def index_values(c: Ctx, p: Parsed) -> None:
    """Overwrite int64 entries of a CSR table or the sequence offsets with boundary values."""
    k = _pick_tensor(c, p, lambda k: k.endswith(CSR_SUFFIXES) or k == "__seq_offsets")
    if k is None:
        return
    t = p.tensor(k)
    b, e = t["data_offsets"]  # type: ignore[misc]
    count = (e - b) // 8
    if count <= 0:
        return
    data = bytearray(p.data)
    for _ in range(c.rng.choice([1, 1, 1, 2, 3])):
        pos = c.rng.choice([0, 1, count - 1, count - 2, count // 2, c.rng.randrange(count)])
        pos = min(max(pos, 0), count - 1)
        old = struct.unpack_from("<q", data, b + 8 * pos)[0]
        near = c.rng.choice([count, count - 1, count + 1, old + 1, old - 1, len(p.data)])
        v = c.rng.choice([*BOUNDARY[:-1], near, near, near])
        if not isinstance(v, int):
            v = 0
        _write_i64(data, b + 8 * pos, v)
        c.note(f"{k}[{pos}] {old} -> {v}")
    p.data = bytes(data)


@structural
def zero_size_huge_segment(c: Ctx, p: Parsed) -> None:
    """A segment with zero elements whose other dims are huge (zero bytes, huge shapes)."""
    k = _pick_tensor(c, p, lambda k: k.endswith(".seg_shapes"))
    if k is None:
        return
    t = p.tensor(k)
    shape = t["shape"]
    b, _ = t["data_offsets"]  # type: ignore[misc]
    if not isinstance(shape, list) or len(shape) != 2 or shape[0] == 0 or shape[1] < 1:
        return
    rows, rank = shape
    data = bytearray(p.data)
    seg = c.rng.randrange(rows)
    dims = [struct.unpack_from("<q", data, b + 8 * (seg * rank + d))[0] for d in range(rank)]
    zero = [d for d in range(rank) if dims[d] == 0]
    if not zero:
        return
    d = c.rng.choice([x for x in range(rank) if x not in zero] or zero)
    v = c.rng.choice([2**31, 2**40, 2**62, 2**63 - 1])
    _write_i64(data, b + 8 * (seg * rank + d), v)
    p.data = bytes(data)
    c.note(f"{k}: segment {seg} {dims} -> dim {d} = {v}")


@structural
def payload_bytes(c: Ctx, p: Parsed) -> None:
    """Overwrite payload bytes (not index tables): must decode to the new values."""
    k = _pick_tensor(c, p, lambda k: not k.endswith(CSR_SUFFIXES) and not k.startswith("__"))
    if k is None:
        return
    b, e = p.tensor(k)["data_offsets"]  # type: ignore[misc]
    if e <= b:
        return
    data = bytearray(p.data)
    for _ in range(4):
        data[c.rng.randrange(b, e)] = c.rng.randrange(256)
    p.data = bytes(data)
    c.note(f"payload bytes of {k}")


@structural
def coordinated_dtype(c: Ctx, p: Parsed) -> None:
    """Change a field's dtype consistently in the tensor entry, the schema and (a format-1
    header, half the time) the field table (same item size), so that every cross-check agrees
    and the mutant reaches decode proper."""
    legacy = p.meta_get("py_wire.fields") is not None or c.rng.random() < 0.5
    try:
        fields = _fields(p) if legacy else format_1_table(p)
        s = _schema(p)
    except Exception:
        return
    if not fields or s is None:
        return
    f = c.rng.choice(fields)
    same = {"float32": [("int32", "I32"), ("uint32", "U32")], "int64": [("float64", "F64")],
            "bfloat16": [("float16", "F16"), ("int16", "I16")], "float16": [("bfloat16", "BF16")],
            "bool": [("uint8", "U8"), ("int8", "I8")], "uint8": [("bool", "BOOL")],
            "int32": [("float32", "F32")], "int8": [("bool", "BOOL")]}  # fmt: skip
    wire = f.get("wire_dtype") or f.get("dtype")
    if wire not in same:
        return
    new, st = c.rng.choice(same[wire])
    name = f["name"]
    f["dtype"] = new
    f.pop("wire_dtype", None)
    sf = s.get("fields", {}).get(name)  # type: ignore[union-attr]
    if isinstance(sf, dict):
        sf["dtype"] = new
        for k in ("wire_dtype", "lossy"):
            sf.pop(k, None)
    if name in p.tensors():
        t = p.tensor(name)  # type: ignore[arg-type]
        t["dtype"] = st
        p.set_tensor(name, t)  # type: ignore[arg-type]
    if legacy:
        p.meta_set("py_wire.fields", json.dumps(fields))
    _set_schema(c, p, json.dumps(s, sort_keys=True, separators=(",", ":")))
    c.note(f"coordinated dtype {name}: {wire} -> {new}" + (" (format 1)" if legacy else ""))


@structural
def coordinated_rows(c: Ctx, p: Parsed) -> None:
    """num_rows and every [B+1] / [B] table shortened or lengthened in the header only."""
    nr = p.meta_get("py_wire.num_rows")
    if not isinstance(nr, str) or not nr.isdigit():
        return
    b = int(nr)
    delta = c.rng.choice([-1, 1, 2**40])
    p.meta_set("py_wire.num_rows", str(b + delta))
    for k in p.tensors():
        t = p.tensor(k)
        shape = t["shape"]
        if isinstance(shape, list) and shape and shape[0] in (b, b + 1) and b + delta >= 0:
            shape[0] += delta
            p.set_tensor(k, t)
    c.note(f"num_rows and row tables {b} -> {b + delta}")


# -- byte-level ----------------------------------------------------------------------------------


def _header_end(frame: bytes) -> int:
    return 8 + struct.unpack_from("<Q", frame, 0)[0] if len(frame) >= 8 else len(frame)


@bytewise
def header_len_lie(c: Ctx, frame: bytes) -> bytes:
    n = struct.unpack_from("<Q", frame, 0)[0]
    v = c.rng.choice([0, 1, 2, n - 1, n + 1, n - 64, n + 64, n + 8, len(frame), len(frame) - 8,
                      len(frame) - 7, 2**31, 2**32, 100_000_001, 2**63, 2**64 - 1])  # fmt: skip
    c.note(f"header length {n} -> {v}")
    return struct.pack("<Q", v % 2**64) + frame[8:]


@bytewise
def header_text(c: Ctx, frame: bytes) -> bytes:
    n = struct.unpack_from("<Q", frame, 0)[0]
    text = frame[8 : 8 + n]
    how = c.rng.choice(["truncate", "nest", "nonobject", "nonutf8", "nul", "bom", "dupmeta"])
    if how == "truncate":
        cut = c.rng.randrange(len(text))
        new = text[:cut]
    elif how == "nest":
        d = c.rng.choice([64, 129, 1000, 100_000])
        new = b'{"a":' * d + b"1" + b"}" * d
    elif how == "nonobject":
        new = c.rng.choice([b"[]", b"1", b'"x"', b"null", b"true", b"[" + text + b"]"])
    elif how == "nonutf8":
        i = c.rng.randrange(len(text))
        new = text[:i] + c.rng.choice([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\x80"]) + text[i + 1 :]
    elif how == "nul":
        i = c.rng.randrange(len(text))
        new = text[:i] + b"\x00" + text[i + 1 :]
    elif how == "bom":
        new = b"\xef\xbb\xbf" + text
    else:
        new = text.replace(b"{", b'{"__metadata__":{},', 1)
    c.note(f"header text: {how}")
    new += b" " * (-(8 + len(new)) % 64)
    return struct.pack("<Q", len(new)) + new + frame[8 + n :]


@bytewise
def trailing(c: Ctx, frame: bytes) -> bytes:
    k = c.rng.choice([1, 7, 8, 63, 64, 65, 4096])
    c.note(f"{k} trailing bytes")
    return frame + bytes(c.rng.randrange(256) for _ in range(k))


@bytewise
def truncate(c: Ctx, frame: bytes) -> bytes:
    h = _header_end(frame)
    cut = c.rng.choice([c.rng.randrange(len(frame)), c.rng.randrange(h, len(frame) + 1),
                        len(frame) - 1, len(frame) - 64, h, h - 1, 7, 8, 0])  # fmt: skip
    cut = max(0, min(cut, len(frame)))
    c.note(f"truncate to {cut} of {len(frame)}")
    return frame[:cut]


@bytewise
def bitflip_header(c: Ctx, frame: bytes) -> bytes:
    h = min(_header_end(frame), len(frame))
    data = bytearray(frame)
    where = []
    for _ in range(c.rng.choice([1, 1, 2, 4, 8])):
        i = c.rng.randrange(h)
        data[i] ^= 1 << c.rng.randrange(8)
        where.append(i)
    c.note(f"header bit flips at {where}")
    return bytes(data)


@bytewise
def bitflip_data(c: Ctx, frame: bytes) -> bytes:
    h = _header_end(frame)
    if h >= len(frame):
        return frame
    data = bytearray(frame)
    where = []
    for _ in range(c.rng.choice([1, 2, 4, 16])):
        i = c.rng.randrange(h, len(frame))
        data[i] ^= 1 << c.rng.randrange(8)
        where.append(i)
    c.note(f"data bit flips at {where}")
    return bytes(data)


# -- mutants -------------------------------------------------------------------------------------

# Weights: structural mutations dominate (they reach deep code); byte-level ones keep the
# classic fuzzing coverage.
_WEIGHTS = {name: 3 for name in STRUCTURAL} | {name: 2 for name in BYTEWISE}
_WEIGHTS.update(index_values=12, meta_num_rows=5, meta_fields_json=6, meta_schema_json=6,
                tensor_shape=6, tensor_offsets=5, coordinated_rows=3, zero_size_huge_segment=4)  # fmt: skip  # noqa: E501
_NAMES = sorted(_WEIGHTS)


@dataclass
class Mutant:
    index: int
    seed_name: str
    ops: list[str]
    notes: list[str]
    data: bytes

    def describe(self) -> str:
        return f"mutant #{self.index} of seed {self.seed_name!r} ({len(self.data)} bytes): " + (
            "; ".join(f"{op}({note})" for op, note in zip(self.ops, self.notes, strict=True))
        )


def mutant(seeds: list[tuple[str, bytes]], index: int, campaign: str = "py_wire") -> Mutant:
    """Mutant number ``index``: one to three mutations of one seed frame, chosen by a generator
    seeded with ``(campaign, index)`` only."""
    rng = random.Random(f"{campaign}:{index}")
    seed_name, frame = seeds[rng.randrange(len(seeds))]
    c = Ctx(rng, frame)
    ops = rng.choices(_NAMES, weights=[_WEIGHTS[n] for n in _NAMES], k=rng.choice([1, 1, 1, 2, 3]))
    # Structural mutations first (they need a parsable header), byte-level ones last.
    ops.sort(key=lambda n: n in BYTEWISE)
    data = frame
    parsed: Parsed | None = None
    done: list[str] = []
    notes: list[str] = []
    for op in ops:
        before = len(c.notes)
        try:
            if op in STRUCTURAL:
                if parsed is None:
                    parsed = Parsed.of(data)
                STRUCTURAL[op](c, parsed)
            else:
                if parsed is not None:
                    data, parsed = parsed.build(), None
                data = BYTEWISE[op](c, data)
        except Exception as e:  # an earlier mutation left nothing this one applies to
            c.note(f"skipped: {type(e).__name__}")
            if parsed is not None:
                try:
                    parsed.build()
                except Exception:
                    parsed = None
        notes.append(", ".join(c.notes[before:]) or "no-op")
        done.append(op)
    if parsed is not None:
        data = parsed.build()
    return Mutant(index, seed_name, done, notes, data)
