"""``Schema.from_json`` under hostile text: the hostile-argument campaign's share for the schema
reader a frame's bytes reach first.

The rule is the sweep's (``test_hostile_sweep.py``): a call gives a ``Schema``, or raises a
:class:`WireError` (a ``SchemaError``) or a ``TypeError`` naming ``text``; nothing else escapes
(no ``OverflowError``, ``RecursionError``, ``UnicodeError``, pydantic ``ValidationError``,
``PanicException``). The texts are bundled schemas' JSON (the canonical form frames embed and
the full form), mutated byte by byte and value by value from a seeded generator, plus values
that are not text at all.

CI makes ``PY_WIRE_HOSTILE_SCHEMA_CALLS`` (default 3,000) calls, a seeded sample; the campaign
(``scripts/hostile_campaign.py``, 20,000 calls a chunk by default) runs more per chunk, each
chunk with its own ``PY_WIRE_HOSTILE_SEED``, and reads the outcome counts from
``PY_WIRE_HOSTILE_REPORT``.
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import py_wire
from tests.helpers import HugeLen, HugeLenPlain

CALLS = int(os.environ.get("PY_WIRE_HOSTILE_SCHEMA_CALLS", "3000"))
SEED = int(os.environ.get("PY_WIRE_HOSTILE_SEED", "0"))
OUTCOMES: Counter[str] = Counter()

SEEDS: list[str] = []
for _name in py_wire.bundled_schemas():
    _schema = py_wire.load_schema(_name)
    SEEDS += [_schema.canonical_json, json.dumps(_schema.model_dump())]

#: Values that are not a schema's text.
NOT_TEXT: list[Any] = [
    range(2**70),
    range(3),
    2**70,
    -1,
    None,
    1.5,
    float("nan"),
    b"{}",
    bytearray(b"{}"),
    memoryview(b"{}"),
    ["{}"],
    {"name": "s"},
    HugeLen(),
    HugeLenPlain(),
    object(),
    Path("schema.json"),
]

#: Tokens spliced into texts: JSON's own syntax, numbers past every range, escapes, and
#: characters that are not valid on their own.
TOKENS = [
    "{", "}", "[", "]", '"', ":", ",", "\\", "\\u", "\\ud800", "\\u0000", "1e999", "-1e999",
    "NaN", "Infinity", "-0", "9" * 5000, "1" + "0" * 400, "true", "null", "\x00", "\ud800",
    "\u2028", "[" * 40, "{" * 40, "]" * 40, '{"a":' * 30,
]  # fmt: skip

#: Values put in place of one of a schema's values.
VALUES: list[Any] = [
    None, True, -1, 0, 2**63, 2**64, -(2**63) - 1, 10**400, 1.5, float("nan"), float("inf"),
    "", "*", "x" * 5000, "\x00", [], [None], [["*"]] * 3, {}, {"": None}, [2**64, -1],
    list(range(5000)), {str(i): i for i in range(100)},
]  # fmt: skip


def _paths(value: Any, at: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield at
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, (*at, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            yield from _paths(item, (*at, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: _replace(value[head], rest, new)}
    out = list(value)
    out[head] = _replace(value[head], rest, new)
    return out


def _structural(rng: random.Random, text: str) -> str:
    """One of the schema's values (or keys) replaced, removed or added to."""
    data = json.loads(text)
    paths = list(_paths(data))
    path = rng.choice(paths)
    choice = rng.random()
    if choice < 0.6 or not path:
        data = _replace(data, path, rng.choice(VALUES))
    elif choice < 0.8:
        parent = _get(data, path[:-1])
        if isinstance(parent, dict):
            parent = {k: v for k, v in parent.items() if k != path[-1]}
        else:
            parent = [v for i, v in enumerate(parent) if i != path[-1]]
        data = _replace(data, path[:-1], parent)
    else:
        parent = _get(data, path[:-1])
        if isinstance(parent, dict):
            parent = {**parent, rng.choice(["name", "tier", "x", "", "fields"]): rng.choice(VALUES)}
        else:
            parent = [*parent, rng.choice(VALUES)]
        data = _replace(data, path[:-1], parent)
    return json.dumps(data)


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for p in path:
        value = value[p]
    return value


def _textual(rng: random.Random, text: str) -> str:
    """The text cut, spliced or with characters changed."""
    n = len(text)
    i = rng.randrange(n)
    j = min(n, i + rng.randrange(1, 64))
    choice = rng.randrange(6)
    if choice == 0:
        return text[:i]
    if choice == 1:
        return text[:i] + text[j:]
    if choice == 2:
        return text[:i] + rng.choice(TOKENS) + text[i:]
    if choice == 3:
        return text[:i] + chr(rng.randrange(0x110000)) + text[i + 1 :]
    if choice == 4:
        return text[:i] + text[i:j] * rng.randrange(2, 50) + text[j:]
    k = rng.randrange(n)
    return text[:i] + text[k : k + 32] + text[i:]


def hostile_texts(seed: int, calls: int) -> Iterator[Any]:
    """``calls`` arguments for ``Schema.from_json``: mostly mutated schema texts, some values
    that are not text."""
    rng = random.Random(seed)
    for _ in range(calls):
        kind = rng.random()
        if kind < 0.05:
            yield rng.choice(NOT_TEXT)
            continue
        text = rng.choice(SEEDS)
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            if rng.random() < 0.5:
                try:
                    text = _structural(rng, text)
                    continue
                except ValueError:  # the text is no longer JSON: mutate it as text
                    pass
            text = _textual(rng, text) or text
        yield text


def check(text: Any) -> str:
    """``Schema.from_json(text)``'s outcome; fails on anything the rule forbids."""
    OUTCOMES["calls"] += 1
    try:
        py_wire.Schema.from_json(text)
    except py_wire.WireError:
        OUTCOMES["WireError"] += 1
        return "WireError"
    except TypeError as e:
        OUTCOMES["TypeError"] += 1
        assert "text" in str(e), f"from_json({text!r:.120}): TypeError does not name text: {e}"
        return "TypeError"
    except Exception as e:  # the rule: nothing else escapes
        OUTCOMES["outside the rule"] += 1
        pytest.fail(f"from_json({text!r:.200}) raised {type(e).__name__}: {e}")
    OUTCOMES["ok"] += 1
    return "ok"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        (range(2**70), "TypeError"),  # was OverflowError (len() of the range)
        (12, "TypeError"),  # was a TypeError that did not name text
        (b"{}", "TypeError"),
        ("1" * 5000, "WireError"),
        ("[" * 100, "WireError"),
        ('{"name": "s", "fields": {}, "version": 1e999}', "WireError"),
    ],
)
def test_the_reported_escapes(text: Any, want: str) -> None:
    assert check(text) == want


def test_from_json_campaign() -> None:
    for text in hostile_texts(SEED, CALLS):
        check(text)
    assert OUTCOMES["calls"] >= CALLS
    # The mutants reach past the JSON reader: some are schemas, many are refused by the model.
    assert OUTCOMES["ok"] > 0 and OUTCOMES["WireError"] > 0


def teardown_module() -> None:
    report = os.environ.get("PY_WIRE_HOSTILE_REPORT")
    if report:
        Path(report).write_text(json.dumps(dict(OUTCOMES), sort_keys=True) + "\n")
