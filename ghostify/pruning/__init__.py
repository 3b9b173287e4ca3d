"""Importance scoring, unit selection and physical pruning."""

from __future__ import annotations

from fractions import Fraction

from torch import nn

from ..architectures import get_adapter
from ..errors import GhostifyError
from ..record import GhostifyRecord
from .allocation import ALLOCATIONS, Selection, parse_width, select
from .gates import Gates, gated
from .importance import SCORES_NAME, ImportanceScores, compute_importance, magnitude_importance
from .surgery import apply_structure, prune_model


def check_scores_match(model: nn.Module, record: GhostifyRecord, scores: ImportanceScores, source: str) -> None:
    """Scores must describe the model as it is now (same layers, heads and FFN sizes)."""
    heads = [t.numel() for t in scores.heads]
    ffn = [t.numel() for t in scores.ffn]
    if heads != record.heads_per_layer or ffn != record.ffn:
        raise GhostifyError(
            f"importance scores in {source} are for {heads} heads / {ffn} neurons per layer, but the model has "
            f"{record.heads_per_layer} / {record.ffn}; re-run `ghostify importance` on this model"
        )


def prune(
    model: nn.Module,
    record: GhostifyRecord,
    scores: ImportanceScores,
    *,
    heads_width: Fraction,
    ffn_width: Fraction,
    allocation: str = "uniform",
) -> tuple[Selection, GhostifyRecord]:
    """Prune ``model`` in place to the given widths by ``scores``; returns what was kept and the
    new record.

    Example:
        >>> selection, record = prune(model, record, scores, heads_width=Fraction(3, 12),
        ...                           ffn_width=Fraction(3, 12))  # doctest: +SKIP
    """
    adapter = get_adapter(model.config)
    if record.ghost:
        raise GhostifyError("the model already has ghost modules; prune before attach-ghost (the paper's order)")
    if record.grouped:
        raise GhostifyError("the model has grouped layers (group-linear); prune before group-linear: prune the checkpoint it was made from")
    selection = select(
        scores.heads,
        scores.ffn,
        num_heads=adapter.num_heads(model.config),
        ffn_size=adapter.ffn_size(model.config),
        heads_width=heads_width,
        ffn_width=ffn_width,
        allocation=allocation,
    )
    return selection, prune_model(model, adapter, record, selection.heads, selection.neurons)


__all__ = [
    "ALLOCATIONS",
    "Gates",
    "ImportanceScores",
    "SCORES_NAME",
    "Selection",
    "apply_structure",
    "check_scores_match",
    "compute_importance",
    "gated",
    "magnitude_importance",
    "parse_width",
    "prune",
    "prune_model",
    "select",
]
