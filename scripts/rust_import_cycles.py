#!/usr/bin/env python3
"""Reports loops in the import graph of the Rust crate's files.

An edge A -> B means file A names an item defined in file B: through `use`, or a path in code
(`crate::x::y`, `super::y`, `self::y`, `$crate::y`, or a child module's name). A path to a
re-export (`pub use`) is an edge to the re-exporting file (but the crate root) and to the file
that defines the item, and `#[macro_export]`
macros resolve to the file that defines them. A parent declaring `mod child;` is not an edge,
and comments, strings and references inside a file to itself are ignored.

Usage: scripts/rust_import_cycles.py [SRC_DIR]   (default: the repository's rust_codec/src)
Prints each loop with the references that close it; exits 1 if there is any.
"""

from __future__ import annotations

import re
import sys
from collections import defaultdict
from collections.abc import Iterable, Iterator
from pathlib import Path

IDENT = r"[A-Za-z_][A-Za-z0-9_]*"

Mod = tuple[str, ...]
"""A module as its path from the crate root (`()` is lib.rs)."""
Graph = dict[Mod, dict[Mod, tuple[str, int]]]
"""file -> file it references -> (the first such path as written, its line)."""


def strip(text: str) -> str:
    """`text` with comments, string and char literals blanked (newlines kept)."""
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            depth, i = 1, i + 2
            while i < n and depth:
                if text.startswith("/*", i):
                    depth, i = depth + 1, i + 2
                elif text.startswith("*/", i):
                    depth, i = depth - 1, i + 2
                else:
                    out.append("\n" if text[i] == "\n" else "")
                    i += 1
        elif m := re.match(r'b?r(#*)"', text[i:]):
            end = text.find('"' + m.group(1), i + m.end())
            end = n if end < 0 else end + 1 + len(m.group(1))
            out.append('""' + "\n" * text.count("\n", i, end))
            i = end
        elif c == '"' or text.startswith('b"', i):
            j = i + (2 if c == "b" else 1)
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append('""' + "\n" * text.count("\n", i, j))
            i = j + 1
        elif m := re.match(r"b?'(\\.[^']*|[^\\'])'", text[i:]):
            out.append("' '")
            i += m.end()
        else:
            out.append(c)
            i += 1
    return "".join(out)


def module_of(path: Path, root: Path) -> Mod:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] in ("lib", "mod"):
        parts.pop()
    return tuple(parts)


def expand_use(tree: str) -> list[str]:
    """`a::{b, c::{d, e}}` -> ["a::b", "a::c::d", "a::c::e"] (`self` in braces: the prefix)."""
    tree = re.sub(r"\s+", "", tree)
    depth, start = 0, None
    for k, ch in enumerate(tree):
        if ch == "{":
            if depth == 0:
                start = k
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0 and start is not None:
                prefix, inner, rest = tree[:start], tree[start + 1 : k], tree[k + 1 :]
                items, d, cur = [], 0, ""
                for c2 in inner:
                    if c2 == "," and d == 0:
                        items.append(cur)
                        cur = ""
                        continue
                    d += c2 == "{"
                    d -= c2 == "}"
                    cur += c2
                items.append(cur)
                paths = []
                for item in filter(None, items):
                    for p in expand_use(item + rest):
                        paths.append(prefix.rstrip(":") if p == "self" else prefix + p)
                return paths
    return [re.sub(r"\bas\b.*$", "", tree)]


class Crate:
    def __init__(self, root: Path) -> None:
        self.root = root
        self.files = {module_of(p, root): p for p in sorted(root.rglob("*.rs"))}
        self.text = {m: strip(p.read_text()) for m, p in self.files.items()}
        self.macros: dict[str, Mod] = {}
        self.reexports: dict[Mod, dict[str, list[str]]] = defaultdict(dict)
        for mod, text in self.text.items():
            for name in re.findall(rf"macro_rules!\s*({IDENT})", text):
                self.macros[name] = mod
            for tree in re.findall(r"\bpub(?:\([^)]*\))?\s+use\s+([^;]+);", text):
                for full in expand_use(tree):
                    segs = full.split("::")
                    self.reexports[mod][segs[-1]] = segs

    def absolute(self, segs: list[str], here: Mod) -> list[str] | None:
        """The path from the crate root, or None for an external crate."""
        base: list[str] = list(here)
        if segs[0] in ("crate", "$crate"):
            base, segs = [], segs[1:]
        elif segs[0] in ("super", "self"):
            while segs and segs[0] in ("super", "self"):
                if segs[0] == "super":
                    base.pop()
                segs = segs[1:]
        elif (*base, segs[0]) not in self.files:
            return None
        return base + segs

    def resolve(self, path: list[str], seen: int = 0) -> list[Mod]:
        """The file defining the item `path` names (the deepest module file on it), last, after
        each file that re-exports it on the way there but the crate root (whose `pub use`
        lines are the crate's public face): a path through a module's re-export names that
        module's file too, so a loop through a `mod.rs` that re-exports is a loop."""
        k = len(path)
        while k and tuple(path[:k]) not in self.files:
            k -= 1
        mod, rest = tuple(path[:k]), path[k:]
        if rest and seen < 8:
            name = rest[0].rstrip("!")
            # `#[macro_export]` macros live at the crate root, wherever they are defined.
            if name in self.macros and (rest[0].endswith("!") or not mod):
                return [self.macros[name]]
            target = self.reexports.get(mod, {}).get(name)
            if target is not None:
                absolute = self.absolute(target, mod)
                if absolute is not None:
                    via = [mod] if mod else []
                    return via + self.resolve(absolute + rest[1:], seen + 1)
        return [mod]

    def references(self, mod: Mod) -> Iterator[tuple[Mod, str, int]]:
        """(target file, the path as written, line) for each reference in `mod`'s file."""
        text = self.text[mod]
        children = {m[-1] for m in self.files if m[:-1] == mod and len(m) == len(mod) + 1}
        # Inline modules (`mod tests { ... }`) shift what `self`/`super` mean.
        inline: list[tuple[int, str]] = []
        depth = 0
        line = 1
        head = rf"(?:\$crate|crate|super|self|{'|'.join(map(re.escape, children)) or '(?!)'})"
        token = re.compile(
            rf"\bmod\s+({IDENT})\s*\{{|[{{}}\n]|\buse\s+([^;]+);"
            rf"|(?<![A-Za-z0-9_:]){head}(?:::{IDENT}!?)+"
        )
        for m in token.finditer(text):
            s = m.group(0)
            if s == "\n":
                line += 1
                continue
            if s == "{":
                depth += 1
                continue
            if s == "}":
                depth -= 1
                while inline and inline[-1][0] > depth:
                    inline.pop()
                continue
            here = mod + tuple(name for _, name in inline)
            if m.group(1):
                depth += 1
                inline.append((depth, m.group(1)))
                continue
            trees = expand_use(m.group(2)) if m.group(2) else [s]
            line += s.count("\n")
            for written in trees:
                segs = [x for x in written.split("::") if x and x != "*"]
                if not segs:
                    continue
                absolute = self.absolute(segs, here)
                if absolute is None:
                    continue
                for target in self.resolve(absolute):
                    if target != mod and target in self.files:
                        yield target, written, line


def cycles(graph: Graph, nodes: Iterable[Mod]) -> list[list[Mod]]:
    """Strongly connected components with more than one file (Tarjan)."""
    index: dict[Mod, int] = {}
    low: dict[Mod, int] = {}
    stack: list[Mod] = []
    on: set[Mod] = set()
    out: list[list[Mod]] = []

    def visit(v: Mod) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, {}):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp: list[Mod] = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in nodes:
        if v not in index:
            visit(v)
    return out


def main() -> int:
    default = Path(__file__).resolve().parent.parent / "rust_codec" / "src"
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else default
    crate = Crate(root)
    graph: Graph = defaultdict(dict)
    for mod in crate.files:
        for target, written, line in crate.references(mod):
            graph[mod].setdefault(target, (written, line))
    name = {m: str(p.relative_to(root)) for m, p in crate.files.items()}
    edges = sum(len(v) for v in graph.values())
    print(f"{len(crate.files)} files, {edges} file-to-file edges under {root}")
    found = cycles(graph, sorted(crate.files))
    for comp in found:
        print("loop: " + ", ".join(name[m] for m in comp))
        members = set(comp)
        for a in comp:
            for b, (written, line) in sorted(graph.get(a, {}).items()):
                if b in members:
                    print(f"  {name[a]}:{line} -> {name[b]}  ({written})")
    if not found:
        print("no loops")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
