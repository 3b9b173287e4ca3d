"""DeBERTa-v2/v3: head counts live in module attributes, and relative-position projections
(when not shared with the content ones) are laid out per head too."""

from __future__ import annotations

import types

import torch
from torch import nn

from ..attention import key_validity, shifted_attention
from .base import ArchitectureAdapter, LayerPaths


def _reference_forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None,
                       relative_pos=None, rel_embeddings=None):
    """DisentangledSelfAttention.forward with RefBERT's reference columns: content-to-content
    scores only (relative positions do not exist between the input and another example), at the
    same scale as the content scores."""
    from transformers.models.deberta_v2.modeling_deberta_v2 import scaled_size_sqrt

    if query_states is None:
        query_states = hidden_states
    heads = self.num_attention_heads
    query_layer = self.transpose_for_scores(self.query_proj(query_states), heads)
    key_layer = self.transpose_for_scores(self.key_proj(hidden_states), heads)
    value_layer = self.transpose_for_scores(self.value_proj(hidden_states), heads)
    scale_factor = 1 + ("c2p" in self.pos_att_type) + ("p2c" in self.pos_att_type)
    scale = scaled_size_sqrt(query_layer, scale_factor).to(dtype=query_layer.dtype)
    scores = torch.bmm(query_layer, key_layer.transpose(-1, -2) / scale)
    if self.relative_attention:
        rel_att = self.disentangled_attention_bias(query_layer, key_layer, relative_pos,
                                                   self.pos_dropout(rel_embeddings), scale_factor)
        if rel_att is not None:
            scores = scores + rel_att
    scores = scores.view(-1, heads, scores.size(-2), scores.size(-1))
    mask = attention_mask.bool()
    scores = scores.masked_fill(~mask, torch.finfo(query_layer.dtype).min)
    batch, _, length_q, length = scores.shape
    value = value_layer.view(batch, heads, length, -1)
    valid = key_validity(mask, batch, length, scores.device)
    reference = self.ghostify_reference.consume(self, valid, heads=heads)
    if reference is None:
        probs = self.dropout(nn.functional.softmax(scores, dim=-1))
        context = torch.matmul(probs, value)
    else:
        query = query_layer.view(batch, heads, length_q, -1)
        ref_scores = torch.matmul(query, reference.key.transpose(-1, -2) / scale)
        context, probs = shifted_attention(scores, valid, value, ref_scores, reference.valid, reference.value,
                                           self.ghostify_reference.delta, self.dropout)
    context = context.permute(0, 2, 1, 3).contiguous()
    context = context.view(*context.size()[:-2], -1)
    return (context, probs if output_attentions else None)


class DebertaV2Adapter(ArchitectureAdapter):
    model_types = ("deberta-v2",)
    dropout_attrs = ("hidden_dropout_prob", "pooler_dropout", "cls_dropout")
    uses_attention_interface = False  # its attention is computed in its own code

    def embedding_width(self, config) -> int:
        return int(getattr(config, "embedding_size", None) or config.hidden_size)

    def head_size(self, config) -> int:
        return int(getattr(config, "attention_head_size", None) or config.hidden_size // config.num_attention_heads)

    def paths(self, config) -> LayerPaths:
        extra: list[str] = []
        pos_types = config.pos_att_type or []
        if getattr(config, "relative_attention", False) and not getattr(config, "share_att_key", False):
            if "c2p" in pos_types:
                extra.append("attention.self.pos_key_proj")
            if "p2c" in pos_types:
                extra.append("attention.self.pos_query_proj")
        return LayerPaths(
            query="attention.self.query_proj",
            key="attention.self.key_proj",
            value="attention.self.value_proj",
            attention_output="attention.output.dense",
            ffn_up="intermediate.dense",
            ffn_down="output.dense",
            attention="attention.self",
            extra_head_outputs=tuple(extra),
        )

    def install_reference_attention(self, attention: nn.Module) -> None:
        attention.forward = types.MethodType(_reference_forward, attention)
