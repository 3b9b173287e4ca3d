"""DistilBERT: its own names, and its heads counted as ``n_heads``."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths


class DistilBertAdapter(ArchitectureAdapter):
    model_types = ("distilbert",)
    dropout_attrs = ("dropout", "seq_classif_dropout", "qa_dropout")
    attention_dropout_attrs = ("attention_dropout",)
    layers_path = "transformer.layer"
    head_count_attrs = ("n_heads",)
    head_width_attrs = ()

    def num_heads(self, config) -> int:
        return int(config.n_heads)

    def hidden_size(self, config) -> int:
        return int(config.dim)

    def num_layers(self, config) -> int:
        return int(config.n_layers)

    def head_size(self, config) -> int:
        return int(config.dim) // int(config.n_heads)

    def ffn_size(self, config) -> int:
        return int(config.hidden_dim)

    def paths(self, config) -> LayerPaths:
        return LayerPaths(
            query="attention.q_lin",
            key="attention.k_lin",
            value="attention.v_lin",
            attention_output="attention.out_lin",
            ffn_up="ffn.lin1",
            ffn_down="ffn.lin2",
            attention="attention",
            attention_block="sa_layer_norm",
        )
