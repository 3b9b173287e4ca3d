"""ghostify's one eager attention kernel, with hooks: GhostBERT's ghost maps (``qk``) and ghost
value heads (``v``), RefBERT's reference columns and the score capture of attention-score
distillation all run in :func:`attention_forward`, so any combination of them works.

The kernel is registered with transformers' ``AttentionInterface`` (and its eager mask with
``AttentionMaskInterface``) under :data:`ATTENTION`. A module runs it either because the whole
model was switched to it (``model.set_attn_implementation(ATTENTION)``: score capture) or because
its config is an :class:`AttentionConfigView` (:func:`use_attention_kernel`: ghosted and referenced
modules, which keep the kernel whatever the model is switched to later). Hooks are found on the
attention module, under the child names the checkpoints already use:

1. ``ghost_qk`` (:class:`ScoreHook`): extra score terms, ``scores = hook.add_scores(scores)``;
2. score capture (:func:`recording_scores`): the input's own columns, before masking;
3. masking;
4. ``ghostify_reference`` (:class:`ColumnHook`): extra key/value columns, one softmax over the own
   and extra columns, then ``−δ`` at real key positions and 0 at padding (:func:`shifted_attention`,
   which also does 5–7 then);
5. softmax; 6. dropout; 7. ``P·V``;
8. ``ghost_v`` (:class:`HeadHook`): extra heads appended to the per-head outputs, mixed by the
   probabilities of the own columns.

Structure code: it imports only torch and transformers, so exported checkpoints can carry it.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator
from typing import Any, Protocol

import torch
from torch import nn
from torch.nn import functional as F
from transformers import AttentionInterface
from transformers.masking_utils import AttentionMaskInterface, eager_mask

#: the one registered attention implementation
#: the name under which transformers finds this kernel. A copy of this module shipped inside an
#: exported checkpoint (``ghostify export --format hf``) registers its own kernel under its own
#: name, so loading such a checkpoint next to ghostify never replaces ghostify's kernel (whose
#: hooks a copy's kernel would not see)
ATTENTION = "ghostify" if __name__ == "ghostify.attention" else f"ghostify-{__name__.rpartition('.')[0].rpartition('.')[2]}"
#: the attention module's children the kernel calls (their names are part of the checkpoint format)
SCORE_HOOK = "ghost_qk"
COLUMN_HOOK = "ghostify_reference"
HEAD_HOOK = "ghost_v"

_score_sink: contextvars.ContextVar[list[torch.Tensor] | None] = contextvars.ContextVar("ghostify_score_sink",
                                                                                         default=None)


class ScoreHook(Protocol):
    def add_scores(self, scores: torch.Tensor) -> torch.Tensor:
        """``[B, H, Lq, L]`` scaled scores → the same with extra terms added."""


class Columns(Protocol):
    key: torch.Tensor  # [B, H, Lr, d]
    value: torch.Tensor  # [B, H, Lr, dv]
    valid: torch.Tensor  # [B, Lr]


class ColumnHook(Protocol):
    delta: float  # subtracted from every real key position's weight

    def consume(self, attention: nn.Module, valid: torch.Tensor, *, heads: int) -> Columns | None:
        """The extra columns of this call (None: plain attention), given the own keys' ``valid [B, L]``."""


class HeadHook(Protocol):
    def __call__(self, value: torch.Tensor, probs: torch.Tensor) -> torch.Tensor:
        """``value [B, H, L, dv]`` and the own columns' ``probs [B, H, Lq, L]`` → ``[B, extra, Lq, dv]``."""


@contextlib.contextmanager
def recording_scores(sink: list[torch.Tensor] | None) -> Iterator[None]:
    """Append every kernel call's pre-mask scores to ``sink`` inside the ``with`` block (None: don't)."""
    token = _score_sink.set(sink)
    try:
        yield
    finally:
        _score_sink.reset(token)


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


def apply_mask(scores: torch.Tensor, attention_mask: torch.Tensor | None) -> torch.Tensor:
    """Scores with an SDPA-style bool mask (True = attend) or an eager-style additive mask applied."""
    if attention_mask is None:
        return scores
    if attention_mask.dtype == torch.bool:
        return scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
    return scores + attention_mask


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
    """``(softmax([S, S_ref]) − δ)`` over real keys, 0 elsewhere, times ``[V; V_ref]`` (RefBERT).

    Shapes: ``scores [B, H, Lq, L]`` (already masked), ``valid [B, L]``, ``value [B, H, L, dv]``,
    ``ref_scores [B, H, Lq, Lr]``, ``ref_valid [B, Lr]``, ``ref_value [B, H, Lr, dv]``. Returns the
    per-head output ``[B, H, Lq, dv]`` and the weights ``[B, H, Lq, L + Lr]``. DeBERTa-v2 and MPNet,
    which compute attention in their own code, call it from their first-layer forwards."""
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


def _repeat_kv(states: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """Grouped-query attention: each key/value head serves ``module.num_key_value_groups``
    consecutive query heads (transformers' ``repeat_kv``)."""
    groups = int(getattr(module, "num_key_value_groups", 1))
    if groups == 1:
        return states
    batch, heads, length, size = states.shape
    return states[:, :, None].expand(batch, heads, groups, length, size).reshape(batch, heads * groups, length, size)


def attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention (transformers' ``eager_attention_forward``) with the hooks ``module`` has
    (see the module docstring for their order). Returns ``[B, Lq, H (+ extra), dv]`` and the weights."""
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    key, value = _repeat_kv(key, module), _repeat_kv(value, module)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    score_hook: ScoreHook | None = getattr(module, SCORE_HOOK, None)
    if score_hook is not None:
        scores = score_hook.add_scores(scores)
    sink = _score_sink.get()
    if sink is not None:
        sink.append(scores)
    scores = apply_mask(scores, attention_mask)
    head_hook: HeadHook | None = getattr(module, HEAD_HOOK, None)
    column_hook: ColumnHook | None = getattr(module, COLUMN_HOOK, None)
    columns = None
    if column_hook is not None:
        batch, _, _, length = scores.shape
        valid = key_validity(attention_mask, batch, length, scores.device)
        columns = column_hook.consume(module, valid, heads=query.size(1))
    if columns is not None:
        extra_scores = torch.matmul(query, columns.key.transpose(2, 3)) * scaling
        out, probs = shifted_attention(scores, valid, value, extra_scores, columns.valid, columns.value,
                                       column_hook.delta, dropout, module.training)
        own = probs[..., :length]  # extra heads have no values in the extra columns
    else:
        if score_hook is None and head_hook is None:
            probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
        else:  # GhostBERT's softmax in the scores' dtype: ghost checkpoints stay bit-exact under half precision
            probs = F.softmax(scores, dim=-1)
        probs = own = F.dropout(probs, p=dropout, training=module.training)
        out = torch.matmul(probs, value)
    if head_hook is not None:
        out = torch.cat([out, head_hook(value, own)], dim=1)
    return out.transpose(1, 2).contiguous(), probs


# registered on import: any module pointed at ATTENTION (a view, a switched model) finds it
AttentionInterface.register(ATTENTION, attention_forward)
AttentionMaskInterface.register(ATTENTION, eager_mask)


class AttentionConfigView:
    """The model config as one attention module sees it: everything is read through to the live
    config, except ``_attn_implementation``, which is :data:`ATTENTION`. The model config is
    untouched, so other layers keep their implementation, and a later
    ``model.set_attn_implementation(...)`` (``ghostify info`` switches to eager to count FLOPs)
    cannot silently drop the module's hooks."""

    __slots__ = ("_config",)

    def __init__(self, config: Any) -> None:
        object.__setattr__(self, "_config", config)

    def __getattr__(self, name: str) -> Any:
        if name == "_attn_implementation":
            return ATTENTION
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
        return f"AttentionConfigView({type(self._config).__name__}, _attn_implementation={ATTENTION!r})"


def use_attention_kernel(attention: nn.Module, config: Any | None = None) -> None:
    """Run ``attention`` (a module on transformers' attention interface) through the kernel, via a
    view of ``config`` (default: its own); a no-op when it already does."""
    if not isinstance(attention.config, AttentionConfigView):
        attention.config = AttentionConfigView(attention.config if config is None else config)
