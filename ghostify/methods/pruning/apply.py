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
from ...latency_model import LatencyModel
from ...record import GhostifyRecord
from ..base import Context, Entry, check_order
from .allocation import Selection, check_keeps_a_head, select
from .importance import SCORES_NAME, ImportanceScores, magnitude_importance
from .latency_allocation import LOSS_CRITERION, check_reachable, comparable_scores, model_geometry, select_for_latency
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
    speedup = settings.target_speedup()
    heads_width = settings.widths()[0] if speedup is None else None
    if settings.importance is not None and not Path(settings.importance).expanduser().exists():
        raise GhostifyError(f"--importance {settings.importance} does not exist; pass the scores file or the output "
                            "directory of `ghostify importance`")
    adapter = get_adapter(config)
    if heads_width is not None:
        check_keeps_a_head(adapter.num_units(config), heads_width, adapter.unit_noun(config))
    else:
        check_latency(config, adapter, record, settings.latency, speedup)


def check_latency(config: Any, adapter: ArchitectureAdapter, record: GhostifyRecord | None, path: str,
                  speedup: float) -> LatencyModel:
    """The latency model at ``path``, refused unless it describes this model's original shape and
    ``speedup`` is within its reach (checked here where layers run once each: from the config alone)."""
    latency = LatencyModel.load(path)
    geometry = model_geometry(config, adapter, record)
    if latency.geometry != geometry:
        raise GhostifyError(f"latency model {path} was measured for {latency.geometry.describe()}, but this model is "
                            f"{geometry.describe()}; measure one for it with `ghostify latency MODEL -o DIR`")
    heads = record.heads_per_layer if record is not None else [adapter.num_units(config)] * adapter.num_layers(config)
    neurons = list(record.ffn) if record is not None else [adapter.ffn_size(config)] * adapter.num_layers(config)
    if len(heads) == adapter.num_layers(config):  # shared layers: apply counts their runs on the model
        check_reachable(latency, latency.dense_ms() / speedup, heads, neurons)
    return latency


def apply(model: nn.Module, record: GhostifyRecord, settings: PruneSettings, context: Context) -> Entry:
    speedup = settings.target_speedup()
    if speedup is not None:
        return apply_speedup(model, record, settings, context, speedup)
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
                          "criterion": scores.metadata.get("criterion", LOSS_CRITERION)})


def apply_speedup(model: nn.Module, record: GhostifyRecord, settings: PruneSettings, context: Context,
                  speedup: float) -> Entry:
    """Prune for a predicted latency of at most dense / ``speedup`` (:func:`select_for_latency`)."""
    scores, source = scores_for(model, context.source, settings.importance)
    check_scores_match(model, record, scores, source)
    adapter = get_adapter(model.config)
    latency = check_latency(model.config, adapter, record, settings.latency, speedup)
    dense = latency.dense_ms()
    heads, ffn = comparable_scores(scores.heads, scores.ffn, scores.metadata)
    selection, predicted = select_for_latency(heads, ffn, latency, dense / speedup,
                                              applications=adapter.layer_applications(model))
    pruned = prune_model(model, adapter, record, selection.heads, selection.neurons)
    # what ``info`` and the model card say: "2x on onnx-int8, ...: predicted X ms of the dense Y ms"
    return Entry(format=1, data=None, heads=pruned.heads, ffn=pruned.ffn,
                 history={"importance": source, "criterion": scores.metadata.get("criterion", LOSS_CRITERION),
                          "deployment": latency.deployment.describe(), "dense_ms": round(dense, 4),
                          "target_ms": round(dense / speedup, 4), "predicted_ms": round(predicted, 4)})


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
