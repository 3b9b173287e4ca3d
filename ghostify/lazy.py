"""Names a package exports, imported on first use (PEP 562).

``ghostify --help`` must not load torch: Python runs a package's ``__init__`` before any module
inside it, so a package whose light modules the CLI reads at start-up (a method's ``settings``)
names its heavy modules' exports here instead of importing them up front.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import Any


def lazy_exports(package: str, exports: Mapping[str, Iterable[str]], made: Mapping[str, Callable[[], Any]] | None = None,
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of ``package``: ``exports`` maps a submodule (relative
    name) to the names it provides, ``made`` a name to the function that builds it; each value is
    imported or built once, then kept as an ordinary attribute."""
    where = {name: module for module, names in exports.items() for name in names}
    made = dict(made or {})

    def __getattr__(name: str) -> Any:
        module = vars(sys.modules[package])
        if name in module:  # built already (a call from the package's own code)
            return module[name]
        if name in made:
            value = made[name]()
        elif name in where:
            value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        else:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        setattr(sys.modules[package], name, value)
        return value

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[package]), *where, *made})

    return __getattr__, __dir__
