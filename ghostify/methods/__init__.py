"""The structural compression methods, listed once.

``METHODS`` is the order in which ``load_model`` rebuilds a checkpoint's structure before its
weights load strictly: sharing first (later steps see the distinct layers), then pruning (the
widths), grouped layers (built at those widths), ghost modules (wrapping the projections),
factorised embeddings and reference attention. Adding a method is one module here (its
:class:`~ghostify.methods.base.Method`) and one line below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ..architectures import ArchitectureAdapter
from . import embeddings, ghost, grouped, pruning, references, sharing
from .base import Method, check_order, order_problem, register

METHODS: tuple[Method, ...] = (
    sharing.METHOD,
    pruning.METHOD,
    grouped.METHOD,
    ghost.METHOD,
    embeddings.METHOD,
    references.METHOD,
)
BY_NAME: dict[str, Method] = {m.name: m for m in METHODS}
register(METHODS)


def restore_all(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """Rebuild every recorded structural change of ``record`` on a freshly built ``model``."""
    for method in METHODS:
        method.restore(model, adapter, record, source)


def describe_all(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    """Every method's rows for ``ghostify info``, in the registry's order."""
    return [row for method in METHODS for row in method.describe(info)]


def stage_methods(command: str, settings: Mapping[str, Any]) -> list[Method]:
    """The methods a recipe stage of ``command`` with ``settings`` applies."""
    return [m for m in METHODS if m.applies(command, settings)]


__all__ = ["BY_NAME", "METHODS", "Method", "check_order", "describe_all", "order_problem", "restore_all", "stage_methods"]
