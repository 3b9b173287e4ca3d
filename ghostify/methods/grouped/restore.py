"""Grouped layers: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.grouped`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError, GhostifyError
from .modules import _RUNTIME_INPUT, _RUNTIME_OUTPUT, GroupedLinear, SharedGather, paths_of
from .settings import parse_modules


def restore_grouped(model: nn.Module, adapter: ArchitectureAdapter, record: Any) -> None:
    """Rebuild the grouped modules ``record.entry("grouped")`` lists on a freshly built (and pruned) model,
    before its weights load strictly. A no-op without a grouped record."""
    grouped = record.entry("grouped")
    if not grouped:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    try:
        groups, permute = int(grouped["groups"]), bool(grouped["permute"])
        modules = parse_modules(grouped["modules"])
    except (KeyError, TypeError, ValueError, GhostifyError) as exc:
        if isinstance(exc, CheckpointError):
            raise
        raise CheckpointError(f"corrupt grouped record in {source}: {exc}; re-create the checkpoint") from exc
    for layer in adapter.layers(model):
        for attr, path in paths_of(modules, adapter.paths_for_layer(layer)):
            linear = adapter.submodule(layer, path)
            w = linear.weight
            try:
                module = GroupedLinear(linear.in_features, linear.out_features, groups, bias=linear.bias is not None,
                                       input_index=permute and attr in _RUNTIME_INPUT,
                                       output_index=permute and attr in _RUNTIME_OUTPUT, device=w.device, dtype=w.dtype)
            except ValueError as exc:
                raise CheckpointError(f"corrupt grouped record in {source}: {exc}") from exc
            adapter.set_submodule(layer, path, module)
        if permute and "qkv" in modules:
            _share_on_load(adapter, layer)


def _share_on_load(adapter: ArchitectureAdapter, layer: nn.Module) -> None:
    """On load the index buffers are filled only afterwards (strict load), and a permuted
    checkpoint's Q, K, V always share one order (``group_linear`` permutes their inputs together)."""
    paths = adapter.paths_for_layer(layer)
    if paths.qkv:
        return  # one fused projection: nothing to share
    gather = SharedGather(3)
    for path in (paths.query, paths.key, paths.value):
        adapter.submodule(layer, path).shared_gather = gather


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    restore_grouped(model, adapter, record)
