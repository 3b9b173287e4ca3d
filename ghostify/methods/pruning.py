"""Structured pruning of heads and FFN neurons (``prune``): see :mod:`ghostify.pruning`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..pruning.surgery import apply_structure
from .base import Method


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("heads per layer", str(info["heads_per_layer"])), ("FFN per layer", str(info["ffn_per_layer"]))]


METHOD = Method(
    name="pruning", record_key="heads", command="prune", noun="pruned heads and neurons",
    restore=lambda model, adapter, record, source: apply_structure(model, adapter, record),
    describe=describe,
    # ghost modules and grouped blocks are built for the widths they were attached to
    before=("ghost", "grouped"),
    tracked=False,  # every record lists the kept heads; a dense model is a model pruned to full width
)
