"""Cross-layer sharing: what `ghostify info` prints (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human


def describe_groups(sharing: Mapping[str, Any] | None) -> str:
    """``"12 layers in 3 groups of 4,4,4 (init mean)"``, or ``"none"``."""
    if not sharing:
        return "none"
    groups = sharing["groups"]
    sizes = ",".join(str(len(g)) for g in groups)
    return f"{sum(len(g) for g in groups)} layers in {len(groups)} groups of {sizes} (init {sharing.get('init')})"


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    applications = info.get("layer_applications") or []
    sharing = info.get("sharing")
    if not sharing and not any(n > 1 for n in applications):
        return []
    parts = []
    if sharing:
        before, after = int(sharing["params_before"]), int(sharing["params_after"])
        parts.append(f"{describe_groups(sharing)}; parameters {human(before)} -> {human(after)} ({before - after:,} fewer)")
    if applications:
        parts.append(f"{len(applications)} distinct layers run {applications} times")
    return [("shared layers", "; ".join(parts))]
