"""Cross-layer sharing: what `ghostify info` prints (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    applications = info.get("layer_applications") or []
    if not info.get("sharing") and not any(n > 1 for n in applications):
        return []
    from .apply import describe_groups  # loads torch: not when the package is imported (the CLI's start)

    runs = f"{len(applications)} distinct layers run {applications} times"
    return [("shared layers", f"{describe_groups(info['sharing'])}; {runs}" if info.get("sharing") else runs)]
