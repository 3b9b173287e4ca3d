"""Dropped layers (``drop-layers``): what `ghostify info` prints (see :mod:`ghostify.methods.dropped_layers`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    entry = (info.get("methods") or {}).get("dropped_layers")
    if not entry:
        return []
    return [("dropped layers", f"kept {','.join(str(i) for i in entry['kept'])} of {entry['of']}")]
