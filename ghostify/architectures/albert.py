"""ALBERT: one set of layer parameters is applied several times (cross-layer sharing).

The distinct layers are ``encoder.albert_layer_groups[g].albert_layers[j]``; pruning one of them
prunes every application of it, and a gate on it collects the gradient of all its applications.
``share-layers`` re-groups them through ``config.num_hidden_groups`` (see ``ghostify.methods.sharing``).
"""

from __future__ import annotations

from .base import ArchitectureAdapter, ConfigGroups, LayerPaths


class AlbertAdapter(ArchitectureAdapter):
    model_types = ("albert",)
    family = "ALBERT"
    layout = LayerPaths(
        query="attention.query",
        key="attention.key",
        value="attention.value",
        attention_output="attention.dense",
        ffn_up="ffn",
        ffn_down="ffn_output",
        attention="attention",
    )
    # num_hidden_groups groups of inner_group_num layers, group g running steps [g * L / G, (g + 1) * L / G)
    config_groups = ConfigGroups(path="encoder.albert_layer_groups", inner="albert_layers",
                                 count_key="num_hidden_groups", inner_count_key="inner_group_num")
    embedding_size_key = "embedding_size"
    embedding_paths = ("embeddings", "encoder.embedding_hidden_mapping_in")
    dropout_attrs = ("hidden_dropout_prob", "classifier_dropout_prob")
    # AlbertAttention derives the head width from hidden_size / heads; hidden-size pruning writes it here
    head_size_key = "attention_head_size"
    # always built, whatever the two widths (AlbertTransformer.__init__)
    embedding_projection = "encoder.embedding_hidden_mapping_in"

    def hidden_pruning_refusal(self, config) -> str | None:
        # the embeddings (and the MLM head's E-wide modules) always run at embedding_size, before the mapping
        # into the residual stream: at equal widths nothing tells their modules from the stream's
        if self.embedding_width(config) == self.hidden_size(config):
            return (f"this ALBERT's embedding_size equals its hidden_size ({self.hidden_size(config)}), so its "
                    "embedding modules cannot be told from the residual stream's")
        return super().hidden_pruning_refusal(config)
