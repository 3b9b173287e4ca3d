"""Structured pruning: changing a model, and its record entry (see :mod:`ghostify.methods.pruning`)."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import replace
from fractions import Fraction
from pathlib import Path
from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter, get_adapter
from ...errors import GhostifyError
from ...record import GhostifyRecord
from ..base import Context, Entry, check_order
from .allocation import Selection, check_keeps_a_head, select
from .importance import SCORES_NAME, ImportanceScores, magnitude_importance
from .modules import prune_layer
from .settings import PruneSettings


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
    return GhostifyRecord.of_model(model, adapter)


def check_scores_match(model: nn.Module, record: GhostifyRecord, scores: ImportanceScores, source: str) -> None:
    """Scores must describe the model as it is now (same layers, heads and FFN sizes)."""
    heads = [t.numel() for t in scores.heads]
    ffn = [t.numel() for t in scores.ffn]
    if len(heads) != len(record.heads):  # the layers changed since (drop-layers, share-layers)
        raise GhostifyError(
            f"importance scores in {source} are for a model of {len(heads)} layers, but the model has "
            f"{len(record.heads)}; re-run `ghostify importance` on this model"
        )
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
    allocation: str = PruneSettings.allocation,
) -> tuple[Selection, GhostifyRecord]:
    """Prune ``model`` in place to the given widths by ``scores``; returns what was kept and the
    new record.

    Example:
        >>> selection, record = prune(model, record, scores, heads_width=Fraction(3, 12),
        ...                           ffn_width=Fraction(3, 12), allocation="uniform")  # doctest: +SKIP
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


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: GhostifyRecord | None, settings: PruneSettings) -> None:
    """Fail before loading any weights when the settings cannot work."""
    heads_width, _ = settings.widths()
    if settings.importance is not None and not Path(settings.importance).expanduser().exists():
        raise GhostifyError(f"--importance {settings.importance} does not exist; pass the scores file or the output "
                            "directory of `ghostify importance`")
    adapter = get_adapter(config)
    check_keeps_a_head(adapter.num_units(config), heads_width, adapter.unit_noun(config))


def apply(model: nn.Module, record: GhostifyRecord, settings: PruneSettings, context: Context) -> Entry:
    heads_width, ffn_width = settings.widths()
    scores, source = scores_for(model, context.source, settings.importance)
    check_scores_match(model, record, scores, source)
    adapter = get_adapter(model.config)  # the order was checked before the weights were read: not again
    selection = select(scores.heads, scores.ffn, num_heads=adapter.num_units(model.config),
                       ffn_size=adapter.ffn_size(model.config), heads_width=heads_width, ffn_width=ffn_width,
                       allocation=settings.allocation)
    pruned = prune_model(model, adapter, record, selection.heads, selection.neurons)
    # what the history adds to the settings: the scores used and how they were computed
    return Entry(format=1, data=None, heads=pruned.heads, ffn=pruned.ffn,
                 history={"heads_width": str(heads_width), "ffn_width": str(ffn_width), "importance": source,
                          "criterion": scores.metadata.get("criterion", "loss-gradient")})


def scores_for(model: nn.Module, source: str, importance: str | None) -> tuple[ImportanceScores, str]:
    """The scores to prune by: ``importance``, else the ones ``source`` holds (the output of
    ``ghostify importance``), else weight magnitude (data-free, with a warning)."""
    if importance is not None:
        return ImportanceScores.load(importance), str(importance)
    own = Path(source) / SCORES_NAME
    if own.is_file():
        return ImportanceScores.load(own), str(own)
    warnings.warn(
        f"no importance scores in {source} and no --importance given: pruning by weight magnitude (data-free); "
        "run `ghostify importance` first for loss-based scores",
        stacklevel=3,
    )
    return magnitude_importance(model, get_adapter(model.config)), "weight-magnitude"
