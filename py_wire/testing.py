"""Hypothesis strategies for fuzzing pipelines that move batches through py_wire.

``schemas()`` draws valid :class:`py_wire.Schema` objects over every tier, dtype and shape
pattern; ``batches(schema)`` draws a batch for a schema in every input form ``encode`` accepts
(rows with ``None`` and zero-size segments, several segments per row, jagged nested tensors,
padded tensors with lengths, non-contiguous views, numpy arrays, bit patterns such as NaNs with
payloads and subnormals); ``assert_batch_equal`` checks, bit for bit, that what came out of a
frame is what went in, whatever form each side uses.

Example::

    from hypothesis import given, strategies as st

    import py_wire
    from py_wire.testing import assert_batch_equal, batches, schemas


    @given(st.data())
    def test_my_transport_roundtrips(data):
        schema = data.draw(schemas())
        batch = data.draw(batches(schema))
        frame = py_wire.encode(batch, schema)
        received = my_transport(bytes(frame))  # your pipeline
        assert_batch_equal(py_wire.decode(received, layout="list"), batch, schema)

To fuzz your own schema, skip ``schemas()``: ``batches(py_wire.load_schema("text_grpo"))``.
``batches`` keeps placeholder contracts trivially true (rows of the fields they involve carry
no media), so media alignment needs hand-written batches.

Requires ``hypothesis``: ``pip install 'py_wire[testing]'``.
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from typing import Any, get_args

import numpy as np
import torch

try:
    from hypothesis import strategies as st
    from hypothesis.strategies import SearchStrategy
except ModuleNotFoundError as missing:  # pragma: no cover (the dev environment has it)
    raise ModuleNotFoundError(
        "py_wire.testing draws batches with hypothesis, which py_wire itself does not need: "
        "install the extra, pip install 'py_wire[testing]'",
        name=missing.name,
    ) from missing

from py_wire import _tiers
from py_wire._compare import assert_batch_equal
from py_wire._dtypes import DTYPES
from py_wire._packed import PackedTensor
from py_wire._schema import DEFAULT_STAGES, WIRE_CASTS, FieldDef, Schema
from py_wire._tiers.names import Tier

__all__ = ["assert_batch_equal", "batches", "schemas"]

TIERS: tuple[str, ...] = get_args(Tier)

#: dtypes numpy can hold (numpy arrays are sometimes drawn instead of tensors for these).
_NUMPY_DTYPES = frozenset(
    n for n in DTYPES if n not in ("bfloat16", "float8_e4m3fn", "float8_e5m2")
)
_UNSIGNED = {"uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64}
_SIGNED = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}

# Bit patterns worth having in every float payload: -0.0, +inf, -inf, a signalling NaN with a
# payload, a negative quiet NaN with a payload, the smallest subnormal, the largest finite.
_SPECIAL_BITS: dict[int, tuple[str, tuple[int, ...]]] = {
    # element size in bytes -> (numpy unsigned view, patterns)
    2: ("<u2", (0x8000, 0x7C00, 0xFC00, 0x7C01, 0xFE01, 0x0001, 0x7BFF)),  # float16
    4: ("<u4", (0x80000000, 0x7F800000, 0xFF800000, 0x7F800001, 0xFFC00001, 0x1, 0x7F7FFFFF)),
    8: (
        "<u8",
        (
            0x8000000000000000,
            0x7FF0000000000000,
            0xFFF0000000000000,
            0x7FF0000000000001,
            0xFFF8000000000001,
            0x1,
            0x7FEFFFFFFFFFFFFF,
        ),
    ),
}
_BF16_SPECIAL = (0x8000, 0x7F80, 0xFF80, 0x7F81, 0xFFC1, 0x0001, 0x7F7F)


# ---------------------------------------------------------------------------------------------
# schemas
# ---------------------------------------------------------------------------------------------

_IDENT_START = string.ascii_letters + "_"
_IDENT_REST = string.ascii_letters + string.digits + "_"


@st.composite
def _identifier(draw: st.DrawFn) -> str:
    name = draw(st.sampled_from(_IDENT_START)) + draw(st.text(_IDENT_REST, max_size=10))
    if name.startswith("__"):
        name = "f" + name
    return name


def _pad_value(dtype: str) -> SearchStrategy[Any]:
    if dtype == "bool":
        return st.booleans()
    if dtype in _UNSIGNED:
        return st.integers(0, 100)
    if dtype in _SIGNED:
        return st.integers(-100, 100)
    if dtype.startswith("float8"):
        # Values both float8 formats hold exactly.
        return st.sampled_from([0.0, -1.0, 0.5, 2.0])
    return st.sampled_from([0, 0.0, -0.0, -1.0, 1.5, 7])


@st.composite
def _field(
    draw: st.DrawFn,
    tier: str,
    dtypes: Sequence[str],
    stages: tuple[str, ...],
    *,
    shape: tuple[Any, ...] | None = None,
    dtype: str | None = None,
    required: bool | None = None,
    wire_casts: bool = False,
) -> dict[str, Any]:
    dtype = dtype if dtype is not None else draw(st.sampled_from(dtypes))
    spec: dict[str, Any] = {"tier": tier, "dtype": dtype}
    if shape is None:
        items = _tiers.items(tier)
        if items == "segments":
            rank = draw(st.integers(1, 4))
            shape = tuple(
                draw(
                    st.lists(
                        st.one_of(st.just("*"), st.integers(0, 4)), min_size=rank, max_size=rank
                    )
                )
            )
            spec["pack_dim"] = draw(st.integers(-rank, rank - 1))
        elif items == "tokens":
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
        else:
            shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    # Mix lists and tuples: the schema accepts either.
    spec["shape"] = list(shape) if draw(st.booleans()) else tuple(shape)
    spec["required"] = draw(st.booleans()) if required is None else required
    if draw(st.booleans()):
        spec["stages"] = draw(st.lists(st.sampled_from(stages), min_size=1, unique=True))
    if draw(st.booleans()):
        spec["pad_value"] = draw(_pad_value(dtype))
    if wire_casts:
        casts = [wire for (src, wire) in WIRE_CASTS if src == dtype]
        # len(): with `casts and ...`, mypy infers draw()'s type from the list on the left.
        if len(casts) > 0 and draw(st.booleans()):
            spec["wire_dtype"] = draw(st.sampled_from(casts))
            spec["lossy"] = True
    if draw(st.integers(0, 3)) == 0:
        spec["description"] = draw(st.text(max_size=12))
    return spec


@st.composite
def _schemas(
    draw: st.DrawFn,
    tiers: tuple[str, ...],
    dtypes: tuple[str, ...],
    max_fields: int,
    wire_casts: bool,
) -> Schema:
    stages: tuple[str, ...]
    if draw(st.booleans()):
        stages = DEFAULT_STAGES
    else:
        stages = tuple(draw(st.lists(_identifier(), min_size=1, max_size=4, unique=True)))
    n = draw(st.integers(1, max_fields))
    names = draw(st.lists(_identifier(), min_size=n, max_size=n, unique=True))
    field_tiers = draw(st.lists(st.sampled_from(tiers), min_size=n, max_size=n))
    lengths_dtypes = [d for d in ("int64", "int32") if d in dtypes]
    fields: dict[str, dict[str, Any]] = {}
    sequence = lengths = None
    # Which drawn fields' rows are tokens, which one value a row; the tiers whose are.
    tokens = [_tiers.items(t) == "tokens" for t in field_tiers]
    one_a_row = [_tiers.items(t) == "rows" for t in field_tiers]
    rows_tiers = [t for t in tiers if _tiers.items(t) == "rows"]
    if any(tokens):
        # The sequence field: a per-token field with no trailing dims. Usually required.
        sequence = names[tokens.index(True)]
        want_lengths = bool(rows_tiers) and lengths_dtypes and n >= 2 and draw(st.booleans())
        if want_lengths:
            candidates = [nm for nm, t in zip(names, field_tiers, strict=True) if nm != sequence]
            lengths = draw(st.sampled_from(candidates))
    elif any(one_a_row) and lengths_dtypes and draw(st.integers(0, 3)) == 0:
        # A lengths field without any per-token field is legal too.
        lengths = names[one_a_row.index(True)]
    for name, tier in zip(names, field_tiers, strict=True):
        if name == sequence:
            fields[name] = draw(
                _field(
                    tier,
                    dtypes,
                    stages,
                    shape=(),
                    required=draw(st.integers(0, 4)) != 0,
                    wire_casts=wire_casts,
                )
            )
        elif name == lengths:
            fields[name] = draw(
                _field(
                    rows_tiers[0],
                    dtypes,
                    stages,
                    shape=(),
                    dtype=draw(st.sampled_from(lengths_dtypes)),
                )
            )
        else:
            fields[name] = draw(_field(tier, dtypes, stages, wire_casts=wire_casts))
    data: dict[str, Any] = {
        "name": draw(_identifier()),
        "fields": fields,
    }
    if stages != DEFAULT_STAGES or draw(st.booleans()):
        data["stages"] = list(stages)
    if sequence is not None:
        data["sequence_field"] = sequence
    if lengths is not None:
        data["lengths_field"] = lengths
    if draw(st.booleans()):
        data["version"] = draw(st.integers(1, 5))
    if draw(st.booleans()):
        data["description"] = draw(st.text(max_size=20))
    return Schema.model_validate(data)


def schemas(
    *,
    tiers: Sequence[str] = TIERS,
    dtypes: Sequence[str] | None = None,
    max_fields: int = 6,
    wire_casts: bool = False,
) -> SearchStrategy[Schema]:
    """Valid schemas with 1..``max_fields`` fields drawn from ``tiers`` and ``dtypes``.

    Covers every dtype in ``py_wire._dtypes.DTYPES`` (default), packed fields of rank 1..4 with
    static and ragged (``"*"``) dims, static dims of size 0 and pack dims ``-rank..rank-1``
    (negative ones are normalised by the schema), per-token fields with 0..2 static trailing
    dims, scalars of rank 0..2 (including 0-d), required and optional fields, per-field stages and
    pad values. A schema with a per-token field always has a sequence field (a per-token field
    of shape ``()``), and sometimes a lengths field (a 0-d int32/int64 scalar).

    ``wire_casts=True`` also draws declared (lossy) wire casts such as float32 → bfloat16;
    :func:`assert_batch_equal` then compares against the input cast with torch.
    """
    tiers = tuple(tiers)
    bad = set(tiers) - set(TIERS)
    if not tiers or bad:
        raise ValueError(f"tiers must be a non-empty subset of {TIERS}, got {tiers}")
    chosen = tuple(DTYPES) if dtypes is None else tuple(dtypes)
    unknown = set(chosen) - set(DTYPES)
    if not chosen or unknown:
        raise ValueError(f"dtypes must be a non-empty subset of {sorted(DTYPES)}, got {chosen}")
    if max_fields < 1:
        raise ValueError("max_fields must be at least 1")
    return _schemas(tiers, chosen, max_fields, wire_casts)


# ---------------------------------------------------------------------------------------------
# tensors
# ---------------------------------------------------------------------------------------------


def _numel(shape: Sequence[int]) -> int:
    return math.prod(shape)


@st.composite
def _raw(draw: st.DrawFn, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
    """``nbytes`` bytes (a contiguous uint8 tensor) of values for ``dtype``: random bit patterns,
    zeros, or random bits seeded with special float values."""
    mode = draw(st.sampled_from(("random", "zeros", "special")))
    if nbytes == 0 or mode == "zeros":
        return torch.zeros(nbytes, dtype=torch.uint8)
    seed = draw(st.integers(0, 2**32 - 1))
    gen = torch.Generator().manual_seed(seed)
    raw = torch.randint(0, 256, (nbytes,), dtype=torch.uint8, generator=gen)
    if dtype == torch.bool:
        raw &= 1
    elif mode == "special" and (dtype.is_floating_point or dtype.is_complex):
        width = dtype.itemsize // 2 if dtype.is_complex else dtype.itemsize
        if width in _SPECIAL_BITS:
            view_type, patterns = _SPECIAL_BITS[width]
            if dtype == torch.bfloat16:
                patterns = _BF16_SPECIAL
            words = raw.numpy().view(view_type)
            count = max(1, words.shape[0] // 3)
            where = torch.randint(0, words.shape[0], (count,), generator=gen).numpy()
            which = torch.randint(0, len(patterns), (count,), generator=gen).numpy()
            words[where] = np.array(patterns, dtype=view_type)[which]
    return raw


@st.composite
def _tensor(
    draw: st.DrawFn, shape: Sequence[int], dtype_name: str, *, numpy_ok: bool = True
) -> Any:
    """A tensor (or numpy array) of ``shape``, in a drawn memory layout: contiguous, transposed
    (``.t()`` / ``.mT`` / ``.transpose`` of a tensor laid out the other way), step-sliced
    (``x[::2]``), expanded (stride 0), at a storage offset, or at a misaligned address."""
    dtype = DTYPES[dtype_name]
    shape = list(shape)
    rank = len(shape)
    layouts = ["contiguous", "offset", "misaligned"]
    if rank >= 1:
        layouts += ["step", "expanded"]
    if rank >= 2:
        layouts += ["transposed"]
    layout = draw(st.sampled_from(layouts))
    size = dtype.itemsize

    def base(base_shape: list[int]) -> torch.Tensor:
        raw = draw(_raw(_numel(base_shape) * size, dtype))
        return raw.view(dtype).reshape(base_shape)

    if layout == "contiguous":
        t = base(shape)
    elif layout == "offset":
        skip = draw(st.integers(1, 3))
        t = base([_numel(shape) + skip])[skip:].view(shape)
    elif layout == "misaligned":
        n = _numel(shape)
        if n == 0:
            t = base(shape)
        else:
            skip = draw(st.integers(1, max(1, size - 1)))
            buf = bytearray(skip) + bytearray(draw(_raw(n * size, dtype)).numpy().tobytes())
            t = torch.frombuffer(buf, dtype=dtype, count=n, offset=skip).view(shape)
    elif layout == "step":
        d = draw(st.integers(0, rank - 1))
        big = list(shape)
        big[d] = 2 * shape[d]
        index = [slice(None)] * rank
        index[d] = slice(None, None, 2)
        t = base(big)[tuple(index)]
    elif layout == "expanded":
        d = draw(st.integers(0, rank - 1))
        small = list(shape)
        small[d] = 1
        t = base(small).expand(shape)
    else:  # transposed
        if rank == 2:
            t = base([shape[1], shape[0]]).t()
        elif draw(st.booleans()):
            t = base([*shape[:-2], shape[-1], shape[-2]]).mT
        else:
            i, j = draw(st.lists(st.integers(0, rank - 1), min_size=2, max_size=2, unique=True))
            swapped = list(shape)
            swapped[i], swapped[j] = swapped[j], swapped[i]
            t = base(swapped).transpose(i, j)
    assert list(t.shape) == shape, (layout, t.shape, shape)
    if numpy_ok and dtype_name in _NUMPY_DTYPES and draw(st.integers(0, 4)) == 0:
        return t.numpy()
    return t


# ---------------------------------------------------------------------------------------------
# batches
# ---------------------------------------------------------------------------------------------


@st.composite
def _packed_value(
    draw: st.DrawFn,
    field: FieldDef,
    rows: int,
    max_segments: int,
    max_dim: int,
    uniform: bool,
    *,
    no_media: bool = False,
) -> Any:
    shared_dims = [draw(st.integers(0, max_dim)) for _ in field.shape]

    def segment_shape() -> list[int]:
        return [
            (shared_dims[i] if uniform else draw(st.integers(0, max_dim))) if d == "*" else d
            for i, d in enumerate(field.shape)
        ]

    form = draw(st.sampled_from(("list", "packed_tensor")))
    made: list[Any] = []
    out: list[Any] = []
    for _ in range(rows):
        if no_media:
            kind = draw(st.sampled_from(("none", "empty")))
        else:
            kind = draw(st.sampled_from(("none", "empty", "tensor", "segments", "tuple")))
        if kind == "none":
            out.append(None)
            continue
        if kind == "empty":
            out.append([])
            continue
        count = 1 if kind == "tensor" else draw(st.integers(1, max_segments))
        segs = []
        for _ in range(count):
            if made and draw(st.integers(0, 5)) == 0:
                # Rows that share a segment (GRPO repeats a prompt's images).
                segs.append(draw(st.sampled_from(made)))
            else:
                seg = draw(_tensor(segment_shape(), field.dtype, numpy_ok=form == "list"))
                made.append(seg)
                segs.append(seg)
        out.append(segs[0] if kind == "tensor" else tuple(segs) if kind == "tuple" else segs)
    rank = len(field.shape)
    pack_dim = field.pack_dim - rank if draw(st.booleans()) else field.pack_dim
    if form == "packed_tensor":
        return PackedTensor(out, pack_dim)
    return out


#: JSON values a field with ``encoding = "json"`` holds per row.
_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=6,
)


@st.composite
def _encoded_value(draw: st.DrawFn, encoding: str | None, rows: int) -> list[Any]:
    """One value per row for a field with an ``encoding``: text (``None`` sometimes) or a JSON
    value, equal values often (rows that share one stored segment)."""
    one = st.none() | st.text(max_size=12) if encoding == "utf8" else _JSON
    seen: list[Any] = []
    out = []
    for _ in range(rows):
        if seen and draw(st.integers(0, 3)) == 0:
            out.append(draw(st.sampled_from(seen)))
        else:
            value = draw(one)
            seen.append(value)
            out.append(value)
    return out


@st.composite
def _per_token_value(
    draw: st.DrawFn,
    field: FieldDef,
    seq_lengths: list[int],
    padded_ok: bool,
) -> Any:
    trailing = [int(d) for d in field.shape]
    rows = len(seq_lengths)
    forms = ["list", "tuple"]
    if rows > 0:
        forms.append("jagged")
    if padded_ok:
        forms.append("padded")
    form = draw(st.sampled_from(forms))
    if form == "jagged":
        # Values sometimes carry unused rows before and after the offsets' span; with holes,
        # rows are also separated by unused rows and the tensor carries lengths (as
        # torch.nested.narrow makes).
        before = draw(st.sampled_from((0, 0, 1, 2)))
        after = draw(st.sampled_from((0, 0, 1)))
        holes = draw(st.integers(0, 3)) == 0
        gaps = [draw(st.integers(0, 2)) if holes else 0 for _ in seq_lengths]
        starts = [before]
        for n, gap in zip(seq_lengths, gaps, strict=True):
            starts.append(starts[-1] + n + gap)
        values = draw(_tensor([starts[-1] + after, *trailing], field.dtype, numpy_ok=False))
        offsets = torch.tensor(starts, dtype=torch.int64)
        if holes:
            lengths = torch.tensor(seq_lengths, dtype=torch.int64)
            return torch.nested.nested_tensor_from_jagged(values, offsets, lengths=lengths)
        return torch.nested.nested_tensor_from_jagged(values, offsets)
    if form == "padded":
        width = max(seq_lengths, default=0) + draw(st.integers(0, 2))
        return draw(_tensor([rows, width, *trailing], field.dtype))
    out = [draw(_tensor([n, *trailing], field.dtype)) for n in seq_lengths]
    return tuple(out) if form == "tuple" else out


@st.composite
def _int_column(draw: st.DrawFn, values: list[int], dtype_name: str) -> Any:
    """A 1-D int tensor holding ``values``, sometimes step-sliced or as numpy."""
    dtype = DTYPES[dtype_name]
    t = torch.tensor(values, dtype=dtype)
    if draw(st.booleans()):
        wide = torch.zeros(2 * len(values), dtype=dtype)
        wide[::2] = t
        t = wide[::2]
    if draw(st.integers(0, 3)) == 0:
        return t.numpy()
    return t


@st.composite
def _batches(
    draw: st.DrawFn, schema: Schema, max_rows: int, max_segments: int, max_dim: int
) -> dict[str, Any]:
    # About one batch in six has 0 rows and one in six has 1 row.
    pick = draw(st.integers(0, 5))
    rows = min(pick, 1, max_rows) if pick < 2 else draw(st.integers(min(2, max_rows), max_rows))
    uniform = draw(st.booleans())
    if uniform:
        length = draw(st.integers(0, max_dim))
        seq_lengths = [length] * rows
    else:
        seq_lengths = [draw(st.integers(0, max_dim)) for _ in range(rows)]

    fields = schema.fields
    # Random data cannot satisfy placeholder contracts, so the fields they involve get rows
    # without media (the contracts then hold: random token ids never hit the placeholder ids).
    contracted = {
        ref
        for c in schema.contracts
        for key, ref in c.model_dump().items()
        if key.endswith("_field") and isinstance(ref, str)
    }
    present = {name: f.required or draw(st.integers(0, 3)) != 0 for name, f in fields.items()}
    seq = schema.sequence_field
    per_token = [n for n, f in fields.items() if _tiers.items(f.tier) == "tokens"]
    if seq is not None and any(present[n] for n in per_token):
        present[seq] = True
    lengths_name = schema.lengths_field
    has_lengths = lengths_name is not None and present[lengths_name]

    batch: dict[str, Any] = {}
    for name, field in fields.items():
        if not present[name]:
            if draw(st.integers(0, 3)) == 0:
                batch[name] = None  # an explicit None means absent too
            continue
        if name == lengths_name:
            if seq is not None and present[seq]:
                values = seq_lengths
            else:
                values = [draw(st.integers(0, max_dim)) for _ in range(rows)]
            batch[name] = draw(_int_column(values, field.dtype))
        elif field.encoding is not None:
            batch[name] = draw(_encoded_value(field.encoding, rows))
        elif _tiers.items(field.tier) == "segments":
            no_media = name in contracted
            batch[name] = draw(
                _packed_value(field, rows, max_segments, max_dim, uniform, no_media=no_media)
            )
        elif _tiers.items(field.tier) == "tokens":
            batch[name] = draw(_per_token_value(field, seq_lengths, has_lengths))
        else:
            batch[name] = draw(_tensor([rows, *(int(d) for d in field.shape)], field.dtype))
    # Field order in the batch need not follow the schema.
    keys = draw(st.permutations(list(batch)))
    return {k: batch[k] for k in keys}


def batches(
    schema: Schema,
    *,
    max_rows: int = 6,
    max_segments: int = 3,
    max_dim: int = 5,
) -> SearchStrategy[dict[str, Any]]:
    """Batches that ``py_wire.encode(batch, schema)`` must accept, in every input form.

    Rows: 0..``max_rows`` (0 and 1 are drawn often), sometimes all of one length. Packed fields:
    a list of rows (``None``, ``[]``, one tensor, a list or tuple of 1..``max_segments``
    segments, segments shared between rows) or a :class:`py_wire.PackedTensor` (pack dims
    sometimes negative); fields with an ``encoding``, one ``str`` or JSON value a row; ragged dims
    0..``max_dim``, so zero-size segments occur. Per-token fields: lists or tuples of rows,
    jagged nested tensors (rows > 0; values sometimes extend past the offsets' span, and
    sometimes rows have holes between them and the tensor carries ``lengths``, as
    ``torch.nested.narrow`` makes), or padded ``[B, L, ...]`` tensors with junk past each
    row's length (only when the schema's lengths field is in the batch). Scalars: ``[B, ...]``
    tensors. The lengths field matches the sequence lengths. Optional fields are sometimes
    missing or ``None``.

    Every tensor is drawn in a random memory layout (contiguous, ``.t()`` / ``.mT`` /
    transposed, ``x[::2]``, expanded, offset or misaligned) and sometimes as a numpy array, with
    random bit patterns (NaNs with payloads, -0.0, subnormals, infinities; bools are 0/1).

    Placeholder contracts hold trivially: the fields a contract involves get rows without
    media. Fuzz media alignment with hand-written batches.
    """
    if min(max_rows, max_segments, max_dim) < 0 or max_segments < 1:
        raise ValueError("max_rows and max_dim must be >= 0 and max_segments >= 1")
    return _batches(schema, max_rows, max_segments, max_dim)
