"""Physical pruning: slice the weights of heads and FFN neurons out of the encoder layers.

The same slicing rebuilds a pruned checkpoint's structure on a freshly built model before its
weights are loaded (``apply_structure``), so pruning and loading cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ...architectures import ArchitectureAdapter


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


def _head_channels(heads: Sequence[int], head_size: int) -> torch.Tensor:
    return torch.cat([torch.arange(h * head_size, (h + 1) * head_size) for h in heads]) if heads else torch.empty(0, dtype=torch.long)


def set_heads(adapter: ArchitectureAdapter, layer: nn.Module, head_index: list[int], head_size: int) -> None:
    """Record the kept heads on the attention module after its projections were sliced.

    ``head_index`` holds the *original* indices of the kept heads, in their new order. A family
    whose layers share one per-head position bias (``adapter.position_bias_arg``) keeps them as
    a buffer, and the layer picks its heads' columns out of the bias before attending.
    """
    attention = layer.get_submodule(adapter.paths_for_layer(layer).attention)
    for attr in adapter.head_count_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, len(head_index))
    for attr in adapter.head_width_attrs:
        if hasattr(attention, attr):
            setattr(attention, attr, len(head_index) * head_size)
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
    keep_heads: Sequence[int],
    keep_neurons: Sequence[int],
    head_size: int,
    original_heads: Sequence[int],
) -> list[int]:
    """Keep heads ``keep_heads`` and FFN neurons ``keep_neurons`` (indices into the layer as it is
    now, in the order they should end up in). Returns the kept heads' original indices."""
    paths = adapter.paths_for_layer(layer)
    channels = _head_channels(keep_heads, head_size)
    for path in (paths.query, paths.key, paths.value, *paths.extra_head_outputs):
        adapter.set_submodule(layer, path, slice_linear(adapter.submodule(layer, path), channels, dim=0))
    out = adapter.submodule(layer, paths.attention_output)
    adapter.set_submodule(layer, paths.attention_output, slice_linear(out, channels, dim=1))
    new_original = [original_heads[h] for h in keep_heads]
    set_heads(adapter, layer, new_original, head_size)

    neurons = torch.as_tensor(list(keep_neurons), dtype=torch.long)
    adapter.set_submodule(layer, paths.ffn_up, slice_linear(adapter.submodule(layer, paths.ffn_up), neurons, dim=0))
    adapter.set_submodule(layer, paths.ffn_down, slice_linear(adapter.submodule(layer, paths.ffn_down), neurons, dim=1))
    return new_original
