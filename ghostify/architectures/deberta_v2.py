"""DeBERTa-v2/v3: head counts live in module attributes, and relative-position projections
(when not shared with the content ones) are laid out per head too."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths


class DebertaV2Adapter(ArchitectureAdapter):
    model_types = ("deberta-v2",)
    dropout_attrs = ("hidden_dropout_prob", "pooler_dropout", "cls_dropout")
    uses_attention_interface = False  # its attention is computed in its own code

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
