"""The import layering of ghostify, lowest first:

    errors (and helpers that import nothing else of ghostify: files, the settings dataclasses and
    their flattening, heads, device) → architectures (facts about families) → method structure code
    (the methods' modules, and the registry through which a checkpoint rebuilds them) → checkpoint
    (and tokenization, which reads configs) → training / data / augment → steps → recipe / cli

A module imports only from its own layer or lower ones, and no chain of imports leads back to
where it started. Imports inside functions count too: they run as well, only later, so one that
closes a loop merely hides it.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

ROOT = "ghostify"
PACKAGE = Path(find_spec(ROOT).origin).parent  # without importing it

#: the layers, lowest first; a module belongs to the longest name listed that is it or contains it.
#: A module listed nowhere sits on the highest layer it imports from (so it may import what it
#: likes, and it is the modules below that may not import it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors", ("ghostify.errors", "ghostify.version", "ghostify.console", "ghostify.units", "ghostify.files",
                "ghostify.settings", "ghostify.flatten", "ghostify.heads", "ghostify.device")),
    ("architectures", ("ghostify.architectures",)),
    ("structure", ("ghostify.record", "ghostify.seeding", "ghostify.flops", "ghostify.attention", "ghostify.methods")),
    ("checkpoint", ("ghostify.checkpoint", "ghostify.tokenization", "ghostify.pooling")),
    ("training", ("ghostify.training", "ghostify.data", "ghostify.tasks", "ghostify.augment", "ghostify.testing",
                  "ghostify.export")),
    ("steps", ("ghostify.steps",)),
    ("interface", ("ghostify.recipe", "ghostify.cli", "ghostify.__main__")),
)
#: packages above the method structure code, which it must import without
ABOVE_STRUCTURE = ("ghostify.cli", "ghostify.steps", "ghostify.training", "ghostify.recipe", "ghostify.data")
#: every part of every method (settings, modules, apply, restore, describe), and what rebuilds them
STRUCTURE = ("ghostify.architectures", "ghostify.attention", "ghostify.flops", "ghostify.checkpoint",
             *sorted(name for name in (".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts).removesuffix(".__init__")
                                       for p in (PACKAGE / "methods").rglob("*.py"))))
#: the parts every method folder has (the contract of ghostify/methods/base.py)
PARTS = ("__init__", "settings", "modules", "apply", "restore", "describe")


@dataclass(frozen=True)
class Edge:
    source: str
    target: str
    line: int
    in_function: bool

    def __str__(self) -> str:
        where = "inside a function" if self.in_function else "at module level"
        return f"{self.source} -> {self.target} (line {self.line}, {where})"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: name -> (file, is a package)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


def _imports(tree: ast.AST):
    """``(node, in_function)`` for every import that runs, i.e. not under ``if TYPE_CHECKING:``."""

    def walk(node: ast.AST, in_function: bool):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.orelse:  # the body never runs
                yield from walk(statement, in_function)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                yield from walk(child, inner)

    yield from walk(tree, False)


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules) -> list[str]:
    """The ghostify modules an import names (``from X import y``: X.y if that is a module, else X)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        if node.level:
            base = module.split(".") if is_package else module.split(".")[:-1]
            base = base[: len(base) - node.level + 1]
            origin = ".".join(base + ([node.module] if node.module else []))
        else:
            origin = node.module or ""
        names = [f"{origin}.{alias.name}" if f"{origin}.{alias.name}" in modules else origin for alias in node.names]
    out = []
    for name in names:
        if name != ROOT and not name.startswith(ROOT + "."):
            continue
        while name not in modules:  # `import ghostify.x.attr` style: the module that holds it
            name = name.rpartition(".")[0]
        out.append(name)
    return out


def import_graph() -> dict[str, list[Edge]]:
    """Module -> its imports of ghostify modules. Importing ``a.b.c`` from outside package ``a.b``
    runs ``a.b``'s ``__init__`` first, so that is an edge too (the root package aside: every
    module is inside it)."""
    modules = _modules()
    graph: dict[str, dict[tuple[str, int], Edge]] = {name: {} for name in modules}
    for name, (path, is_package) in modules.items():
        for node, in_function in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, name, is_package, modules):
                parts = target.split(".")
                for depth in range(1, len(parts) + 1):
                    package = ".".join(parts[:depth])
                    inside = name == package or name.startswith(package + ".")
                    if package != name and (package == target or not inside):
                        graph[name].setdefault((package, node.lineno), Edge(name, package, node.lineno, in_function))
    return {name: list(edges.values()) for name, edges in graph.items()}


def find_cycles(graph: dict[str, list[Edge]]) -> list[tuple[set[str], list[Edge]]]:
    """Every strongly connected component of more than one module (modules that import each other,
    directly or not), with its shortest cycle through its first module (as edges)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def connect(v: str) -> None:  # Tarjan, recursive: the graph is a few hundred modules
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for edge in graph[v]:
            w = edge.target
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            connect(v)
    cycles = []
    for component in components:
        start = min(component)
        paths: dict[str, list[Edge]] = {start: []}
        frontier = [start]
        cycle = None
        while frontier and cycle is None:  # breadth first: the shortest way back to the start
            nxt = []
            for v in frontier:
                for edge in graph[v]:
                    if edge.target == start:
                        cycle = paths[v] + [edge]
                        break
                    if edge.target in component and edge.target not in paths:
                        paths[edge.target] = paths[v] + [edge]
                        nxt.append(edge.target)
                if cycle:
                    break
            frontier = nxt
        cycles.append((component, cycle))
    return cycles


def layer_of(graph: dict[str, list[Edge]]) -> dict[str, int]:
    names = [name for _, members in LAYERS for name in members]
    listed: dict[str, int] = {}
    for module in graph:
        owners = [n for n in names if module == n or module.startswith(n + ".")]
        if owners:
            owner = max(owners, key=len)
            listed[module] = next(i for i, (_, members) in enumerate(LAYERS) if owner in members)
    listed[ROOT] = len(LAYERS) - 1  # the public facade (load_model, save_checkpoint) is on top
    layers = dict(listed)
    for module in graph:
        layers.setdefault(module, 0)
    for _ in graph:  # unlisted modules: the highest layer they import from (a fixed point)
        changed = False
        for module in graph:
            if module not in listed:
                top = max((layers[e.target] for e in graph[module]), default=0)
                if top > layers[module]:
                    layers[module], changed = top, True
        if not changed:
            break
    return layers


def test_no_import_cycles():
    cycles = find_cycles(import_graph())
    report = "\n\n".join(f"{len(component)} modules import each other: {', '.join(sorted(component))}; "
                         "for example\n" + "\n".join(str(edge) for edge in cycle) for component, cycle in cycles)
    assert not cycles, f"{len(cycles)} import cycle(s):\n{report}"


def test_imports_go_down_the_layers():
    graph = import_graph()
    layers = layer_of(graph)
    names = [name for name, _ in LAYERS]
    wrong = [f"{edge}: {names[layers[edge.source]]} imports {names[layers[edge.target]]}"
             for edges in graph.values() for edge in edges
             if edge.target != ROOT and layers[edge.target] > layers[edge.source]]
    assert not wrong, "imports from a higher layer:\n" + "\n".join(wrong)


def test_nothing_imports_the_public_facade():
    # ghostify/__init__ imports checkpoint; a module that imports it back closes a loop through it
    graph = import_graph()
    wrong = [str(edge) for edges in graph.values() for edge in edges if edge.target == ROOT]
    assert not wrong, "imports of the package itself:\n" + "\n".join(wrong)


def test_architectures_import_only_errors():
    graph = import_graph()
    wrong = [str(edge) for module, edges in graph.items() if module.startswith("ghostify.architectures")
             for edge in edges if not edge.target.startswith(("ghostify.architectures", "ghostify.errors"))]
    assert not wrong, "architectures are facts and import nothing of ghostify but errors:\n" + "\n".join(wrong)


def test_method_structure_imports_without_the_layers_above():
    script = textwrap.dedent(f"""
        import importlib, sys

        BLOCKED = {ABOVE_STRUCTURE!r}

        class Block:
            def find_spec(self, name, path=None, target=None):
                if any(name == b or name.startswith(b + ".") for b in BLOCKED):
                    raise ImportError(f"{{name}} is above the method structure code")
                return None

        sys.meta_path.insert(0, Block())
        for name in {STRUCTURE!r}:
            importlib.import_module(name)
        loaded = [m for m in sys.modules if any(m == b or m.startswith(b + ".") for b in BLOCKED)]
        assert not loaded, loaded
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=PACKAGE.parent, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]


def test_every_method_has_the_same_parts():
    from ghostify.methods import METHODS

    for method in METHODS:
        folder = PACKAGE / "methods" / method.name
        missing = [part for part in PARTS if not (folder / f"{part}.py").is_file()]
        assert not missing, f"ghostify/methods/{method.name}/ lacks {missing}"
    folders = sorted(p.name for p in (PACKAGE / "methods").iterdir() if (p / "__init__.py").is_file())
    assert folders == sorted(m.name for m in METHODS), "a method folder that the registry does not list (or back)"


def test_the_graph_sees_hidden_cycles(tmp_path, monkeypatch):
    # the checker itself: a cycle closed by an import inside a function, and one through a
    # package's __init__, are both found
    pkg = tmp_path / ROOT
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from .b import x\n")
    (pkg / "b.py").write_text("def f():\n    from .a import y\n")
    (pkg / "sub" / "__init__.py").write_text("from .inner import z\n")
    (pkg / "sub" / "inner.py").write_text("from ..c import w\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import y\n"
                              "def g():\n    from .sub.other import v\n")
    (pkg / "sub" / "other.py").write_text("")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    cycles = {tuple(e.source for e in cycle) for _, cycle in find_cycles(import_graph())}
    assert cycles == {("ghostify.a", "ghostify.b"), ("ghostify.c", "ghostify.sub", "ghostify.sub.inner")}
