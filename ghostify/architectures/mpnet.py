"""MPNet: one relative-position bias table (one column per head) is shared by all layers, so a
pruned layer must pick its own heads' columns out of the bias (``position_bias_arg``)."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths


class MPNetAdapter(ArchitectureAdapter):
    model_types = ("mpnet",)
    family = "MPNet"
    layout = LayerPaths(
        query="attention.attn.q",
        key="attention.attn.k",
        value="attention.attn.v",
        attention_output="attention.attn.o",
        ffn_up="intermediate.dense",
        ffn_down="output.dense",
        attention="attention.attn",
    )
    # MPNetSelfAttention.forward(hidden_states, attention_mask, position_bias, ...)
    position_bias_arg = 2
    # MPNetSelfAttention derives the head width from hidden_size / heads; hidden-size pruning writes it here
    head_size_key = "attention_head_size"
    dropout_attrs = ("hidden_dropout_prob",)
    uses_attention_interface = False  # its attention is computed in its own code

    def position_offset(self, config) -> int:
        # RoBERTa's position ids, but MPNetEmbeddings fixes padding_idx = 1 whatever pad_token_id says
        return 2
