"""The import layering of ghostify, lowest first:

    errors (and helpers that import nothing else of ghostify: files, the settings dataclasses and
    their flattening, heads, device, the latency model, the runtimes) → architectures (facts about families) → method structure code
    (the methods' modules, the registry through which a checkpoint rebuilds them, and the
    per-example loss that importance differentiates) → checkpoint (and tokenization, which reads
    configs) → export → data → training → tasks → augment (and testing) → steps → recipe / cli

Why this order among the middle layers (it is what the code needs, nothing more):

- export writes and runs a checkpoint in other formats: it needs the checkpoint format and the
  structure code it ships, never data or training, so it sits right above checkpoint;
- data (datasets, presets, labels, SQuAD windows) reads files and knows no model training;
- training is task-independent: the loop trains any ``Objective`` and scores with an
  ``Evaluation`` it is handed, the objectives read a task kind only through the narrow shape
  ``TaskLosses``, and the losses, metrics and constant baseline are plain functions of tensors;
- tasks (one ``TaskKind`` per kind of task) build on both: their encoding on data, their losses,
  metrics and evaluations on training's;
- augment reads datasets through a task kind; testing (tiny models, toy datasets) is beside it;
- steps call all of these, and the front ends call the steps.

A module imports only from its own layer or lower ones, and no chain of imports leads back to
where it started. Imports inside functions count too: they run as well, only later, so one that
closes a loop merely hides it. So do imports under ``if TYPE_CHECKING:``: they never run, but a
type named from a higher layer is a dependency all the same, and the first time it is needed at
run time the loop is real.

Methods are plug-ins: outside a method's own folder, code reaches it only through the registry
``ghostify.methods`` (the names it exports), never ``ghostify.methods.<name>`` directly.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import pytest

ROOT = "ghostify"
PACKAGE = Path(find_spec(ROOT).origin).parent  # without importing it

#: the layers, lowest first; a module belongs to the longest name listed that is it or contains it.
#: A module listed nowhere sits on the highest layer it imports from (so it may import what it
#: likes, and it is the modules below that may not import it).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("errors", ("ghostify.errors", "ghostify.version", "ghostify.console", "ghostify.units", "ghostify.files",
                "ghostify.settings", "ghostify.latency_model", "ghostify.flatten", "ghostify.heads", "ghostify.device",
                "ghostify.runtimes")),
    ("architectures", ("ghostify.architectures",)),
    ("structure", ("ghostify.record", "ghostify.seeding", "ghostify.flops", "ghostify.attention", "ghostify.methods",
                   "ghostify.example_loss")),
    ("checkpoint", ("ghostify.checkpoint", "ghostify.tokenization", "ghostify.pooling")),
    ("export", ("ghostify.export",)),
    ("data", ("ghostify.data",)),
    ("training", ("ghostify.training",)),
    ("tasks", ("ghostify.tasks",)),
    ("augment", ("ghostify.augment", "ghostify.testing")),
    ("steps", ("ghostify.steps",)),
    ("interface", ("ghostify.recipe", "ghostify.cli", "ghostify.__main__")),
)
#: packages above the method structure code, which it must import without
ABOVE_STRUCTURE = ("ghostify.cli", "ghostify.steps", "ghostify.training", "ghostify.recipe", "ghostify.data",
                   "ghostify.tasks", "ghostify.augment", "ghostify.export")
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
    type_only: bool = False  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        where = "inside a function" if self.in_function else "at module level"
        if self.type_only:
            where += ", under TYPE_CHECKING"
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
    """``(node, in_function, type_only)`` for every import: ``type_only`` for one under
    ``if TYPE_CHECKING:``, which never runs but names a dependency all the same."""

    def walk(node: ast.AST, in_function: bool, type_only: bool):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for statement in node.body:
                yield from walk(statement, in_function, True)
            for statement in node.orelse:
                yield from walk(statement, in_function, type_only)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, in_function, type_only
        else:
            inner = in_function or isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
            for child in ast.iter_child_nodes(node):
                yield from walk(child, inner, type_only)

    yield from walk(tree, False, False)


def _origin(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    """The absolute name of the module a ``from X import ...`` in ``module`` reads."""
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules) -> list[str]:
    """The ghostify modules an import names (``from X import y``: X.y if that is a module, else X)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        origin = _origin(node, module, is_package)
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
        for node, in_function, type_only in _imports(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, name, is_package, modules):
                parts = target.split(".")
                for depth in range(1, len(parts) + 1):
                    package = ".".join(parts[:depth])
                    inside = name == package or name.startswith(package + ".")
                    if package != name and (package == target or not inside):
                        edge = Edge(name, package, node.lineno, in_function, type_only)
                        graph[name].setdefault((package, node.lineno), edge)
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
    # the checker itself: a cycle closed by an import inside a function, one through a package's
    # __init__, and one closed by an import for type hints only, are all found
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
    # and one closed only by a type hint's import
    (pkg / "d.py").write_text("from .e import x\n")
    (pkg / "e.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .d import y\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    cycles = {tuple(e.source for e in cycle) for _, cycle in find_cycles(import_graph())}
    assert cycles == {("ghostify.a", "ghostify.b"), ("ghostify.c", "ghostify.sub", "ghostify.sub.inner"),
                      ("ghostify.d", "ghostify.e")}


#: modules that reach methods only through the registry (issue 25): the checkpoint format, the record,
#: the model card, info, export, the generic method step, the recipe runner and the CLI
REGISTRY_ONLY = (f"{ROOT}.checkpoint", f"{ROOT}.record", f"{ROOT}.card", f"{ROOT}.steps.info", f"{ROOT}.steps.export",
                 f"{ROOT}.steps.apply_method", f"{ROOT}.export", f"{ROOT}.recipe", f"{ROOT}.cli")


def method_access_offences(exported: set[str], public: dict[str, set[str]] | None = None) -> list[str]:
    """Every import, outside a method's own folder ``ghostify/methods/<name>/``, that reaches into a
    method: a module of the folder (its internals; another method may use a method's ``modules``, the
    structure it composes with), a name the method's package does not export (``public``: its
    ``__all__``), anything of a method from a module in :data:`REGISTRY_ONLY`, or a name the registry
    ``ghostify.methods`` does not export (``exported``). The registry's own ``__init__`` is the door
    itself and may import the methods."""
    modules = _modules()
    registry = f"{ROOT}.methods"
    methods = sorted(f"{registry}.{p.name}" for p in (PACKAGE / "methods").iterdir() if (p / "__init__.py").is_file())
    public = public if public is not None else {m: set(getattr(importlib.import_module(m), "__all__", ())) for m in methods}

    def method_of(name: str) -> str | None:
        return next((m for m in methods if name == m or name.startswith(m + ".")), None)

    wrong = []
    for module, (path, is_package) in modules.items():
        if module == registry:
            continue
        own = method_of(module)
        registry_only = any(module == r or module.startswith(r + ".") for r in REGISTRY_ONLY)
        for node, in_function, type_only in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            else:
                origin = _origin(node, module, is_package)
                names = [f"{origin}.{alias.name}" for alias in node.names]
            reasons = []  # one line per import statement, however many names it imports
            for name in names:
                origin, _, attribute = name.rpartition(".")
                reached = method_of(name)
                if reached is not None and reached != own:
                    if registry_only:
                        reasons.append(f"reaches into {reached} (this module reaches methods through {registry} only)")
                    elif origin == reached and attribute not in public.get(reached, set()) | {"*"}:
                        reasons.append(f"{attribute} is not exported by {reached}")
                    elif origin != reached and name != reached and not (
                            own is not None and origin == f"{reached}.modules"):
                        reasons.append(f"reaches into {reached}'s internals ({origin.removeprefix(reached + '.')})")
                elif origin == registry and name not in methods and attribute not in exported | {"*"}:
                    reasons.append(f"{attribute} is not exported by {registry}")
            if reasons:
                where = "inside a function" if in_function else "at module level"
                where += ", under TYPE_CHECKING" if type_only else ""
                why = "; ".join(dict.fromkeys(reasons))
                wrong.append(f"{module} (line {node.lineno}, {where}): `{ast.unparse(node)}` {why}")
    return wrong


def test_methods_are_reached_only_through_the_registry():
    # a method is a plug-in: only its own folder and the registry name its modules, so a method can be
    # added, replaced or removed without touching code elsewhere (tests/ may reach in: not checked)
    registry = importlib.import_module(f"{ROOT}.methods")
    wrong = method_access_offences(set(getattr(registry, "__all__", ())))
    assert not wrong, (f"{len(wrong)} import(s) of a method other than through ghostify.methods (export what they "
                       "need there):\n" + "\n".join(wrong))


def test_the_method_access_check_sees_every_way_in(tmp_path, monkeypatch):
    # the checker of the test above: every form of reaching into a method is found; the registry's
    # exports, a method package's public names, its own modules and another method's `modules` are not
    pkg = tmp_path / ROOT
    for folder in ("methods/ghost", "methods/other", "steps", "cli"):
        (pkg / folder).mkdir(parents=True)
    for init in (pkg, pkg / "steps", pkg / "cli", pkg / "methods" / "other"):
        (init / "__init__.py").write_text("")
    (pkg / "methods" / "__init__.py").write_text("def _methods():\n    from . import ghost\n")
    (pkg / "methods" / "base.py").write_text("")
    (pkg / "methods" / "ghost" / "__init__.py").write_text("from .apply import attach\nfrom .. import METHODS\n")
    (pkg / "methods" / "ghost" / "apply.py").write_text("from ..base import Method\nfrom . import modules\n")
    (pkg / "methods" / "ghost" / "modules.py").write_text("")
    (pkg / "methods" / "other" / "apply.py").write_text("from ..ghost.modules import G\n"  # composes: allowed
                                                        "from ..ghost.apply import attach\n")  # line 2: internals
    (pkg / "steps" / "fine.py").write_text("from ..methods import METHODS\nfrom ghostify.methods.base import Method\n"
                                           "from ..methods.ghost import attach\n")  # a public name: allowed
    (pkg / "steps" / "bad.py").write_text(
        "from typing import TYPE_CHECKING\n"
        "from ..methods.ghost import secret\n"                # line 2: a name the method does not export
        "from ..methods import ghost, METHODS\n"               # line 3: the package by name: allowed here
        "import ghostify.methods.ghost.apply\n"                # line 4: a method's module, absolutely
        "from ghostify.methods import hidden\n"                # line 5: a name the registry does not export
        "def f():\n    from ..methods.ghost.modules import G\n"  # line 7: internals, inside a function
        "if TYPE_CHECKING:\n    from ..methods.ghost import T\n")  # line 9: for a type hint
    (pkg / "cli" / "x.py").write_text("from ..methods.ghost import attach\n")  # line 1: registry-only module
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", pkg)
    wrong = method_access_offences({"METHODS"}, {f"{ROOT}.methods.ghost": {"attach"}, f"{ROOT}.methods.other": set()})
    lines = {(w.split(" ")[0], int(w.split("line ")[1].split(",")[0])) for w in wrong}
    assert lines == {("ghostify.steps.bad", n) for n in (2, 4, 5, 7, 9)} | {("ghostify.methods.other.apply", 2),
                                                                               ("ghostify.cli.x", 1)}, wrong


def test_no_two_methods_import_each_other():
    # what two methods both need lives below both (ghostify/methods/criteria.py, scores.py, base.py): a method may
    # use another's public names, never in both directions (pruning and hidden once did, kept apart by lazy imports)
    graph = import_graph()
    folder = f"{ROOT}.methods."

    def method(module: str) -> str | None:
        parts = module.split(".")
        return ".".join(parts[:3]) if module.startswith(folder) and (PACKAGE / "methods" / parts[2]).is_dir() else None

    uses = {(method(m), method(e.target)) for m, edges in graph.items() for e in edges
            if method(m) and method(e.target) and method(m) != method(e.target)}
    both = sorted({tuple(sorted(pair)) for pair in uses if pair[::-1] in uses})
    assert not both, f"methods that import each other: {both}"


def test_own_modules_are_imported_at_module_level_outside_the_cli():
    # an import inside a function hides an arrow of the import graph: outside cli/ (which defers torch for a fast
    # --help) at most 20 are left, each breaking a cycle or deferring a heavy import and saying so
    # (`python scripts/function_imports.py` lists them)
    script = PACKAGE.parent / "scripts" / "function_imports.py"
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "NO REASON GIVEN" not in result.stdout
