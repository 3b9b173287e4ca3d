"""The runtimes a model ships in, as one registry: each is one module of this package declaring
``RUNTIME``, a :class:`~ghostify.runtimes.base.Runtime` (its name, extra, graph files, export,
quantisation, loading, running and version string); the registry finds the modules itself.

``export --format``, ``eval`` and ``bench`` of a graph, ``latency --runtime``, the latency model's
cache key and the model card reach a runtime only through this module: adding a runtime is adding its
module, nothing else. The declarations import nothing heavy (``ghostify --help`` lists them).
"""

from __future__ import annotations

import importlib
import os
import pkgutil
from pathlib import Path

from ..errors import GhostifyError
from .base import INT8, Runtime, Session, Target, Usage, feeds_for, first_line

#: the deployment ``latency`` and ``prune --speedup`` target unless told otherwise, listed first; ``compress`` picks
#: the fastest (``CompressDefaults.runtime``)
DEFAULT_DEPLOYMENT = "onnx-int8"
#: ``--runtime auto`` (``latency``, ``compress``): the fastest installed deployment of the dense model, timed for the
#: deployment's shape on this machine (``ghostify.steps.deployments``); never a deployment itself
AUTO = "auto"


def _shipped() -> tuple[Runtime, ...]:
    """The ``RUNTIME`` of every module of this package, by module name (``base`` is the contract, no runtime)."""
    found = []
    for module in sorted(m.name for m in pkgutil.iter_modules(__path__) if m.name != "base"):
        declared = getattr(importlib.import_module(f"{__name__}.{module}"), "RUNTIME", None)
        if not isinstance(declared, Runtime):
            raise TypeError(f"{__name__}.{module} declares no RUNTIME")
        found.append(declared)
    return tuple(found)


_RUNTIMES: tuple[Runtime, ...] | None = None


def runtimes() -> tuple[Runtime, ...]:
    """Every registered runtime, in the order ``--help`` lists them."""
    global _RUNTIMES
    if _RUNTIMES is None:
        _RUNTIMES = _shipped()
    return _RUNTIMES


def graph_runtimes() -> tuple[Runtime, ...]:
    """The runtimes that run an exported graph (``export --format`` names them)."""
    return tuple(r for r in runtimes() if r.graph is not None)


def runtime(name: str) -> Runtime:
    """The runtime ``export --format NAME`` writes for."""
    found = next((r for r in graph_runtimes() if r.name == name), None)
    if found is None:
        raise GhostifyError(f"--format {name!r} is not one of {', '.join(['hf', *(r.name for r in graph_runtimes())])}")
    return found


def deployment_names() -> tuple[str, ...]:
    """Every ``--runtime`` name: the default first, then each runtime's full-precision and int8 graphs."""
    names = [n for r in runtimes() for n in r.deployments]
    return (DEFAULT_DEPLOYMENT, *(n for n in names if n != DEFAULT_DEPLOYMENT))


def installed_deployments() -> tuple[str, ...]:
    """The deployments whose runtime is installed here, its export included (``bench --all-runtimes``, ``--runtime
    auto``), in :func:`deployment_names`' order."""
    return tuple(n for n in deployment_names() if not target(n).runtime.missing(export=True))


def target(name: str) -> Target:
    """The deployment ``--runtime NAME`` names (``onnx-int8``: ONNX Runtime's int8 graph), refused in one line
    when no runtime serves it."""
    for candidate in runtimes():
        if name in candidate.deployments:
            return Target(candidate, int8=name != candidate.name)
    raise GhostifyError(f"unknown --runtime {name!r}; choose one of {', '.join(deployment_names())}")


def graph_of(model: str | os.PathLike) -> tuple[Target, Path] | None:
    """What runs ``model`` and the graph file it names: a graph file (by its suffix: ``model_int8.onnx``), or
    an export directory (its full-precision graph); None for anything else (a checkpoint)."""
    path = Path(model)
    for candidate in graph_runtimes():
        if path.suffix == candidate.suffix:
            if not path.is_file():
                raise GhostifyError(f"{candidate.format_title} model {path} does not exist; pass a file that "
                                    f"`ghostify export --format {candidate.name}` wrote")
            return Target(candidate, int8=INT8 in path.name), path
    if path.is_dir():
        for candidate in graph_runtimes():
            if (path / candidate.graph).is_file():
                return Target(candidate), path / candidate.graph
    return None


def graph_suffixes() -> tuple[str, ...]:
    """The file suffixes of every runtime's graphs (".onnx", ".xml")."""
    return tuple(r.suffix for r in graph_runtimes())


__all__ = ["AUTO", "DEFAULT_DEPLOYMENT", "INT8", "Runtime", "Session", "Target", "Usage", "deployment_names", "feeds_for",
           "first_line", "graph_of", "graph_runtimes", "graph_suffixes", "installed_deployments", "runtime", "runtimes",
           "target"]
