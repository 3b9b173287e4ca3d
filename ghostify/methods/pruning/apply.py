"""Structured pruning: changing a model, and its record entry (see :mod:`ghostify.methods.pruning`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction

from torch import nn

from ...architectures import ArchitectureAdapter, attention_units, ffn_units, get_adapter
from ...errors import GhostifyError
from ...record import GhostifyRecord
from ..base import check_order
from .allocation import Selection, select
from .importance import ImportanceScores
from .modules import prune_layer


def prune_model(
    model: nn.Module,
    adapter: ArchitectureAdapter,
    record: GhostifyRecord,
    keep_heads: Sequence[Sequence[int]],
    keep_neurons: Sequence[Sequence[int]],
) -> GhostifyRecord:
    """Prune every distinct layer in place and return the updated record."""
    layers = adapter.layers(model)
    heads, ffn = [], []
    for layer, old_heads, h_keep, n_keep in zip(layers, record.heads, keep_heads, keep_neurons, strict=True):
        heads.append(prune_layer(adapter, layer, model.config, h_keep, n_keep, old_heads))
        ffn.append(len(n_keep))
    return replace(record, heads=heads, ffn=ffn, history=list(record.history))


def dense_record(model: nn.Module, adapter: ArchitectureAdapter) -> GhostifyRecord:
    """The record describing a model as it is now (for models that come without one)."""
    heads, ffn = [], []
    for layer in adapter.layers(model):
        heads.append(list(range(attention_units(adapter, layer, model.config))))
        ffn.append(ffn_units(adapter, layer))
    return GhostifyRecord(heads=heads, ffn=ffn)


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
    check_order("pruning", record)
    selection = select(
        scores.heads,
        scores.ffn,
        num_heads=adapter.num_units(model.config),
        ffn_size=adapter.ffn_size(model.config),
        heads_width=heads_width,
        ffn_width=ffn_width,
        allocation=allocation,
    )
    return selection, prune_model(model, adapter, record, selection.heads, selection.neurons)
