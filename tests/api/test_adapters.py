"""``py_wire.adapters``: the framework adapters and the streaming backends are built from
public names only, and the adapters share one face."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

import py_wire

INTEROP = Path(py_wire.__file__).parent / "interop"
STREAMING = Path(py_wire.__file__).parent / "streaming"
#: The framework adapters, each a module or package whose ``__all__`` is its public face.
ADAPTERS = ("py_wire.interop.nemo_rl", "py_wire.interop.transfer_queue", "py_wire.interop.verl")


def _private_imports(path: Path, root: Path, own: str | None = None) -> list[str]:
    """Each import of a private py_wire module in ``path`` (``py_wire._x``, ``py_wire._x.y`` or
    ``from py_wire import _x``), as ``file:line: module``; the private modules of package
    ``own`` (``py_wire.streaming._step``) are its own to import."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            modules = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            modules = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        for module in modules:
            head, *rest = module.split(".")
            if own is not None and module.startswith(own + "."):
                continue
            if head == "py_wire" and any(part.startswith("_") for part in rest):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {module}")
                break
    return found


def test_no_interop_module_imports_a_private_module_of_the_core() -> None:
    files = sorted(INTEROP.rglob("*.py"))
    assert len(files) >= 9  # interop/__init__, nemo_rl, verl, the TQ package's six
    found = [hit for path in files for hit in _private_imports(path, INTEROP.parent.parent)]
    assert not found, "import these from py_wire or py_wire.adapters:\n" + "\n".join(found)


def _adapter_internals(path: Path, root: Path) -> list[str]:
    """Each use in ``path`` of what is not a framework adapter's public face: an import of a
    module of an adapter package (``py_wire.interop.transfer_queue.columns``) or of a name
    outside an adapter's ``__all__``, and an attribute outside it read off an adapter module
    imported whole (``verl._inputs`` after ``from py_wire.interop import verl``), as
    ``file:line: module.name``."""
    found = []
    tree = ast.parse(path.read_text(), str(path))
    aliases: dict[str, str] = {}  # a name bound to an adapter module -> the module
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            wanted = [(a.name, None, a.asname) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            wanted = [(node.module, a.name, a.asname) for a in node.names]
        else:
            continue
        for module, name, asname in wanted:
            if not module.startswith("py_wire.interop"):
                continue
            if module == "py_wire.interop" and name is not None:
                ok = f"{module}.{name}" in ADAPTERS
                if ok:
                    aliases[asname or name] = f"{module}.{name}"
            elif module in ADAPTERS:
                ok = name is None or name in importlib.import_module(module).__all__
                if name is None and asname is not None:
                    aliases[asname] = module
            else:
                ok = False
            if not ok:
                what = module if name is None else f"{module}.{name}"
                found.append(f"{path.relative_to(root)}:{node.lineno}: {what}")
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in aliases
        ):
            module = aliases[node.value.id]
            if node.attr not in importlib.import_module(module).__all__:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {module}.{node.attr}")
    return sorted(found, key=lambda hit: int(hit.split(":")[1]))


def test_no_streaming_module_imports_a_private_module_of_the_core() -> None:
    """The streaming backends, like the adapters, use py_wire's, py_wire.adapters' and the
    adapters' public names: of the core's private modules none, of an adapter's only its
    ``__all__``."""
    files = sorted(STREAMING.rglob("*.py"))
    assert len(files) >= 9  # streaming/__init__, its five private modules, three backends
    root = STREAMING.parent.parent
    found = [hit for path in files for hit in _private_imports(path, root, "py_wire.streaming")]
    found += [hit for path in files for hit in _adapter_internals(path, root)]
    assert not found, (
        "import these from py_wire, py_wire.adapters or an adapter's __all__:\n" + "\n".join(found)
    )


def test_the_check_names_each_private_import_by_file_and_line(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "import torch\n"
        "from py_wire import Frame\n"
        "from py_wire.adapters import names\n"
        "from py_wire._args import names\n"
        "from py_wire import _native\n"
        "import py_wire._schema.files\n"
    )
    assert _private_imports(probe, tmp_path) == [
        "probe.py:4: py_wire._args",
        "probe.py:5: py_wire._native",
        "probe.py:6: py_wire._schema.files",
    ]
    probe.write_text(
        "from py_wire.streaming import _checks\n"
        "from py_wire.streaming._step import Step\n"
        "from py_wire._decode import decode\n"
    )
    assert _private_imports(probe, tmp_path, "py_wire.streaming") == ["probe.py:3: py_wire._decode"]


def test_the_check_names_each_import_past_an_adapters_public_face(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from py_wire.interop import verl\n"
        "from py_wire.interop.transfer_queue import TEXT, stored_frames\n"
        "from py_wire.interop.transfer_queue import column_of\n"
        "from py_wire.interop.transfer_queue.columns import frames_column\n"
        "import py_wire.interop.transfer_queue.put\n"
        "from py_wire.interop import transfer_queue as ptq, nowhere\n"
        "import py_wire.interop.verl as pv\n"
        "verl.to_frame(ptq.TEXT, pv.from_fields)\n"
        "verl._inputs(ptq._column, pv._Record.read)\n"
    )
    assert _adapter_internals(probe, tmp_path) == [
        "probe.py:3: py_wire.interop.transfer_queue.column_of",
        "probe.py:4: py_wire.interop.transfer_queue.columns.frames_column",
        "probe.py:5: py_wire.interop.transfer_queue.put",
        "probe.py:6: py_wire.interop.nowhere",
        "probe.py:9: py_wire.interop.verl._inputs",
        "probe.py:9: py_wire.interop.transfer_queue._column",
        "probe.py:9: py_wire.interop.verl._Record",
    ]


@pytest.mark.parametrize("name", ["py_wire.interop.nemo_rl", "py_wire.interop.verl"])
def test_each_framework_adapter_offers_to_frame_and_from_frame(name: str) -> None:
    """The common face: ``to_frame(obj, schema, stage, ...)`` and ``from_frame(frame, stage, *,
    ..., writable)``, the same positions and keywords in every framework adapter."""
    module = importlib.import_module(name)
    for verb in ("to_frame", "from_frame"):
        assert verb in module.__all__, f"{name} lacks {verb}"
    to_params = list(inspect.signature(module.to_frame).parameters.values())
    assert [p.name for p in to_params[1:3]] == ["schema", "stage"], name
    assert to_params[2].default is None
    from_params = inspect.signature(module.from_frame).parameters
    assert list(from_params)[:2] == ["frame", "stage"], name
    assert from_params["writable"].kind is inspect.Parameter.KEYWORD_ONLY
    assert from_params["writable"].default == "auto"


def test_the_adapters_module_holds_what_the_adapters_import_from_it() -> None:
    """Small on purpose: every name of ``py_wire.adapters`` is one an adapter or a streaming
    backend imports, and each name they import from it is in its ``__all__``."""
    import py_wire.adapters

    imported = {
        alias.name
        for path in [*INTEROP.rglob("*.py"), *STREAMING.rglob("*.py")]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and node.module == "py_wire.adapters"
        for alias in node.names
    }
    assert imported == set(py_wire.adapters.__all__)
    assert len(py_wire.adapters.__all__) == len(imported)  # no name twice
