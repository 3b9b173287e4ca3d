"""The adapter interface: everything ghostify needs to know about one model family.

Adapters are the only code that names Hugging Face submodules. Generic code (pruning, gates,
ghost modules, FLOP counting) asks an adapter for *paths* of submodules relative to one encoder
layer and never spells them itself.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch
from torch import nn

from ..attention import use_attention_kernel


@dataclass(frozen=True)
class LayerPaths:
    """Submodule paths inside one encoder layer (relative to the layer module)."""

    query: str
    key: str
    value: str
    attention_output: str  # the projection O whose input is the concatenated heads
    ffn_up: str  # FFN1: hidden -> d_ff
    ffn_down: str  # FFN2: d_ff -> hidden
    attention: str  # the module that owns the head-count attributes
    # further projections whose *outputs* are laid out per head (DeBERTa's relative-position ones)
    extra_head_outputs: tuple[str, ...] = ()
    # the module whose output is the hidden state after the attention block (after its residual
    # and LayerNorm); a tuple output's first element is used
    attention_block: str = "attention"


class ArchitectureAdapter(ABC):
    """Base class; subclasses set the class attributes and override what differs."""

    model_types: tuple[str, ...] = ()
    #: paths of the encoder layers relative to ``model.base_model`` (ALBERT: its shared layers)
    layers_path: str = "encoder.layer"
    #: modules relative to ``model.base_model`` that make up the embeddings (not encoder params)
    embedding_paths: tuple[str, ...] = ("embeddings",)
    #: attribute names on the attention module that hold the head count / total head width
    head_count_attrs: tuple[str, ...] = ("num_attention_heads",)
    head_width_attrs: tuple[str, ...] = ("all_head_size",)
    #: whether attention runs through transformers' AttentionInterface (eager/SDPA/registered)
    uses_attention_interface: bool = True
    #: config attributes of the dropout on hidden states (embeddings, residual branches, task
    #: heads) and of the dropout on attention probabilities; read when the model is built
    dropout_attrs: tuple[str, ...] = ("hidden_dropout_prob", "classifier_dropout")
    attention_dropout_attrs: tuple[str, ...] = ("attention_probs_dropout_prob",)

    # ----- configuration -------------------------------------------------------------------
    def num_heads(self, config) -> int:
        return int(config.num_attention_heads)

    def head_size(self, config) -> int:
        return int(config.hidden_size) // self.num_heads(config)

    def ffn_size(self, config) -> int:
        return int(config.intermediate_size)

    def hidden_size(self, config) -> int:
        return int(config.hidden_size)

    @abstractmethod
    def paths(self, config) -> LayerPaths:
        """Where the projections sit inside one layer of this family."""

    def set_dropout(self, config, dropout: float | None, attention_dropout: float | None) -> None:
        """Set the dropout probabilities on ``config`` before a model is built from it (None: keep)."""
        for attrs, value in ((self.dropout_attrs, dropout), (self.attention_dropout_attrs, attention_dropout)):
            if value is not None:
                for attr in attrs:
                    setattr(config, attr, float(value))

    def vocab_size(self, config) -> int:
        return int(config.vocab_size)

    def embedding_width(self, config) -> int:
        """Columns of the word-embedding matrix (ALBERT, ELECTRA: a smaller embedding size)."""
        return self.hidden_size(config)

    def num_layers(self, config) -> int:
        """Layer applications in one forward pass (the depth, shared layers counted each time)."""
        return int(config.num_hidden_layers)

    # ----- module access ---------------------------------------------------------------------
    def applied_layers(self, model: nn.Module) -> list[nn.Module]:
        """The encoder layer run at each step of one forward pass, in order: a layer shared by
        several steps (``share-layers``, ALBERT) appears once per step, as the same object."""
        return list(model.base_model.get_submodule(self.layers_path))

    def layers(self, model: nn.Module) -> list[nn.Module]:
        """The distinct parameterised encoder layers, in order of first application."""
        return list({id(layer): layer for layer in self.applied_layers(model)}.values())

    def layer_applications(self, model: nn.Module) -> list[int]:
        """How often each layer of :meth:`layers` runs in one forward pass (1 unless shared)."""
        counts: dict[int, int] = {}
        for layer in self.applied_layers(model):
            counts[id(layer)] = counts.get(id(layer), 0) + 1
        return list(counts.values())

    def layer_order(self, model: nn.Module) -> list[int]:
        """For each step of one forward pass, the index in :meth:`layers` of the layer it runs."""
        index: dict[int, int] = {}
        return [index.setdefault(id(layer), len(index)) for layer in self.applied_layers(model)]

    def embedding_modules(self, model: nn.Module) -> list[nn.Module]:
        base = model.base_model
        return [base.get_submodule(p) for p in self.embedding_paths if _has_submodule(base, p)]

    def submodule(self, layer: nn.Module, path: str) -> nn.Module:
        return layer.get_submodule(path)

    def set_submodule(self, layer: nn.Module, path: str, module: nn.Module) -> None:
        parent_path, _, name = path.rpartition(".")
        parent = layer.get_submodule(parent_path) if parent_path else layer
        setattr(parent, name, module)

    # ----- structural edits ------------------------------------------------------------------
    def set_heads(self, layer: nn.Module, head_index: list[int], head_size: int) -> None:
        """Record the kept heads on the attention module after its projections were sliced.

        ``head_index`` holds the *original* indices of the kept heads, in their new order.
        """
        attention = layer.get_submodule(self.paths_for_layer(layer).attention)
        for attr in self.head_count_attrs:
            if hasattr(attention, attr):
                setattr(attention, attr, len(head_index))
        for attr in self.head_width_attrs:
            if hasattr(attention, attr):
                setattr(attention, attr, len(head_index) * head_size)

    # ----- cross-layer sharing (share-layers) -----------------------------------------------
    def sharing_groups(self, config, groups: int) -> list[list[int]]:
        """Split the ``num_layers`` steps into ``groups`` contiguous groups; sizes differ by at
        most one, the larger groups first (12 steps in 5 groups: 3, 3, 2, 2, 2)."""
        depth = self.num_layers(config)
        if not 1 <= groups <= depth:
            from ..errors import GhostifyError

            raise GhostifyError(f"--groups {groups} must be between 1 and the model's {depth} layers")
        size, extra = divmod(depth, groups)
        out, start = [], 0
        for g in range(groups):
            end = start + size + (1 if g < extra else 0)
            out.append(list(range(start, end)))
            start = end
        return out

    def share_layers(self, model: nn.Module, groups: list[list[int]], init: str) -> None:
        """Make the steps of each group run ONE layer module, initialised from the group's layers
        (``mean``: element-wise mean over its steps; ``first``: its first layer)."""
        from ..sharing import group_state

        slots = model.base_model.get_submodule(self.layers_path)
        current = list(slots)
        states = [group_state([current[i] for i in group], init) for group in groups]
        used: set[int] = set()
        for group, state in zip(groups, states):
            target = current[group[0]]
            if id(target) in used:  # an earlier group keeps this module: split it off
                import copy

                target = copy.deepcopy(target)
            used.add(id(target))
            if state is not None:
                target.load_state_dict(state)
            for i in group:
                slots[i] = target

    def restore_sharing(self, model: nn.Module, groups: list[list[int]]) -> None:
        """Rebuild recorded sharing on a freshly built model (weights are loaded afterwards)."""
        slots = model.base_model.get_submodule(self.layers_path)
        if sum(len(g) for g in groups) != len(slots):
            from ..errors import CheckpointError

            raise CheckpointError(
                f"the sharing record covers {sum(len(g) for g in groups)} layers but the config builds {len(slots)}; "
                "the checkpoint's config.json was edited or is corrupt"
            )
        for group in groups:
            for i in group[1:]:
                slots[i] = slots[group[0]]

    def install_reference_attention(self, attention: nn.Module) -> None:
        """Make the first layer's ``attention`` module attend to references too (RefBERT): through
        ghostify's attention kernel here; families that compute attention themselves override."""
        if not self.uses_attention_interface:
            from ..errors import GhostifyError

            raise GhostifyError(f"reference attention is not implemented for {type(self).__name__}")
        use_attention_kernel(attention)  # its ``ghostify_reference`` child is the kernel's column hook

    def paths_for_layer(self, layer: nn.Module) -> LayerPaths:
        return self._paths

    def bind(self, config) -> "ArchitectureAdapter":
        """Resolve config-dependent paths once (DeBERTa's optional projections)."""
        self._paths = self.paths(config)
        return self


def _has_submodule(module: nn.Module, path: str) -> bool:
    try:
        module.get_submodule(path)
    except AttributeError:
        return False
    return True


def register_head_index(attention: nn.Module, head_index: list[int]) -> None:
    """Store the kept original head indices as a (non-persistent) buffer on a module."""
    index = torch.tensor(head_index, dtype=torch.long)
    if "ghostify_head_index" in attention._buffers:
        attention.ghostify_head_index = index.to(attention.ghostify_head_index.device)
    else:
        attention.register_buffer("ghostify_head_index", index, persistent=False)
