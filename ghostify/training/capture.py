"""Capture what layer-wise distillation compares: hidden states after every attention block and
every FFN block, and pre-softmax attention scores.

Attention scores are recorded by ghostify's attention kernel (:mod:`ghostify.attention`, registered
with transformers' ``AttentionInterface``), which computes attention eagerly and records
``Q·Kᵀ·scale`` (with any ghost maps) before the mask and softmax, so nothing depends on
``output_attentions`` (which SDPA does not support). Switching a model to the kernel keeps the
modules that already run it (ghosted or referenced layers) with their hooks, so their scores are
recorded too. Families whose attention does not go through the interface say so through their adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn

from ..architectures import get_adapter
from ..attention import ATTENTION, recording_scores
from ..errors import GhostifyError


def enable_score_capture(model: nn.Module) -> None:
    """Switch ``model`` to ghostify's attention kernel, which records scores inside :func:`capture`
    (raises for families without the attention interface)."""
    adapter = get_adapter(model.config)
    if not adapter.uses_attention_interface:
        raise GhostifyError(
            f"attention-score distillation needs transformers' attention interface, which {model.config.model_type} "
            "does not use; set --attention-weight 0 for this model"
        )
    model.set_attn_implementation(ATTENTION)


@dataclass
class Captured:
    attention_blocks: list[torch.Tensor] = field(default_factory=list)  # per layer application
    scores: list[torch.Tensor] = field(default_factory=list)


@contextlib.contextmanager
def capture(model: nn.Module, *, attention_blocks: bool = True, scores: bool = False) -> Iterator[Captured]:
    """Record the outputs of every attention block (and attention scores) during forward passes
    inside the ``with`` block, in the order the layers run (a shared ALBERT layer records each
    application)."""
    adapter = get_adapter(model.config)
    captured = Captured()
    handles = []

    def keep(module, args, output):
        captured.attention_blocks.append(output[0] if isinstance(output, tuple) else output)

    def keep_input(module, args):
        captured.attention_blocks.append(args[0])

    if attention_blocks:
        for layer in adapter.layers(model):
            paths = adapter.paths_for_layer(layer)
            block = layer.get_submodule(paths.attention_block)
            if paths.attention_block_is_input:  # pre-norm: the residual sum is the FFN norm's input
                handles.append(block.register_forward_pre_hook(keep_input))
            else:
                handles.append(block.register_forward_hook(keep))
    try:
        with recording_scores(captured.scores if scores else None):
            yield captured
    finally:
        for handle in handles:
            handle.remove()
