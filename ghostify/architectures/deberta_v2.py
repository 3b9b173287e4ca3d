"""DeBERTa-v2/v3: head counts live in module attributes, and relative-position projections
(when not shared with the content ones) are laid out per head too."""

from __future__ import annotations

from dataclasses import replace

from .base import ArchitectureAdapter, LayerPaths


class DebertaV2Adapter(ArchitectureAdapter):
    model_types = ("deberta-v2",)
    family = "DeBERTa-v2"
    layout = LayerPaths(
        query="attention.self.query_proj",
        key="attention.self.key_proj",
        value="attention.self.value_proj",
        attention_output="attention.output.dense",
        ffn_up="intermediate.dense",
        ffn_down="output.dense",
        attention="attention.self",
    )
    head_size_key = "attention_head_size"
    embedding_size_key = "embedding_size"
    # the classification pooler's width (ContextPooler reads the first token's hidden state)
    hidden_width_keys = ("pooler_hidden_size",)
    # built when embedding_size != hidden_size (DebertaV2Embeddings.__init__), without a bias
    embedding_projection = "embeddings.embed_proj"
    embedding_projection_bias = False
    embedding_projection_if_present = False  # `if self.embedding_size != self.config.hidden_size`
    # the norm of the relative-position embeddings (one table for the whole batch)
    shared_hidden_modules = ("encoder.LayerNorm",)
    dropout_attrs = ("hidden_dropout_prob", "pooler_dropout", "cls_dropout")
    uses_attention_interface = False  # its attention is computed in its own code

    def paths(self, config) -> LayerPaths:
        # the relative-position projections exist only when relative attention has its own keys
        extra: list[str] = []
        pos_types = config.pos_att_type or []
        if getattr(config, "relative_attention", False) and not getattr(config, "share_att_key", False):
            if "c2p" in pos_types:
                extra.append("attention.self.pos_key_proj")
            if "p2c" in pos_types:
                extra.append("attention.self.pos_query_proj")
        return replace(self.layout, extra_head_outputs=tuple(extra))

    def hidden_pruning_refusal(self, config) -> str | None:
        kernel = getattr(config, "conv_kernel_size", 0) or 0
        if kernel > 0:  # ConvLayer: a Conv1d over the hidden width, mixing channels
            return (f"this DeBERTa-v2 runs a convolution across the hidden channels after its first layer "
                    f"(conv_kernel_size={kernel})")
        return super().hidden_pruning_refusal(config)

    def first_layer_fixed(self, config) -> str | None:
        # DebertaV2Encoder: `if i == 0 and self.conv is not None` (DeBERTa-v2 xlarge/xxlarge)
        kernel = getattr(config, "conv_kernel_size", 0) or 0
        if kernel <= 0:
            return None
        return f"this DeBERTa-v2 runs a convolution after its first layer (conv_kernel_size={kernel})"
