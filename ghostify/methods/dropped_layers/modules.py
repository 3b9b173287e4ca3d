"""Dropped layers: the structural edit (see :mod:`ghostify.methods.dropped_layers`): a shorter layer list
and a config that builds exactly it."""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ...architectures import ArchitectureAdapter


def keep_layers(model: nn.Module, adapter: ArchitectureAdapter, kept: Sequence[int]) -> None:
    """Keep only the layers ``kept`` (indices of ``model``'s layer list, increasing), in place, and
    make the config describe the result: its layer count and every per-layer config entry
    (``adapter.per_layer_config_keys``), so that a model built from it has the kept layers' structure."""
    slots = model.base_model.get_submodule(adapter.layers_path)
    adapter.set_submodule(model.base_model, adapter.layers_path, nn.ModuleList([slots[i] for i in kept]))
    slice_config(model.config, adapter, kept)


def slice_config(config, adapter: ArchitectureAdapter, kept: Sequence[int]) -> None:
    for key in adapter.per_layer_config_keys:
        values = getattr(config, key, None)
        if values is not None:
            setattr(config, key, [values[i] for i in kept])
    setattr(config, adapter.num_layers_key, len(kept))
