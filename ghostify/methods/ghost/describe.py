"""GhostBERT's ghost modules (``attach-ghost``): see :mod:`ghostify.methods.ghost`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ...units import human
from .settings import GhostSettings


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    rows = []
    if info.get("ghost_params") or info.get("ghost_flops"):  # measured by ghostify info
        rows += [("ghost parameters", f"{human(info['ghost_params'])} ({info['ghost_params']:,}, included above)"),
                 ("ghost FLOPs", f"{human(info['ghost_flops'])} (included above)")]
    ghost = info.get("ghost")
    if ghost and isinstance(ghost.get("settings"), dict):
        params = int(ghost.get("params") or 0)
        rows.append(("ghost", f"{GhostSettings.from_dict(ghost['settings']).describe()}; "
                              f"{human(params)} new parameters ({params:,})"))
    elif "ghost_params" in info:  # info of a model without ghosts says so
        rows.append(("ghost", "none" if not ghost else str(ghost)))
    return rows
