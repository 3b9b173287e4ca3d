"""SqueezeBERT's grouped projections (``group-linear``): see :mod:`ghostify.methods.grouped`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    grouped = info.get("grouped")
    if not grouped:
        return []
    kept = f"{100 * grouped['kept_norm']:.1f}%"
    if grouped.get("permute"):
        kept += f" with the permutation, {100 * grouped['kept_norm_identity']:.1f}% without"
    return [("grouped layers", f"{','.join(grouped['modules'])} into {grouped['groups']} blocks in every layer; "
                               f"kept squared weight norm: {kept}")]
