"""The methods' structure code, flattened into files that ship inside an exported checkpoint.

``transformers`` runs a checkpoint's own modeling code (``trust_remote_code=True``) from one flat
folder: it copies the modeling file and every file it imports as ``from .name import ...``,
recursively, and nothing else. ghostify's structure code is a package tree, so each module it
needs becomes one file named after its dotted path (``ghostify.methods.ghost.apply`` ->
``ghostify_methods_ghost_apply.py``) with its ghostify imports rewritten to those names. Which
modules are needed is read from the imports themselves (module level and inside functions),
starting from every method's ``restore``; the layering test guarantees that this closure never
reaches the training, data, step or CLI code.
"""

from __future__ import annotations

import ast
import importlib.util
from collections.abc import Iterable
from pathlib import Path

from ..errors import GhostifyError

ROOT = "ghostify"


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


def _ghostify_imports(module: str) -> list[tuple[ast.ImportFrom, str]]:
    path, is_package = _source(module)
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
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


def closure(roots: Iterable[str]) -> list[str]:
    """Every ghostify module that ``roots`` import, directly or not (sorted)."""
    seen: set[str] = set()
    todo = list(roots)
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        seen.add(module)
        todo += [target for _, target in _ghostify_imports(module)]
    return sorted(seen)


def flatten(module: str) -> str:
    """The source of ``module`` with its ghostify imports pointing at the flat files."""
    path, _ = _source(module)
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    for node, target in sorted(_ghostify_imports(module), key=lambda item: -item[0].lineno):
        first = lines[node.lineno - 1]
        indent = first[: len(first) - len(first.lstrip())]
        names = ", ".join(f"{a.name} as {a.asname}" if a.asname else a.name for a in node.names)
        lines[node.lineno - 1 : node.end_lineno] = [f"{indent}from .{flat_name(target)} import {names}\n"]
    return "".join(lines)


def write_flat(modules: Iterable[str], directory: Path) -> list[str]:
    """Write every module of ``modules`` as a flat file into ``directory``; returns the file names."""
    names = []
    for module in modules:
        name = f"{flat_name(module)}.py"
        (directory / name).write_text(flatten(module), encoding="utf-8")
        names.append(name)
    return names
