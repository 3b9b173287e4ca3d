"""Structured pruning: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.pruning`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError
from ...record import GhostifyRecord
from .modules import prune_layer, set_heads


def apply_structure(model: nn.Module, adapter: ArchitectureAdapter, record: GhostifyRecord) -> None:
    """Give a freshly built model the per-layer head and FFN sizes of ``record`` (weights are
    loaded afterwards, so which slices are kept does not matter here)."""
    layers = adapter.layers(model)
    if len(layers) != len(record.heads):
        raise CheckpointError(
            f"the ghostify record lists {len(record.heads)} layers but the config builds {len(layers)}; "
            "the checkpoint's config.json was edited or is corrupt"
        )
    config = model.config
    dense = list(range(adapter.num_units(config)))
    d_ff = adapter.ffn_size(config)
    for layer, heads, ffn in zip(layers, record.heads, record.ffn):
        if list(heads) == dense and ffn == d_ff:
            continue
        prune_layer(adapter, layer, config, range(len(heads)), range(ffn), dense)
        set_heads(adapter, layer, list(heads), config)


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    apply_structure(model, adapter, record)
