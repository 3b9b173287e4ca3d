"""RefBERT's reference attention (``distill --references``): see :mod:`ghostify.methods.references`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    store = info.get("reference_store")
    if not store:
        return []
    return [("reference store", f"{human(store['bytes'])}B ({store['bytes']:,} bytes, {store['entries']:,} entries, "
             f"{store['tokens']:,} tokens; not parameters), δ {store['delta']}")]
