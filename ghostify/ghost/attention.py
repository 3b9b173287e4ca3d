"""Ghost modules inside attention (positions ``qk`` and ``v``), through transformers' AttentionInterface.

The scores and values of a layer exist only inside its attention function, so ghostify registers
its own (eager) attention function and points the ghosted layers' attention modules at it. It
reads the layer's ``ghost_qk`` / ``ghost_v`` children from the module it is called with.

Only the ghosted attention modules switch: each gets a view of the model config whose
``_attn_implementation`` is ghostify's. The model config is untouched, so other layers keep SDPA,
and a later ``model.set_attn_implementation(...)`` (``ghostify info`` switches to eager to count
FLOPs) cannot silently drop the ghost modules.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

GHOST_ATTENTION = "ghostify_ghost"
_registered = False


def register_ghost_attention() -> None:
    """Register :func:`ghost_attention_forward` with transformers (idempotent)."""
    global _registered
    if _registered:
        return
    from transformers import AttentionInterface

    AttentionInterface.register(GHOST_ATTENTION, ghost_attention_forward)
    _registered = True


def ghost_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention (as transformers' ``eager_attention_forward``) with the layer's ghost modules:
    ``ghost_qk`` adds ghost maps to the scores before masking; ``ghost_v`` appends ghost heads to
    the per-head outputs, which the output projection's ``ghost_heads`` columns consume."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    ghost_qk = getattr(module, "ghost_qk", None)
    if ghost_qk is not None:
        batch, _, length, _ = scores.shape
        scores = ghost_qk(scores, ghost_qk.context.keep(scores, batch, length))
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:  # SDPA-style mask: True = attend
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:  # eager-style additive mask
            scores = scores + attention_mask
    probs = nn.functional.softmax(scores, dim=-1)
    probs = nn.functional.dropout(probs, p=dropout, training=module.training)
    out = torch.matmul(probs, value)
    ghost_v = getattr(module, "ghost_v", None)
    if ghost_v is not None:
        out = torch.cat([out, ghost_v(value, probs)], dim=1)
    return out.transpose(1, 2).contiguous(), probs


class AttentionConfigView:
    """The model config as seen by one ghosted attention module: everything is read through to the
    live config, except ``_attn_implementation``, which is ghostify's attention function."""

    __slots__ = ("_config",)

    def __init__(self, config: Any) -> None:
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name == "_attn_implementation":
            return GHOST_ATTENTION
        if name.startswith("__") or name == "_config":
            raise AttributeError(name)
        return getattr(object.__getattribute__(self, "_config"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._config, name, value)

    def __getstate__(self) -> dict[str, Any]:
        return {"_config": self._config}

    def __setstate__(self, state: dict[str, Any]) -> None:
        object.__setattr__(self, "_config", state["_config"])

    def __repr__(self) -> str:
        return f"AttentionConfigView({type(self._config).__name__}, _attn_implementation={GHOST_ATTENTION!r})"
