"""Physical pruning: slice the weights of heads and FFN neurons out of the encoder layers.

The same slicing rebuilds a pruned checkpoint's structure on a freshly built model before its
weights are loaded (``apply_structure``), so pruning and loading cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ...architectures import ArchitectureAdapter, attention_cuts, ffn_cuts


def slice_linear(linear: nn.Linear, index: torch.Tensor, dim: int) -> nn.Linear:
    """A new Linear that keeps ``index`` of the outputs (dim 0) or of the inputs (dim 1)."""
    weight = linear.weight.detach().index_select(dim, index.to(linear.weight.device)).clone()
    bias = linear.bias
    if bias is not None:
        bias = bias.detach().index_select(0, index.to(bias.device)).clone() if dim == 0 else bias.detach().clone()
    out_features, in_features = weight.shape
    new = nn.Linear(in_features, out_features, bias=bias is not None, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.weight.copy_(weight)
        if bias is not None:
            new.bias.copy_(bias)
    new.weight.requires_grad_(linear.weight.requires_grad)
    if bias is not None:
        new.bias.requires_grad_(linear.bias.requires_grad)
    return new


def set_heads(adapter: ArchitectureAdapter, layer: nn.Module, head_index: list[int], config) -> None:
    """Record the kept units on the attention module after its projections were sliced.

    ``head_index`` holds the *original* indices of the kept units, in their new order. A family
    whose layers share one per-head position bias (``adapter.position_bias_arg``) keeps them as
    a buffer, and the layer picks its heads' columns out of the bias before attending.
    """
    attention = layer.get_submodule(adapter.paths_for_layer(layer).attention)
    heads = len(head_index) * adapter.heads_per_unit(config)
    for attr in adapter.head_count_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, heads)
    for attr in adapter.head_width_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, heads * adapter.head_size(config))
    if adapter.position_bias_arg is not None:
        first_time = not hasattr(attention, HEADS_ATTR)
        register_head_index(attention, head_index)
        if first_time:
            attention.register_forward_pre_hook(_BiasHeads(adapter.position_bias_arg))


#: the attention module's attribute with the kept heads' original indices (a plain list, not a
#: buffer: a model that transformers builds on the meta device, as from_pretrained does, would
#: leave a non-persistent buffer's values undefined)
HEADS_ATTR = "ghostify_heads"


def register_head_index(attention: nn.Module, head_index: list[int]) -> None:
    """Store the kept original head indices on an attention module."""
    setattr(attention, HEADS_ATTR, [int(h) for h in head_index])


class _BiasHeads:
    """Forward pre-hook: the kept heads' columns of the shared position bias (positional argument ``arg``)."""

    def __init__(self, arg: int) -> None:
        self.arg = arg

    def __call__(self, module: nn.Module, args: tuple) -> tuple | None:
        if len(args) <= self.arg or args[self.arg] is None:
            return None
        bias = args[self.arg]
        position_bias = bias.index_select(1, torch.tensor(getattr(module, HEADS_ATTR), device=bias.device))
        return (*args[:self.arg], position_bias, *args[self.arg + 1:])


def prune_layer(
    adapter: ArchitectureAdapter,
    layer: nn.Module,
    config,
    keep_units: Sequence[int],
    keep_neurons: Sequence[int],
    original_units: Sequence[int],
) -> list[int]:
    """Keep attention units ``keep_units`` and FFN neurons ``keep_neurons`` (indices into the layer
    as it is now, in the order they should end up in). Returns the kept units' original indices."""
    cuts = [*attention_cuts(adapter, layer, config, keep_units), *ffn_cuts(adapter, layer, keep_neurons)]
    for cut in cuts:  # every cut is computed from the layer as it was, then applied
        adapter.set_submodule(layer, cut.path, slice_linear(adapter.submodule(layer, cut.path), cut.index, cut.dim))
    new_original = [original_units[u] for u in keep_units]
    set_heads(adapter, layer, new_original, config)
    return new_original
