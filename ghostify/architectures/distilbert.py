"""DistilBERT: its own names, and its heads counted as ``n_heads``."""

from __future__ import annotations

from .base import ArchitectureAdapter, LayerPaths


class DistilBertAdapter(ArchitectureAdapter):
    model_types = ("distilbert",)
    family = "DistilBERT"
    layout = LayerPaths(
        query="attention.q_lin",
        key="attention.k_lin",
        value="attention.v_lin",
        attention_output="attention.out_lin",
        ffn_up="ffn.lin1",
        ffn_down="ffn.lin2",
        attention="attention",
        attention_block="sa_layer_norm",
    )
    num_heads_key = "n_heads"
    hidden_size_key = "dim"
    ffn_size_key = "hidden_dim"
    num_layers_key = "n_layers"
    dropout_attrs = ("dropout", "seq_classif_dropout", "qa_dropout")
    attention_dropout_attrs = ("attention_dropout",)
    layers_path = "transformer.layer"
    head_count_attrs = ("n_heads",)
    head_width_attrs = ()
    # DistilBertSelfAttention derives the head width from dim / n_heads; hidden-size pruning writes it here
    head_size_key = "attention_head_size"
