"""List the imports of ghostify's own modules made inside functions, outside ``ghostify/cli/`` (where deferring
torch keeps ``ghostify --help`` fast), each with its reason: the comment on its line or the line above.

    python scripts/function_imports.py          # one line each, then the count

Each such import hides an arrow of the import graph; one belongs in a function only to break a cycle or to
defer a heavy import, and says so. Exits 1 when there are more than ``--most`` (20) or one gives no reason.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ghostify"


def own(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level > 0 or (node.module or "").split(".")[0] == "ghostify"
    return any(alias.name.split(".")[0] == "ghostify" for alias in node.names)


def function_imports(package: Path = PACKAGE) -> list[tuple[str, int, str, str]]:
    """``(file, line, import, reason)`` for every own-module import inside a function (reason "" where none)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path.relative_to(package).parts[0] == "cli":
            continue
        text = path.read_text()
        lines = text.splitlines()
        for node in ast.walk(ast.parse(text, str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)) and own(inner):
                    line = lines[inner.lineno - 1]
                    above = lines[inner.lineno - 2].strip() if inner.lineno > 1 else ""
                    reason = line.split("#", 1)[1].strip() if "#" in line else above.lstrip("# ") if above.startswith("#") else ""
                    found.append((str(path.relative_to(package.parent)), inner.lineno, ast.unparse(inner), reason))
    return sorted(set(found))  # a function inside a function is walked twice


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--most", type=int, default=20, help="the most such imports allowed (default 20)")
    args = parser.parse_args()
    found = function_imports()
    for file, line, statement, reason in found:
        print(f"{file}:{line}: {statement}  # {reason or 'NO REASON GIVEN'}")
    print(f"{len(found)} function-level imports of ghostify's own modules outside ghostify/cli/ (at most {args.most})")
    return 0 if len(found) <= args.most and all(reason for *_, reason in found) else 1


if __name__ == "__main__":
    sys.exit(main())
