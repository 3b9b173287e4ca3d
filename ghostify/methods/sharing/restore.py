"""Cross-layer sharing: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.sharing`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError
from .modules import _restore_config_groups, _restore_slots


def restore_sharing(model: nn.Module, adapter: ArchitectureAdapter, record: Any) -> None:
    """Rebuild ``record.entry("sharing")`` on a freshly built model, before pruning and the strict load."""
    sharing = record.entry("sharing")
    if not sharing:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    groups = sharing.get("groups") if isinstance(sharing, dict) else None
    if not isinstance(groups, list) or not all(isinstance(g, list) and g for g in groups):
        raise CheckpointError(f"corrupt sharing record in {source}: no groups; re-create the checkpoint")
    groups = [[int(i) for i in g] for g in groups]
    if adapter.config_groups is not None:
        _restore_config_groups(model, adapter, groups)
    else:
        _restore_slots(model, adapter, groups)


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    restore_sharing(model, adapter, record)
