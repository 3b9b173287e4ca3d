"""Capture what layer-wise distillation compares: hidden states after every attention block and
every FFN block, and pre-softmax attention scores.

Attention scores come from a registered attention function (transformers' ``AttentionInterface``)
that computes attention eagerly and records ``Q·Kᵀ·scale`` before the mask and softmax, so nothing
depends on ``output_attentions`` (which SDPA does not support). Families whose attention does not
go through the interface say so through their adapter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn import functional as F

from ..architectures import get_adapter
from ..attention_scores import score_sink as _score_sink
from ..errors import GhostifyError

CAPTURE_ATTENTION = "ghostify_capture"
_registered = False


def _capturing_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    scaling = scaling if scaling is not None else query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    sink = _score_sink.get()
    if sink is not None:
        sink.append(scores)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    probs = F.dropout(probs, p=dropout, training=module.training)
    output = torch.matmul(probs, value).transpose(1, 2).contiguous()
    return output, probs


def register_capture_attention() -> str:
    """Register the capturing attention function (and its eager-style mask) once."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface, eager_mask

        AttentionInterface.register(CAPTURE_ATTENTION, _capturing_attention)
        AttentionMaskInterface.register(CAPTURE_ATTENTION, eager_mask)
        _registered = True
    return CAPTURE_ATTENTION


def enable_score_capture(model: nn.Module) -> None:
    """Switch ``model`` to the capturing attention function (raises for families without the
    attention interface)."""
    adapter = get_adapter(model.config)
    if not adapter.uses_attention_interface:
        raise GhostifyError(
            f"attention-score distillation needs transformers' attention interface, which {model.config.model_type} "
            "does not use; set --attention-weight 0 for this model"
        )
    model.set_attn_implementation(register_capture_attention())


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

    if attention_blocks:
        for layer in adapter.layers(model):
            block = layer.get_submodule(adapter.paths_for_layer(layer).attention_block)
            handles.append(block.register_forward_hook(keep))
    token = _score_sink.set(captured.scores if scores else None)
    try:
        yield captured
    finally:
        _score_sink.reset(token)
        for handle in handles:
            handle.remove()
