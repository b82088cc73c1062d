"""The public surface: the names py_wire exports, where the trainer helpers live, and what a
missing optional dependency says."""

from __future__ import annotations

import subprocess
import sys
import textwrap

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
