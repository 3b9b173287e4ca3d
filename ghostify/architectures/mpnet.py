"""MPNet: one relative-position bias table (one column per head) is shared by all layers, so a
pruned layer must pick its own heads' columns out of the bias; a pre-hook does that."""

from __future__ import annotations

import math
import types

import torch
from torch import nn

from ..attention import key_validity, shifted_attention
from .base import ArchitectureAdapter, LayerPaths, register_head_index


def _select_bias_heads(module: nn.Module, args: tuple) -> tuple | None:
    # MPNetSelfAttention.forward(hidden_states, attention_mask, position_bias, ...)
    if len(args) < 3 or args[2] is None:
        return None
    position_bias = args[2].index_select(1, module.ghostify_head_index)
    return (*args[:2], position_bias, *args[3:])


def _reference_forward(self, hidden_states, attention_mask=None, position_bias=None, output_attentions=False, **kwargs):
    """MPNetSelfAttention.forward with RefBERT's reference columns (content-only scores: the
    relative-position bias has no meaning between the input and another example)."""
    hidden_shape = (*hidden_states.shape[:-1], -1, self.attention_head_size)
    q = self.q(hidden_states).view(hidden_shape).transpose(1, 2)
    k = self.k(hidden_states).view(hidden_shape).transpose(1, 2)
    v = self.v(hidden_states).view(hidden_shape).transpose(1, 2)
    scale = math.sqrt(self.attention_head_size)
    scores = torch.matmul(q, k.transpose(-1, -2)) / scale
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        scores = scores + attention_mask
    batch, _, _, length = scores.shape
    valid = key_validity(attention_mask, batch, length, scores.device)
    reference = self.ghostify_reference.consume(self, valid, heads=q.size(1))
    if reference is None:
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        c = torch.matmul(probs, v)
    else:
        ref_scores = torch.matmul(q, reference.key.transpose(-1, -2)) / scale
        c, probs = shifted_attention(scores, valid, v, ref_scores, reference.valid, reference.value,
                                     self.ghostify_reference.delta, self.dropout)
    c = c.permute(0, 2, 1, 3).contiguous()
    o = self.o(c.view(*c.size()[:-2], -1))
    return (o, probs) if output_attentions else (o,)


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

    def install_reference_attention(self, attention: nn.Module) -> None:
        attention.forward = types.MethodType(_reference_forward, attention)
