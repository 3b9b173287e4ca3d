"""ALBERT: one set of layer parameters is applied several times (cross-layer sharing).

The distinct layers are ``encoder.albert_layer_groups[g].albert_layers[j]``; pruning one of them
prunes every application of it, and a gate on it collects the gradient of all its applications.
``share-layers`` re-groups them through ``config.num_hidden_groups``.
"""

from __future__ import annotations

import copy

from torch import nn

from ..errors import GhostifyError
from .base import ArchitectureAdapter, LayerPaths


class AlbertAdapter(ArchitectureAdapter):
    model_types = ("albert",)
    embedding_paths = ("embeddings", "encoder.embedding_hidden_mapping_in")
    dropout_attrs = ("hidden_dropout_prob", "classifier_dropout_prob")

    def embedding_width(self, config) -> int:
        return int(config.embedding_size)

    def applied_layers(self, model: nn.Module) -> list[nn.Module]:
        config = model.config
        groups = model.base_model.encoder.albert_layer_groups
        steps = config.num_hidden_layers
        out: list[nn.Module] = []
        for i in range(steps):  # the group index exactly as AlbertTransformer.forward computes it
            out.extend(groups[int(i / (steps / config.num_hidden_groups))].albert_layers)
        return out

    # ALBERT shares through its config: ``num_hidden_groups`` groups of ``inner_group_num`` layers,
    # group g running steps [g * L / G, (g + 1) * L / G). share-layers re-groups through it.
    def sharing_groups(self, config, groups: int) -> list[list[int]]:
        steps = int(config.num_hidden_layers)
        if groups < 1 or steps % groups:
            divisors = [g for g in range(1, steps + 1) if steps % g == 0]
            raise GhostifyError(
                f"--groups {groups} does not divide ALBERT's {steps} layers (its config shares equal groups); "
                f"choose one of {divisors}"
            )
        size = steps // groups
        return [list(range(g * size, (g + 1) * size)) for g in range(groups)]

    def share_layers(self, model: nn.Module, groups: list[list[int]], init: str) -> None:
        """New ``albert_layer_groups``: group g's inner layer j starts from the mean (or the first)
        of inner layer j of the groups its steps ran before; merging and splitting groups both work."""
        from ..sharing import group_state

        config = model.config
        encoder = model.base_model.encoder
        old = list(encoder.albert_layer_groups)
        steps = config.num_hidden_layers
        old_group = [old[int(i / (steps / config.num_hidden_groups))] for i in range(steps)]
        new = []
        for group in groups:
            fresh = copy.deepcopy(old_group[group[0]])
            for j, layer in enumerate(fresh.albert_layers):
                state = group_state([old_group[i].albert_layers[j] for i in group], init)
                if state is not None:
                    layer.load_state_dict(state)
            new.append(fresh)
        encoder.albert_layer_groups = nn.ModuleList(new)
        config.num_hidden_groups = len(groups)

    def restore_sharing(self, model: nn.Module, groups: list[list[int]]) -> None:
        # the saved config's num_hidden_groups already built these groups
        if len(groups) != model.config.num_hidden_groups:
            from ..errors import CheckpointError

            raise CheckpointError(
                f"the sharing record lists {len(groups)} groups but the ALBERT config has num_hidden_groups="
                f"{model.config.num_hidden_groups}; the checkpoint's config.json was edited or is corrupt"
            )

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
