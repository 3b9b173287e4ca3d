"""ALBERT's cross-layer sharing (``share-layers``): see :mod:`ghostify.sharing`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..sharing import describe as describe_groups
from ..sharing import restore_sharing
from .base import Method


def describe(info: Mapping[str, Any]) -> list[tuple[str, str]]:
    applications = info.get("layer_applications") or []
    if not info.get("sharing") and not any(n > 1 for n in applications):
        return []
    runs = f"{len(applications)} distinct layers run {applications} times"
    return [("shared layers", f"{describe_groups(info['sharing'])}; {runs}" if info.get("sharing") else runs)]


METHOD = Method(
    name="sharing", record_key="sharing", command="share-layers", noun="shared layers",
    restore=lambda model, adapter, record, source: restore_sharing(model, adapter, record),
    describe=describe,
    # averaging layers needs them unchanged otherwise: ghosts, grouping and references add modules
    before=("ghost", "grouped", "references"),
)
