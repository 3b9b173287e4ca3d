"""GhostBERT's ghost modules (``attach-ghost``): see :mod:`ghostify.methods.ghost`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human
from .settings import GhostSettings


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    if info.get("ghost_params") or info.get("ghost_flops"):
        rows += [("ghost parameters", f"{human(info['ghost_params'])} ({info['ghost_params']:,}, included above)"),
                 ("ghost FLOPs", f"{human(info['ghost_flops'])} (included above)")]
    ghost = info.get("ghost")
    if ghost and isinstance(ghost.get("settings"), dict):
        rows.append(("ghost", GhostSettings.from_dict(ghost["settings"]).describe()))
    else:
        rows.append(("ghost", "none" if not ghost else str(ghost)))
    return rows
