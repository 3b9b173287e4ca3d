"""ALBERT: one set of layer parameters is applied several times (cross-layer sharing).

The distinct layers are ``encoder.albert_layer_groups[g].albert_layers[j]``; pruning one of them
prunes every application of it, and a gate on it collects the gradient of all its applications.
"""

from __future__ import annotations

from torch import nn

from .base import ArchitectureAdapter, LayerPaths


class AlbertAdapter(ArchitectureAdapter):
    model_types = ("albert",)
    embedding_paths = ("embeddings", "encoder.embedding_hidden_mapping_in")
    dropout_attrs = ("hidden_dropout_prob", "classifier_dropout_prob")

    def layers(self, model: nn.Module) -> list[nn.Module]:
        groups = model.base_model.encoder.albert_layer_groups
        return [layer for group in groups for layer in group.albert_layers]

    def layer_applications(self, model: nn.Module) -> list[int]:
        config = model.config
        per_group = config.num_hidden_layers // config.num_hidden_groups
        counts = []
        for group in model.base_model.encoder.albert_layer_groups:
            counts.extend([per_group] * len(group.albert_layers))
        return counts

    def paths(self, config) -> LayerPaths:
        return LayerPaths(
            query="attention.query",
            key="attention.key",
            value="attention.value",
            attention_output="attention.dense",
            ffn_up="ffn",
            ffn_down="ffn_output",
            attention="attention",
        )
