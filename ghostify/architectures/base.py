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

    # ----- module access ---------------------------------------------------------------------
    def layers(self, model: nn.Module) -> list[nn.Module]:
        """The distinct parameterised encoder layers, in order of first application."""
        return list(model.base_model.get_submodule(self.layers_path))

    def layer_applications(self, model: nn.Module) -> list[int]:
        """How often each layer of :meth:`layers` runs in one forward pass (1 unless shared)."""
        return [1] * len(self.layers(model))

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
