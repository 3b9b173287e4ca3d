"""SqueezeBERT's grouped projections (``group-linear``): see :mod:`ghostify.methods.grouped`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    grouped = info.get("grouped")
    if not grouped:
        return []
    kept = f"{100 * grouped['kept_norm']:.1f}% of the squared weight norm kept"
    if grouped.get("permute"):
        kept += f" (permuted; {100 * grouped['kept_norm_identity']:.1f}% without)"
    return [("grouped layers", f"{','.join(grouped['modules'])} in {grouped['groups']} groups; {kept}")]
