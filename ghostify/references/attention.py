"""RefBERT's first-layer attention: the input's own keys/values and the reference's, one softmax
over both, then every real (unmasked) key position's weight shifted down by δ. Padding (of the
input or of the reference) gets weight 0, so it stays inert whatever δ is.

Families whose attention runs through transformers' AttentionInterface get it as a registered
attention function, switched on for the first layer's attention module only (through a view of
the config, as ghost attention does); DeBERTa-v2 and MPNet call :func:`shifted_attention` from
their own first-layer forwards (``references.families``).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from ..attention_scores import record_scores
from ..errors import GhostifyError
from ..ghost.attention import AttentionConfigView

REFERENCE_ATTENTION = "ghostify_reference"
_registered = False


def key_validity(attention_mask: torch.Tensor | None, batch: int, length: int, device) -> torch.Tensor:
    """``[B, L]``: which key positions some query may attend to, from a 2-D/3-D/4-D bool or additive mask."""
    if attention_mask is None:
        return torch.ones(batch, length, dtype=torch.bool, device=device)
    mask = attention_mask
    if mask.dtype != torch.bool:
        mask = mask > torch.finfo(mask.dtype).min / 2 if mask.is_floating_point() else mask != 0
    if mask.dim() >= 3:  # [B, Lq, L] or [B, heads, Lq, L]: a key is real if some query may see it
        mask = mask.any(dim=-2)
    if mask.dim() == 3:
        mask = mask.any(dim=1)
    return mask.expand(batch, length)


def shifted_attention(
    scores: torch.Tensor,
    valid: torch.Tensor,
    value: torch.Tensor,
    ref_scores: torch.Tensor,
    ref_valid: torch.Tensor,
    ref_value: torch.Tensor,
    delta: float,
    dropout: nn.Module | float = 0.0,
    training: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(softmax([S, S_ref]) − δ)`` over real keys, 0 elsewhere, times ``[V; V_ref]``.

    Shapes: ``scores [B, H, Lq, L]`` (already masked by the family), ``valid [B, L]``,
    ``value [B, H, L, dv]``, ``ref_scores [B, H, Lq, Lr]``, ``ref_valid [B, Lr]``,
    ``ref_value [B, H, Lr, dv]``. Returns the per-head output ``[B, H, Lq, dv]`` and the weights."""
    length = scores.size(-1)
    keep = torch.cat([valid, ref_valid], dim=-1)[:, None, None, :]
    low = torch.finfo(scores.dtype).min
    joint = torch.cat([scores.masked_fill(~keep[..., :length], low), ref_scores], dim=-1).masked_fill(~keep, low)
    probs = F.softmax(joint, dim=-1, dtype=torch.float32)
    probs = (probs - delta).masked_fill(~keep, 0.0).to(value.dtype)
    if isinstance(dropout, nn.Module):
        probs = dropout(probs)
    else:
        probs = F.dropout(probs, p=dropout, training=training)
    out = torch.matmul(probs[..., :length], value) + torch.matmul(probs[..., length:], ref_value)
    return out, probs


def reference_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The registered attention function of the first layer (eager otherwise: a shared ALBERT
    layer's later applications, and layers called without references)."""
    if getattr(module, "ghost_qk", None) is not None or getattr(module, "ghost_v", None) is not None:
        raise GhostifyError("the first layer has qk or v ghost modules and reference attention; attach ghost "
                            "modules only to later layers (attach-ghost --layers) or distill without --references")
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    record_scores(scores)  # the input's own columns only (attention-score distillation)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    batch, _, _, length = scores.shape
    valid = key_validity(attention_mask, batch, length, scores.device)
    reference = module.ghostify_reference.consume(module, valid, heads=query.size(1))
    if reference is None:
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        probs = F.dropout(probs, p=dropout, training=module.training)
        out = torch.matmul(probs, value)
    else:
        ref_scores = torch.matmul(query, reference.key.transpose(2, 3)) * scaling
        out, probs = shifted_attention(scores, valid, value, ref_scores, reference.valid, reference.value,
                                       module.ghostify_reference.delta, dropout, module.training)
    return out.transpose(1, 2).contiguous(), probs


def register_reference_attention() -> str:
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(REFERENCE_ATTENTION, reference_attention_forward)
        _registered = True
    return REFERENCE_ATTENTION


class ReferenceConfigView(AttentionConfigView):
    """The model config as the first layer's attention module sees it: reference attention."""

    __slots__ = ()

    def __getattr__(self, name: str) -> Any:
        if name == "_attn_implementation":
            return REFERENCE_ATTENTION
        return super().__getattr__(name)

    def __repr__(self) -> str:
        return f"ReferenceConfigView({type(self._config).__name__})"


def use_reference_attention(attention: nn.Module) -> None:
    """Point one attention module (of a family on the attention interface) at reference attention."""
    register_reference_attention()
    config = attention.config
    if isinstance(config, AttentionConfigView):
        config = object.__getattribute__(config, "_config")
    attention.config = ReferenceConfigView(config)
