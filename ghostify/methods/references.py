"""RefBERT's reference attention (``distill --references``): see :mod:`ghostify.references`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..references import restore_references
from ..units import human
from .base import Method


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    store = info.get("reference_store")
    if not store:
        return []
    return [("reference store", f"{human(store['bytes'])}B ({store['bytes']:,} bytes, {store['entries']:,} entries, "
             f"{store['tokens']:,} tokens; not parameters), δ {store['delta']}")]


METHOD = Method(
    name="references", record_key="references", command="distill", when="references", noun="reference attention",
    restore=lambda model, adapter, record, source: restore_references(model, record, source),
    describe=describe,
)
