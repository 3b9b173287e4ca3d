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
from ...record import GhostifyRecord
from ..base import Context, Entry, Examples, check_order, distinct_layers
from ..criteria import WEIGHT_MAGNITUDE, criteria
from ..criteria import get as get_criterion
from ..scores import SCORES_NAME, FisherScores, ImportanceScores
from .allocation import Selection, check_keeps_a_head, select
from .importance import magnitude_importance
from .latency_allocation import (check_reachable, comparable_scores, current_width, layer_consistent, model_geometry,
                                 select_for_latency)
from .modules import prune_layer
from .rearrange import gram, objective, rearrange
from .settings import TUNE_BATCH_SIZE, TUNE_MAX_TOKENS, TUNE_MIN_EXAMPLES, PruneSettings
from .tuning import check_tunable, tune_masks


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
    """Fail before loading any weights when the settings cannot work on this model (the settings checked
    themselves when they were made): the scores file exists, the width keeps a head, the latency model describes
    this model and the target is within its reach, a tuned model runs each layer once."""
    if settings.importance is not None and not Path(settings.importance).expanduser().exists():
        raise GhostifyError(f"--importance {settings.importance} does not exist; pass the scores file or the output "
                            "directory of `ghostify importance`")
    adapter = get_adapter(config)
    if settings.widths is not None:
        check_keeps_a_head(adapter.num_units(config), settings.widths[0], adapter.unit_noun(config))
    else:
        check_latency(config, adapter, record, settings)
    if settings.tune_masks:
        check_tunable(adapter.family, distinct_layers(config, adapter, record) < adapter.num_layers(config))


def check_latency(config: Any, adapter: ArchitectureAdapter, record: GhostifyRecord | None,
                  settings: PruneSettings) -> None:
    """Refuse a latency model that does not describe this model's original shape, and a ``--speedup`` beyond its
    reach (checked here where layers run once each: from the config alone; with shared layers, the allocation
    itself refuses it once the model shows how often each runs)."""
    latency = settings.latency_model
    geometry = model_geometry(config, adapter, record)
    if latency.geometry != geometry:
        raise GhostifyError(f"latency model {settings.latency} was measured for {latency.geometry.describe()}, but this "
                            f"model is {geometry.describe()}; measure one for it with `ghostify latency MODEL -o DIR`")
    heads = record.heads_per_layer if record is not None else [adapter.num_units(config)] * adapter.num_layers(config)
    neurons = list(record.ffn) if record is not None else [adapter.ffn_size(config)] * adapter.num_layers(config)
    if len(heads) == adapter.num_layers(config):
        check_reachable(latency, latency.dense_ms() / settings.target_speedup, heads, neurons,
                        hidden=current_width(config, adapter, record), more=DROP_LAYERS_FIRST)


#: what ``prune --speedup`` advises beside asking for less, when even its fewest units are too slow
DROP_LAYERS_FIRST = "drop layers first (`ghostify drop-layers`)"


def apply(model: nn.Module, record: GhostifyRecord, settings: PruneSettings, context: Context) -> Entry:
    """Select the heads and neurons to keep (to the widths, or to the latency budget of ``--speedup``) by the
    scores' criterion, rearrange them within each layer, cut the rest, and tune the kept ones' scales."""
    scores, source = scores_for(model, context.source, settings.importance)
    scores.check_matches(record, source)
    adapter = get_adapter(model.config)  # the order was checked before the weights were read: not again
    heads, ffn, layer_scores, criterion = scores.ranked_by(settings.criterion)
    _warn_missing(scores, settings, criterion, source)
    history: dict[str, Any] = {"importance": source, "criterion": criterion}
    if settings.widths is not None:
        heads_width, ffn_width = settings.widths
        selection = select(heads, ffn, num_heads=adapter.num_units(model.config),
                           ffn_size=adapter.ffn_size(model.config), heads_width=heads_width, ffn_width=ffn_width,
                           allocation=settings.allocation)
        history |= {"heads_width": str(heads_width), "ffn_width": str(ffn_width)}
    else:
        latency = settings.latency_model  # read and checked against this model by `check`
        dense, target = latency.dense_ms(), latency.dense_ms() / settings.target_speedup
        comparable_heads, comparable_ffn = comparable_scores(heads, ffn, criterion)
        if get_criterion(criterion) is not None and get_criterion(criterion).loss_scale:
            comparable_heads, comparable_ffn = layer_consistent(comparable_heads, comparable_ffn, layer_scores)
        selection, predicted = select_for_latency(comparable_heads, comparable_ffn, latency, target,
                                                  applications=adapter.layer_applications(model),
                                                  hidden=current_width(model.config, adapter, record))
        # what ``info`` and the model card say: "2x on onnx-int8, ...: predicted X ms of the dense Y ms"
        history |= {"allocation": "latency", "deployment": latency.deployment.describe(), "dense_ms": round(dense, 4),
                    "target_ms": round(target, 4), "predicted_ms": round(predicted, 4)}
    if settings.rearrange and scores.fisher is not None:
        selection, history["rearranged"] = rearranged(selection, scores.fisher)
    # the examples are read (and refused) before any weight changes
    examples = tuning_examples(scores.metadata.get("data"), source, settings.tune_masks, context) \
        if settings.tune_masks else None
    teacher = copy.deepcopy(model) if examples is not None else None
    pruned = prune_model(model, adapter, record, selection.heads, selection.neurons)
    if teacher is not None:
        history["tuned"] = tuned(model, teacher, examples)
    return Entry(format=1, data=None, heads=pruned.heads, ffn=pruned.ffn, history=history)


def _warn_missing(scores: ImportanceScores, settings: PruneSettings, used: str, source: str) -> None:
    """Say so where the scores lack what the settings ask for (written by an older ghostify): the criterion's
    scores (then pruning goes by the file's own), or the blocks ``--rearrange`` chooses by. Data-free scores (weight
    magnitude) were warned about when they were chosen."""
    own = get_criterion(scores.criterion)
    if own is not None and not own.selectable:
        return
    ranking, rearranging = used != settings.criterion, settings.rearrange and scores.fisher is None
    if not (ranking or rearranging):
        return
    missing = settings.ranking if ranking else next(c for c in criteria() if c.blocks)
    wanted = " and ".join(what for what, lacking in (("ranking", ranking), ("rearranging", rearranging)) if lacking)
    warnings.warn(f"the scores in {source} have no {missing.noun.removeprefix('the ')} (written by an older "
                  f"ghostify) for {wanted}: pruning by {used}{', not rearranged' if settings.rearrange else ''}; "
                  "re-run `ghostify importance` for it", stacklevel=4)


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


def tuning_examples(data: Any, source: str, count: int, context: Context) -> Examples:
    """``count`` unlabelled examples of ``data`` (what ``importance`` recorded of the data the scores in ``source``
    were computed on: ``metadata["data"]``), in batches, to tune on (:func:`tuned`); refused in one line where there
    are none to read or too few to hold some out. A recipe asks before any stage runs, where the data is local."""
    if not isinstance(data, dict):
        raise GhostifyError(f"--tune-masks reads unlabelled examples of the data the scores were computed on, but "
                            f"{source} does not say which (weight magnitude, or an older ghostify); run `ghostify "
                            "importance` on the model first, or prune without --tune-masks")
    if context.examples is None:
        raise GhostifyError("--tune-masks needs examples, and this caller gives the pruning method none; prune through "
                            "`ghostify prune` or `ghostify.steps.prune`")
    # an eighth of the batches (at least one) is held out to check the scales on
    examples = context.examples(context.source, data, count, context.seed, max(1, min(TUNE_BATCH_SIZE, count // 8)))
    batches = within_tokens(examples.batches, TUNE_MAX_TOKENS)
    examples = replace(examples, batches=batches)
    if len(batches) < 2:
        found = sum(len(b["input_ids"]) for b in batches)
        fix = (f"ask for --tune-masks {found}" if TUNE_MIN_EXAMPLES <= found < count else
               "prune without --tune-masks (too few examples to tune on)")
        raise GhostifyError(f"--tune-masks {count} found {found} training example(s) in the scores' data; it needs at "
                            f"least two batches (one held out to check the scales): {fix}")
    return examples


def within_tokens(batches: Sequence[dict[str, Any]], limit: int) -> list[dict[str, Any]]:
    """The first of ``batches`` whose real tokens (their attention masks' ones) add up to at most ``limit``, and never
    fewer than two batches (one is held out)."""
    kept, tokens = [], 0
    for batch in batches:
        mask = batch.get("attention_mask")
        tokens += int(mask.sum()) if mask is not None else int(batch["input_ids"].numel())
        if tokens > limit and len(kept) >= 2:
            break
        kept.append(batch)
    return kept


def tuned(model: nn.Module, teacher: nn.Module, examples: Examples) -> dict[str, Any]:
    """Tune ``model``'s kept units on ``examples`` (:func:`tuning_examples`, :mod:`.tuning`) towards ``teacher``;
    what the history keeps of it."""
    batches = examples.batches
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
    return magnitude_importance(model, get_adapter(model.config)), WEIGHT_MAGNITUDE
