"""RefBERT's first-layer attention, per family.

Families on transformers' AttentionInterface (the adapter fact ``uses_attention_interface``) get
the registered reference attention function of :mod:`ghostify.attention`. DeBERTa-v2 and MPNet compute
attention in their own modules' code, so their first-layer attention module gets a forward of
its own here (keyed by model type in :data:`FORWARDS`): the family's forward with the reference
columns added. Both score content-to-content only: relative positions do not exist between the
input and another example.
"""

from __future__ import annotations

import math
import types
from collections.abc import Callable

import torch
from torch import nn

from ...architectures import ArchitectureAdapter
from ...attention import key_validity, shifted_attention, use_attention_kernel
from ...errors import GhostifyError


def _deberta_v2_forward(self, hidden_states, attention_mask, output_attentions=False, query_states=None,
                        relative_pos=None, rel_embeddings=None):
    """DisentangledSelfAttention.forward with RefBERT's reference columns, at the same scale as
    the content scores."""
    # only ever called on a built DeBERTa model, so its modeling module is loaded already;
    # importing it at module level would load transformers' modeling code for every family
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


def _mpnet_forward(self, hidden_states, attention_mask=None, position_bias=None, output_attentions=False, **kwargs):
    """MPNetSelfAttention.forward with RefBERT's reference columns (the relative-position bias
    covers the input's own columns only)."""
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


#: first-layer attention forwards of the families that compute attention themselves, by model type
FORWARDS: dict[str, Callable[..., tuple]] = {
    "deberta-v2": _deberta_v2_forward,
    "mpnet": _mpnet_forward,
}


def check_reference_family(adapter: ArchitectureAdapter, config) -> None:
    """Refuse the families whose first-layer attention cannot take reference columns."""
    why = None
    if adapter.rotary:
        why = "it rotates queries and keys by their position (RoPE), which reference columns do not have"
    elif adapter.pre_norm:
        why = "its layers normalise the attention input (pre-norm), and the stored reference states are not"
    elif adapter.paths(config).qkv:
        why = "its queries, keys and values come from one fused projection"
    elif adapter.heads_per_unit(config) > 1:
        why = "its keys and values have fewer heads than its queries (grouped-query attention)"
    if why:
        raise GhostifyError(f"--references (RefBERT) is not supported for {adapter.family} students: {why}; "
                            "distill without --references")


def install_reference_attention(adapter: ArchitectureAdapter, model_type: str, attention: nn.Module) -> None:
    """Make the first layer's ``attention`` module attend to references too."""
    if adapter.uses_attention_interface:
        use_attention_kernel(attention)  # its ``ghostify_reference`` child is the kernel's column hook
    elif model_type in FORWARDS:
        attention.forward = types.MethodType(FORWARDS[model_type], attention)
    else:
        raise GhostifyError(f"reference attention is not implemented for {type(adapter).__name__}")
