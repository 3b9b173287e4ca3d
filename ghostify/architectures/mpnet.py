"""MPNet: one relative-position bias table (one column per head) is shared by all layers, so a
pruned layer must pick its own heads' columns out of the bias; a pre-hook does that."""

from __future__ import annotations

from torch import nn

from .base import ArchitectureAdapter, LayerPaths, register_head_index


def _select_bias_heads(module: nn.Module, args: tuple) -> tuple | None:
    # MPNetSelfAttention.forward(hidden_states, attention_mask, position_bias, ...)
    if len(args) < 3 or args[2] is None:
        return None
    position_bias = args[2].index_select(1, module.ghostify_head_index)
    return (*args[:2], position_bias, *args[3:])


class MPNetAdapter(ArchitectureAdapter):
    model_types = ("mpnet",)
    dropout_attrs = ("hidden_dropout_prob",)
    uses_attention_interface = False  # its attention is computed in its own code

    def paths(self, config) -> LayerPaths:
        return LayerPaths(
            query="attention.attn.q",
            key="attention.attn.k",
            value="attention.attn.v",
            attention_output="attention.attn.o",
            ffn_up="intermediate.dense",
            ffn_down="output.dense",
            attention="attention.attn",
        )

    def set_heads(self, layer: nn.Module, head_index: list[int], head_size: int) -> None:
        super().set_heads(layer, head_index, head_size)
        attention = layer.get_submodule(self._paths.attention)
        first_time = "ghostify_head_index" not in attention._buffers
        register_head_index(attention, head_index)
        if first_time:
            attention.register_forward_pre_hook(_select_bias_heads)
