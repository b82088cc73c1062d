"""The public surface: the names py_wire exports, where the trainer helpers live, and what a
missing optional dependency says."""

from __future__ import annotations

import importlib
import inspect
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import py_wire
import py_wire.trainer

PUBLIC = {
    # errors
    "WireError", "BatchError", "ContractError", "FrameError", "InternalError", "SchemaError",
    "RowIndexError",
    "SchemaConflictWarning",
    "SchemaEvolutionWarning",
    # schemas
    "Schema", "FieldDef", "PlaceholderContract", "load_schema", "bundled_schemas",
    # the codec
    "encode", "encode_parts", "decode", "check_contracts", "placeholder_runs",
    "Frame", "PackedTensor", "FrameLayout", "FieldLayout", "TensorLoc", "ReceiveBuffer",
    # frame operations
    "take_rows", "chunk", "split", "shard", "concat", "truncate",
    # files and sizes
    "save", "load", "frame_nbytes", "encoded_nbytes",
    # namespaces
    "trainer",
}  # fmt: skip


def test_the_top_level_exports_exactly_the_public_names() -> None:
    assert set(py_wire.__all__) == PUBLIC
    assert len(py_wire.__all__) == len(PUBLIC)  # no name twice
    for name in PUBLIC:
        assert getattr(py_wire, name) is not None, name
    # Pre-release spellings are gone, not deprecated.
    for gone in ("select", "micro_batches", "pack_sequences", "shard_rows", "Bin", "to"):
        assert not hasattr(py_wire, gone), gone


def test_trainer_helpers_live_in_their_namespace() -> None:
    assert set(py_wire.trainer.__all__) == {
        "Bin",
        "MicroBatches",
        "iter_micro_batches",
        "micro_batches",
        "pack_sequences",
        "shard_rows",
        "to",
    }
    for name in py_wire.trainer.__all__:
        assert callable(getattr(py_wire.trainer, name)), name


def test_testing_without_hypothesis_names_the_extra() -> None:
    code = textwrap.dedent(
        """
        import sys
        sys.modules["hypothesis"] = None  # as if it were not installed
        try:
            import py_wire.testing
        except ModuleNotFoundError as e:
            print(e.name, "|", e)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    name, message = out.stdout.strip().split(" | ")
    assert name == "hypothesis"
    assert "pip install 'py_wire[testing]'" in message


def test_the_demo_runs_without_hypothesis() -> None:
    """hypothesis is a dev (and ``[testing]``) dependency: the demo, which a user runs first
    after installing the wheel, must not need it."""
    code = textwrap.dedent(
        """
        import sys
        sys.modules["hypothesis"] = None  # as if it were not installed
        from py_wire import demo
        demo.main(["--samples", "2", "--reps", "1"])
        print("hypothesis" in sys.modules and sys.modules["hypothesis"] is not None)
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().endswith("False"), out.stdout + out.stderr


def _documented_contracts() -> dict[str, set[str]]:
    """docs/api.md's "Module contracts": each module and the names it lists."""
    text = (Path(__file__).parents[2] / "docs" / "api.md").read_text()
    section = text.split("## Module contracts", 1)[1].split("\n## ", 1)[0]
    found = {}
    for line in section.splitlines():
        m = re.match(r"- `([\w.]+)`: (.*)", line)
        if m:
            found[m[1]] = set(re.findall(r"`(\w+)`", m[2]))
    return found


CONTRACT_MODULES = [
    "py_wire.trainer",
    "py_wire.distributed",
    "py_wire.adapters",
    "py_wire.interop.nemo_rl",
    "py_wire.interop.verl",
    "py_wire.interop.transfer_queue",
    "py_wire.streaming",
    "py_wire.streaming.tq",
    "py_wire.streaming.verl",
]


def test_every_public_module_has_a_documented_contract() -> None:
    assert set(_documented_contracts()) == set(CONTRACT_MODULES)


@pytest.mark.parametrize("name", CONTRACT_MODULES)
def test_a_modules_all_is_exactly_its_documented_names(name: str) -> None:
    module = importlib.import_module(name)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported)), f"{name}.__all__ names something twice"
    assert set(exported) == _documented_contracts()[name]
    for attr in exported:
        assert getattr(module, attr) is not None, f"{name}.{attr}"


@pytest.mark.parametrize("name", CONTRACT_MODULES)
def test_no_public_function_of_a_module_is_left_out_of_its_all(name: str) -> None:
    """A function a module defines without a leading underscore is either in ``__all__`` or
    lives in a submodule of its own (a package's internals), never a silent extra."""
    module = importlib.import_module(name)
    defined_here = {
        n
        for n, f in inspect.getmembers(module, inspect.isfunction)
        if not n.startswith("_") and f.__module__ == name
    }
    assert defined_here <= set(module.__all__), sorted(defined_here - set(module.__all__))


def _subclasses(cls: type) -> set[type]:
    return {s for c in cls.__subclasses__() for s in {c} | _subclasses(c)}


def test_every_error_class_the_core_raises_is_in_the_errors_page() -> None:
    """docs/errors.md names every class of the hierarchy a user of the core can catch (the
    streaming package's own errors are docs/streaming.md's), private module or not: a user sees
    ``type(err).__name__``."""
    page = (Path(__file__).resolve().parents[2] / "docs" / "errors.md").read_text()
    core = {
        c.__name__
        for c in _subclasses(py_wire.WireError) | {py_wire.WireError}
        if c.__module__.startswith("py_wire") and not c.__module__.startswith("py_wire.streaming")
    }
    assert {"PackedRowIndexError", "PackDimError"} <= core
    assert sorted(n for n in core if f"`{n}" not in page) == []
