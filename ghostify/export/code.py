"""The methods' structure code, flattened into files that ship inside an exported checkpoint.

``transformers`` runs a checkpoint's own modeling code (``trust_remote_code=True``) from one flat
folder: it copies the modeling file and every file it imports as ``from .name import ...``,
recursively, and nothing else. ghostify's structure code is a package tree, so each module it
needs becomes one file named after its dotted path (``ghostify.methods.ghost.apply`` ->
``ghostify_methods_ghost_apply.py``) with its ghostify imports rewritten to those names. Which
modules are needed is read from the imports themselves (module level and inside functions),
starting from the ``restore`` of each method the model's record has; the layering test guarantees
that this closure never reaches the training, data, step or CLI code. The adapters' package ships
with the adapter modules of the model's own family only (``families``): its ``__init__`` lists them
all, so without that every export would carry every family's code.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Collection, Iterable
from pathlib import Path

from ..errors import GhostifyError

ROOT = "ghostify"
#: the package of the family adapters, whose ``__init__`` imports each family's module and lists its
#: classes in ``ADAPTERS_TUPLE``
ADAPTERS_PACKAGE = "ghostify.architectures"
ADAPTERS_TUPLE = "_ADAPTERS"


def _source(module: str) -> tuple[Path, bool]:
    spec = importlib.util.find_spec(module)
    if spec is None or spec.origin is None:
        raise GhostifyError(f"cannot find the source of {module}; reinstall ghostify")
    path = Path(spec.origin)
    return path, path.name == "__init__.py"


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - node.level + 1]
    return ".".join(base + ([node.module] if node.module else []))


def _is_module(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):
        return False


def flat_name(module: str) -> str:
    """The file stem a module gets in an exported checkpoint."""
    return module.replace(".", "_")


def _text(module: str, families: Collection[str] | None) -> str:
    """The source of ``module``; the adapters' package with ``families`` (the modules that define the adapters
    an export needs) imports only those modules and lists only their adapters."""
    path, _ = _source(module)
    text = path.read_text(encoding="utf-8")
    if module != ADAPTERS_PACKAGE or families is None:
        return text
    tree = ast.parse(text, str(path))
    listed = next((node for node in tree.body if _assigns(node, ADAPTERS_TUPLE)), None)
    if listed is None or not isinstance(listed.value, ast.Tuple):
        raise GhostifyError(f"{module} no longer lists its adapters as a tuple {ADAPTERS_TUPLE}; update "
                            "ghostify/export/code.py")
    adapters = {e.id for e in listed.value.elts if isinstance(e, ast.Name)}
    edits: list[tuple[int, int, list[str]]] = []  # first and last line (1-based), what replaces them
    kept: set[str] = set()
    for node in tree.body:
        bound = {a.asname or a.name for a in node.names} if isinstance(node, ast.ImportFrom) else set()
        if isinstance(node, ast.ImportFrom) and node.level == 1 and bound & adapters:
            if f"{ADAPTERS_PACKAGE}.{node.module}" in families:
                kept |= bound
            else:  # another family's module: neither imported nor listed
                edits.append((node.lineno, node.end_lineno or node.lineno, []))
    names = [e.id for e in listed.value.elts if isinstance(e, ast.Name) and e.id in kept]
    edits.append((listed.lineno, listed.end_lineno or listed.lineno, [f"{ADAPTERS_TUPLE} = ({', '.join(names)},)\n"]))
    lines = text.splitlines(keepends=True)
    for first, last, replacement in sorted(edits, reverse=True):
        lines[first - 1 : last] = replacement
    return "".join(lines)


def _assigns(node: ast.stmt, name: str) -> bool:
    targets = node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
    return any(isinstance(target, ast.Name) and target.id == name for target in targets)


def _ghostify_imports(module: str, families: Collection[str] | None = None) -> list[tuple[ast.ImportFrom, str]]:
    path, is_package = _source(module)
    tree = ast.parse(_text(module, families), str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import) and any(a.name == ROOT or a.name.startswith(ROOT + ".") for a in node.names):
            raise GhostifyError(f"{module} imports ghostify as `import {node.names[0].name}`, which export cannot "
                                "rewrite; use `from ... import` in structure code")
        if isinstance(node, ast.ImportFrom):
            target = _absolute(node, module, is_package)
            if target == ROOT or target.startswith(ROOT + "."):
                for alias in node.names:
                    if _is_module(f"{target}.{alias.name}"):
                        raise GhostifyError(f"{module} imports the module {target}.{alias.name} by name, which export "
                                            "cannot flatten; import the names it needs from it instead")
                out.append((node, target))
    return out


def closure(roots: Iterable[str], families: Collection[str] | None = None) -> list[str]:
    """Every ghostify module that ``roots`` import, directly or not (sorted); ``families``: the adapter
    modules to keep (None: all)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [target for _, target in _ghostify_imports(module, families)]
    return sorted(seen)


def flatten(module: str, families: Collection[str] | None = None) -> str:
    """The source of ``module`` with its ghostify imports pointing at the flat files."""
    lines = _text(module, families).splitlines(keepends=True)
    for node, target in sorted(_ghostify_imports(module, families), key=lambda item: -item[0].lineno):
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        names = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in node.names)
        lines[node.lineno - 1 : node.end_lineno] = [f"{indent}from .{flat_name(target)} import {names}\n"]
    return "".join(lines)


def write_flat(modules: Iterable[str], directory: Path, families: Collection[str] | None = None) -> list[str]:
    """Write every module of ``modules`` as a flat file into ``directory``; returns the file names."""
    names = []
    for module in modules:
        name = f"{flat_name(module)}.py"
        (directory / name).write_text(flatten(module, families), encoding="utf-8")
        names.append(name)
    return names
