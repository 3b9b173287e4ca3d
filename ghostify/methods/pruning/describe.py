"""Structured pruning of heads and FFN neurons (``prune``): see :mod:`ghostify.methods.pruning`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [("heads per layer", str(info["heads_per_layer"])), ("FFN per layer", str(info["ffn_per_layer"]))]
