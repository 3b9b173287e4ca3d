"""Ghost modules: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.ghost`)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import CheckpointError, GhostifyError
from .install import ghost_parameter_names, install
from .settings import GhostSettings


def restore_ghosts(model: nn.Module, adapter: ArchitectureAdapter, record: Any) -> None:
    """Rebuild the ghost modules a checkpoint's record lists, before its weights load strictly.

    A no-op for a record without ghosts; the initial values do not matter (the weights overwrite them).
    """
    ghost = record.entry("ghost")
    if not ghost:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    if not isinstance(ghost, dict) or not isinstance(ghost.get("settings"), dict):
        raise CheckpointError(f"corrupt ghost record in {source}: no ghost settings; re-create the checkpoint")
    try:
        settings = GhostSettings.from_dict(ghost["settings"])
    except GhostifyError as exc:
        raise CheckpointError(f"corrupt ghost settings in {source}: {exc}") from exc
    install(model, adapter, settings, seed=0)  # initial values are overwritten by the strict load
    listed = ghost.get("parameters")
    built = ghost_parameter_names(model.base_model)
    if listed is not None and sorted(listed) != sorted(built):
        missing = sorted(set(listed) - set(built))[:2]
        extra = sorted(set(built) - set(listed))[:2]
        raise CheckpointError(
            f"the ghost record of {source} lists other parameters than its settings build "
            f"(not built: {missing}, not listed: {extra}); the checkpoint's config.json was edited or is corrupt"
        )


def check_ghost_record(ghost: Mapping[str, Any], config: Any, source: str) -> None:
    """Refuse a record's ghost entry whose settings are not valid ghost settings (from the config
    alone, before any module is built from them)."""
    max_positions = get_adapter(config).max_positions(config)
    settings = ghost.get("settings")
    if not isinstance(settings, dict):
        raise CheckpointError(f"corrupt ghostify record in {source}: ghost.settings = {settings!r}: expected the ghost "
                              "settings mapping; re-create the checkpoint")
    try:
        GhostSettings.from_dict(settings).check_model(max_positions=max_positions)
    except (GhostifyError, TypeError) as exc:
        raise CheckpointError(f"corrupt ghostify record in {source}: ghost.settings: {exc}; re-create the checkpoint") from None


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    restore_ghosts(model, adapter, record)
