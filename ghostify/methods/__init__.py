"""The structural compression methods, listed once.

``METHODS`` is the order in which ``load_model`` rebuilds a checkpoint's structure before its
weights load strictly: sharing first (later steps see the distinct layers), then pruning (the
widths), grouped layers (built at those widths), ghost modules (wrapping the projections),
factorised embeddings and reference attention. Adding a method is one module here (its
:class:`~ghostify.methods.base.Method`) and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..lazy import lazy_exports
from .base import Method, check_order, order_problem, register

if TYPE_CHECKING:
    from torch import nn

    from ..architectures import ArchitectureAdapter


def _methods() -> tuple[Method, ...]:
    """The registry, in restore order (its modules load torch: built on first use, so that a
    method's settings, which the CLI reads at start-up, import without it)."""
    from . import embeddings, ghost, grouped, pruning, references, sharing

    return (
        sharing.METHOD,
        pruning.METHOD,
        grouped.METHOD,
        ghost.METHOD,
        embeddings.METHOD,
        references.METHOD,
    )


def _methods_by_name() -> dict[str, Method]:
    return {m.name: m for m in _registered()}


#: METHODS (the tuple above) and BY_NAME (name -> method), built on first use
__getattr__, __dir__ = lazy_exports(__name__, {}, {"METHODS": _methods, "BY_NAME": _methods_by_name})


def _registered() -> tuple[Method, ...]:
    """``METHODS`` as this module holds it now (a module's own code does not reach its
    ``__getattr__`` by the bare name)."""
    return __getattr__("METHODS")


register(_registered)


def restore_all(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """Rebuild every recorded structural change of ``record`` on a freshly built ``model``."""
    for method in _registered():
        method.restore(model, adapter, record, source)


def describe_all(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every method's rows for ``ghostify info``, in the registry's order."""
    return [row for method in _registered() for row in method.describe(info)]


def stage_methods(command: str, settings: Mapping[str, Any]) -> list[Method]:
    """The methods a recipe stage of ``command`` with ``settings`` applies."""
    return [m for m in _registered() if m.applies(command, settings)]


__all__ = ["BY_NAME", "METHODS", "Method", "check_order", "describe_all", "order_problem", "restore_all", "stage_methods"]
