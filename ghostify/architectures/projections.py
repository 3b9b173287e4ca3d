"""Where an attention unit's or an FFN neuron's weights sit, for every structural pattern, written once.

Patterns, as the adapter's :class:`~ghostify.architectures.base.LayerPaths` states them:

* Q, K and V as three projections, or fused into one (``qkv``: rows are all query heads, then all
  key heads, then all value heads, ModernBERT's ``Wqkv``);
* grouped-query attention (``num_kv_heads_key``): the unit is a **key/value group**, one key/value
  head with the query heads that read it. Pruning a unit removes its K/V head and all its query
  heads together, so every layer keeps the family's ``num_key_value_groups`` query heads per K/V
  head (transformers' ``repeat_kv`` needs that) and the record's per-layer unit lists rebuild the
  structure exactly. Without GQA a unit is one head;
* a plain FFN (``ffn_up`` → ``ffn_down``), a gated one with a separate gate projection
  (``ffn_gate``: a neuron is a row of each and a column of ``ffn_down``) or a fused gated one
  (``ffn_up_gated``: a neuron is row ``n`` and row ``d_ff + n`` of ``ffn_up``).

Each function returns :class:`Cut` s: which output rows or input columns of which projection belong
to the given units, as the layer is now. Pruning keeps exactly these; importance gates, magnitude
scores, ghost modules and grouped layers count units through :func:`attention_units` and
:func:`ffn_units`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from .base import ArchitectureAdapter


@dataclass(frozen=True)
class Cut:
    """Rows (``dim`` 0: outputs) or columns (``dim`` 1: inputs) of the projection at ``path``."""

    path: str
    index: torch.Tensor
    dim: int


def _channels(units: Sequence[int], width: int) -> torch.Tensor:
    """The channels of ``units`` when each unit is ``width`` consecutive channels, in the units' order."""
    units = [int(u) for u in units]
    if not units:
        return torch.empty(0, dtype=torch.long)
    return (torch.tensor(units)[:, None] * width + torch.arange(width)[None, :]).reshape(-1)


def attention_units(adapter: ArchitectureAdapter, layer: nn.Module, config) -> int:
    """Attention units the layer has now (from its output projection's input width)."""
    out = adapter.submodule(layer, adapter.paths_for_layer(layer).attention_output)
    return out.in_features // adapter.unit_width(config)


def ffn_units(adapter: ArchitectureAdapter, layer: nn.Module) -> int:
    """FFN neurons the layer has now (its down projection's input width)."""
    return adapter.submodule(layer, adapter.paths_for_layer(layer).ffn_down).in_features


def attention_cuts(adapter: ArchitectureAdapter, layer: nn.Module, config, units: Sequence[int]) -> list[Cut]:
    """What keeps only ``units`` (indices into the layer as it is now, in their new order)."""
    paths = adapter.paths_for_layer(layer)
    head = adapter.head_size(config)
    query = _channels(units, adapter.unit_width(config))  # the units' query heads
    kv = _channels(units, head)  # their key/value heads (the same channels without GQA)
    cuts: list[Cut] = []
    if paths.qkv:
        now = attention_units(adapter, layer, config)
        q_rows, kv_rows = now * adapter.unit_width(config), now * head
        cuts.append(Cut(paths.qkv, torch.cat([query, q_rows + kv, q_rows + kv_rows + kv]), 0))
    else:
        cuts += [Cut(paths.query, query, 0), Cut(paths.key, kv, 0), Cut(paths.value, kv, 0)]
    cuts += [Cut(path, query, 0) for path in paths.extra_head_outputs]
    cuts.append(Cut(paths.attention_output, query, 1))
    return cuts


def ffn_cuts(adapter: ArchitectureAdapter, layer: nn.Module, neurons: Sequence[int]) -> list[Cut]:
    """What keeps only FFN ``neurons`` (indices into the layer as it is now, in their new order)."""
    paths = adapter.paths_for_layer(layer)
    index = torch.as_tensor([int(n) for n in neurons], dtype=torch.long)
    if paths.ffn_up_gated:
        cuts = [Cut(paths.ffn_up, torch.cat([index, ffn_units(adapter, layer) + index]), 0)]
    else:
        cuts = [Cut(path, index, 0) for path in paths.ffn_inputs]
    return [*cuts, Cut(paths.ffn_down, index, 1)]


def value_weight(adapter: ArchitectureAdapter, layer: nn.Module, config) -> torch.Tensor:
    """The value projection's weight ``[kv heads · head size, hidden]`` (the value block of a fused one)."""
    paths = adapter.paths_for_layer(layer)
    if paths.qkv:
        weight = adapter.submodule(layer, paths.qkv).weight
        now = attention_units(adapter, layer, config)
        return weight[now * (adapter.unit_width(config) + adapter.head_size(config)):]
    return adapter.submodule(layer, paths.value).weight


def ffn_input_weights(adapter: ArchitectureAdapter, layer: nn.Module) -> list[torch.Tensor]:
    """The ``[d_ff, hidden]`` weights whose rows are FFN neurons (gated: the up and the gate rows)."""
    paths = adapter.paths_for_layer(layer)
    if paths.ffn_up_gated:
        return list(adapter.submodule(layer, paths.ffn_up).weight.chunk(2, dim=0))
    return [adapter.submodule(layer, path).weight for path in paths.ffn_inputs]
