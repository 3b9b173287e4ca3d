"""Structured pruning: changing a model, and its record entry (see :mod:`ghostify.methods.pruning`)."""

from __future__ import annotations

import copy
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
from .importance import SCORES_NAME, FisherScores, ImportanceScores, magnitude_importance
from .latency_allocation import check_reachable, comparable_scores, current_width, model_geometry, select_for_latency
from .modules import prune_layer
from .rearrange import gram, objective, rearrange
from .settings import FISHER, TUNE_BATCH_SIZE, WEIGHT_MAGNITUDE, PruneSettings
from .tuning import tune_masks


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
    settings.check_search()
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
        check_reachable(latency, latency.dense_ms() / speedup, heads, neurons,
                        hidden=current_width(config, adapter, record))
    return latency


def apply(model: nn.Module, record: GhostifyRecord, settings: PruneSettings, context: Context) -> Entry:
    """Select the heads and neurons to keep (to the widths, or to the latency budget of ``--speedup``) by the
    scores' criterion, rearrange them within each layer, cut the rest, and tune the kept ones' scales."""
    speedup = settings.target_speedup()
    scores, source = scores_for(model, context.source, settings.importance)
    check_scores_match(model, record, scores, source)
    adapter = get_adapter(model.config)  # the order was checked before the weights were read: not again
    heads, ffn, _, criterion = scores.ranked_by(settings.criterion)
    wanted = [what for what, asked in (("ranking", settings.criterion == FISHER), ("rearranging", settings.rearrange))
              if asked]
    if scores.fisher is None and wanted and scores.criterion != WEIGHT_MAGNITUDE:
        warnings.warn(f"the scores in {source} have no Fisher information (written by an older ghostify) for "
                      f"{' and '.join(wanted)}: pruning by {criterion}"
                      f"{', not rearranged' if settings.rearrange else ''}; re-run `ghostify importance` for it",
                      stacklevel=3)
    history: dict[str, Any] = {"importance": source, "criterion": criterion}
    if speedup is None:
        heads_width, ffn_width = settings.widths()
        selection = select(heads, ffn, num_heads=adapter.num_units(model.config),
                           ffn_size=adapter.ffn_size(model.config), heads_width=heads_width, ffn_width=ffn_width,
                           allocation=settings.allocation)
        history |= {"heads_width": str(heads_width), "ffn_width": str(ffn_width)}
    else:
        latency = check_latency(model.config, adapter, record, settings.latency, speedup)
        dense = latency.dense_ms()
        comparable_heads, comparable_ffn = comparable_scores(heads, ffn, criterion)
        selection, predicted = select_for_latency(comparable_heads, comparable_ffn, latency, dense / speedup,
                                                  applications=adapter.layer_applications(model),
                                                  hidden=current_width(model.config, adapter, record))
        # what ``info`` and the model card say: "2x on onnx-int8, ...: predicted X ms of the dense Y ms"
        history |= {"allocation": "latency", "deployment": latency.deployment.describe(), "dense_ms": round(dense, 4),
                    "target_ms": round(dense / speedup, 4), "predicted_ms": round(predicted, 4)}
    if settings.rearrange and scores.fisher is not None:
        selection, history["rearranged"] = rearranged(selection, scores.fisher)
    teacher = copy.deepcopy(model) if settings.tune_masks else None
    pruned = prune_model(model, adapter, record, selection.heads, selection.neurons)
    if teacher is not None:
        history["tuned"] = tuned(model, teacher, scores, source, settings.tune_masks, context)
    return Entry(format=1, data=None, heads=pruned.heads, ffn=pruned.ffn, history=history)


def rearranged(selection: Selection, fisher: FisherScores) -> tuple[Selection, dict[str, Any]]:
    """``selection`` with each layer's heads and neurons chosen again by the layer's Fisher block
    (:mod:`.rearrange`), and what that did to the block objective (summed over layers)."""
    outcome: dict[str, Any] = {}
    chosen: dict[str, list[list[int]]] = {}
    for kind, kept, factors, diagonals in (("heads", selection.heads, fisher.head_factors, fisher.heads),
                                           ("neurons", selection.neurons, fisher.ffn_factors, fisher.ffn)):
        before = after = 0.0
        chosen[kind] = []
        for layer_kept, factor, diagonal in zip(kept, factors, diagonals):
            block = gram(factor)
            new = rearrange(block, layer_kept, diagonal)
            gone = lambda keep: [u for u in range(block.shape[0]) if u not in set(keep)]  # noqa: E731
            before += objective(block, gone(layer_kept)) / fisher.samples
            after += objective(block, gone(new)) / fisher.samples
            chosen[kind].append(new)
        outcome[kind] = {"before": float(f"{before:.6g}"), "after": float(f"{after:.6g}")}
    return Selection(heads=chosen["heads"], neurons=chosen["neurons"]), outcome


def tuned(model: nn.Module, teacher: nn.Module, scores: ImportanceScores, source: str, count: int,
          context: Context) -> dict[str, Any]:
    """Tune ``model``'s kept units on ``count`` unlabelled examples of the data the scores were computed on
    (:mod:`.tuning`); what the history keeps of it."""
    data = scores.metadata.get("data")
    if not isinstance(data, dict):
        raise GhostifyError(f"--tune-masks reads unlabelled examples of the data the scores were computed on, but "
                            f"{source} does not say which (weight magnitude, or an older ghostify); run `ghostify "
                            "importance` on the model first, or prune without --tune-masks")
    if context.examples is None:
        raise GhostifyError("--tune-masks needs examples, and this caller gives the pruning method none; prune through "
                            "`ghostify prune` or `ghostify.steps.prune`")
    # an eighth of the batches (at least one) is held out to check the scales on
    examples = context.examples(context.source, data, count, context.seed, max(1, min(TUNE_BATCH_SIZE, count // 8)))
    batches = examples.batches
    if len(batches) < 2:
        raise GhostifyError(f"--tune-masks {count} found {sum(len(b['input_ids']) for b in batches)} training example(s) "
                            "in the scores' data; it needs at least two batches (one held out to check the scales)")
    held_out = max(1, len(batches) // 8)
    result = tune_masks(model, teacher, batches, held_out=held_out, distance=examples.distance)
    if not result.kept:
        warnings.warn(f"mask tuning took the pruned model further from its teacher on {held_out} held-out "
                      f"batch(es) (distance {result.distance_before:.4g} before, {result.distance_after:.4g} after): "
                      "the untuned scales are kept", stacklevel=4)
    return {"examples": sum(int(b["input_ids"].shape[0]) for b in batches), "held_out_batches": held_out,
            **result.row()}


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
