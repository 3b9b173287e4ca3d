"""How good a compressed model is before any training, on training examples the scores were not computed on:
the task's own metric where the data has labels, and how far its predictions are from its teacher's (no labels
needed). What ``compress`` compares its candidate allocations by (never the validation data)."""

from __future__ import annotations

import math
import os
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import torch

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..latency_model import LatencyModel
from ..methods.criteria import candidates
from ..methods.pruning import ImportanceScores, PruneSettings, current_width, uniform_width
from ..data import load_split
from ..errors import DataError
from ..settings import ImportanceDefaults
from ..tasks import dataset_for
from ..training.sharding import end_run, make_accelerator
from .apply_method import apply_method
from .common import load_tokenizer
from .examples import SPLIT, settings_of, task_batches
from .training_common import task_kind


def teacher_gap(models: list[str | os.PathLike], teacher: str | os.PathLike, description: Mapping[str, Any], *,
                samples: int, seed: int) -> list[float]:
    """For each of ``models``, the mean over ``samples`` training examples (a seeded subset of the data
    ``description`` names: what ``ghostify importance`` records) of the task's prediction-layer distillation loss
    against ``teacher`` at temperature 1, less the teacher's own: 0 for the teacher itself, the KL divergence for
    classification, tagging and QA, the squared error for regression, the cosine distance for embeddings."""
    kind, batches = task_batches(teacher, description, samples, seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reference = kind.load(teacher, role="teacher", need_trained_head=True).eval()
        nets = [kind.load(m, role="model", need_trained_head=True).eval() for m in models]
    sums = [0.0] * len(nets)
    count = 0
    with torch.no_grad():
        for batch in batches:
            size = int(batch["input_ids"].shape[0])
            target = kind.outputs(reference, batch)
            floor = float(kind.teacher_loss(target, target, batch, 1.0))
            for i, net in enumerate(nets):
                sums[i] += (float(kind.teacher_loss(kind.outputs(net, batch), target, batch, 1.0)) - floor) * size
            count += size
    return [s / count for s in sums]


class MetricScores(NamedTuple):
    """Each model's score by the task's own metric (``name``), on ``count`` examples; ``full_score``: that metric's
    perfect score (1 for a share, 100 for one in percent)."""

    name: str
    values: list[float]
    count: int
    full_score: float = 1.0

    def standard_error(self, value: float) -> float:
        """The standard error of ``value``, a share of ``full_score`` measured on ``count`` examples: how far two
        candidates' scores may differ by chance alone."""
        share = min(max(value / self.full_score, 0.0), 1.0)
        return self.full_score * math.sqrt(max(share * (1 - share), 1e-4) / max(self.count, 1))


def task_metric(models: list[str | os.PathLike], description: Mapping[str, Any], *, samples: int,
                seed: int) -> MetricScores | None:
    """The task's own metric (the one that picks a training run's best epoch: accuracy, entity F1, F1, ...) of
    each of ``models`` on ``samples`` labelled training examples (a seeded subset of the data ``description``
    names); None where that data has no labels (or the task reads none)."""
    from torch.utils.data import DataLoader

    data, task = settings_of(description, "the importance scores")
    kind = task_kind(data, task).for_model(load_config(models[0]))
    if not kind.needs_labels:
        return None
    try:
        rows = load_split(dataset_for(kind.preset, data.dataset), kind.preset, SPLIT, max_samples=samples, seed=seed)
    except DataError:  # no labels in the training split: the distance alone decides
        return None
    rows.task = kind.with_data(rows)
    evaluation = kind.evaluation(rows, load_tokenizer(models[0]))
    accelerator, partial_type = make_accelerator()
    scores = []
    try:
        for model in models:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                net = kind.load(model, role="model", need_trained_head=True).eval()
            loader = DataLoader(evaluation.rows, batch_size=ImportanceDefaults.batch_size, collate_fn=evaluation.collate)
            scores.append(float(evaluation.run(net, loader, accelerator)[evaluation.select]))
    finally:
        end_run(accelerator, partial_type)
    return MetricScores(evaluation.select, scores, rows.num_samples, evaluation.full_score)


#: the allocations compress compares before training (each a set of ``prune`` settings besides the target): the
#: latency search by each criterion of the registry on the loss's scale (``fisher``, ``loss-gradient``), by those
#: that keep blocks rearranged within layers too (``fisher+rearranged``), and uniform width (ranked by prune's
#: default criterion). No one of them wins everywhere (benchmarks/results/retraining_free.md).
UNIFORM = "uniform"
#: the candidate compress allocates by where it made no choice (the scores say nothing of their data): the latency
#: search by prune's default criterion
SEARCH = PruneSettings.criterion


def candidate_allocations() -> dict[str, dict[str, Any]]:
    """The candidates by name, each with its ``prune`` settings besides the target (read from the registry of
    criteria at each call: a criterion registered later is a candidate too)."""
    return {**{name: {"criterion": criterion, "rearrange": rearranged} for name, criterion, rearranged in candidates()},
            UNIFORM: {"criterion": PruneSettings.criterion, "rearrange": False}}


def uniform_width_for(model: str | os.PathLike, latency: str | os.PathLike, speedup: float) -> str | None:
    """The widest uniform width (``prune --width``) whose predicted latency on ``model``'s layers is within dense /
    ``speedup``; None where not even one head per layer is."""
    costs = LatencyModel.load(latency)
    config = load_config(model)
    record = read_record(config)
    width = uniform_width(costs, costs.dense_ms() / speedup, len(record.heads),
                          hidden=current_width(config, get_adapter(config), record))
    return None if width is None else str(width)


def candidate_settings(name: str, model: str | os.PathLike, latency: str | os.PathLike,
                       speedup: float) -> dict[str, Any] | None:
    """``prune``'s settings for candidate ``name`` (of :func:`candidate_allocations`) at ``speedup``; None where there
    is none."""
    own = candidate_allocations()[name]
    if name == UNIFORM:
        width = uniform_width_for(model, latency, speedup)
        return None if width is None else {"width": width, **own}
    return {"speedup": speedup, "latency": str(latency), **own}


def choose_allocation(source: Path, teacher: str | os.PathLike, latency: str | os.PathLike, speedup: float,
                      scratch: Path, *, prune_settings: Mapping[str, Any], samples: int, seed: int,
                      trains: bool = False) -> dict[str, Any] | None:
    """Which allocation of ``source`` for a predicted ``speedup`` starts best: each of :func:`candidate_allocations` is
    pruned (with ``prune_settings`` besides the candidate's own: compress gives those of its untuned prune stage, as
    tuning is slow and keeps the ranking closely enough) into ``scratch`` and scored on ``samples`` training
    examples of the data ``source``'s scores were computed on, another seeded subset than theirs: by the task's own
    metric where the data has labels (:func:`task_metric`), the candidates within one standard error of the best
    then by their distance to ``teacher`` (:func:`teacher_gap`) — where the run ``trains``, the latency searches
    among them ahead of uniform width (:func:`tie_break`); without labels by the distance alone. None where the
    scores do not say what their data was."""
    scores = prune_settings.get("importance") or source  # a model whose channels were cut reads its input's scores
    description = ImportanceScores.load(scores).metadata.get("data")
    if not isinstance(description, dict):
        return None
    settings: dict[str, dict[str, Any]] = {}
    order = list(candidate_allocations())
    for name in order:
        candidate = candidate_settings(name, source, latency, speedup)
        if candidate is None:
            continue
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            apply_method("pruning", source, scratch / name, **{**prune_settings, **candidate})
        settings[name] = candidate
    pruned = [scratch / name for name in settings]
    gaps = teacher_gap(pruned, teacher, description, samples=samples, seed=seed)
    by_name = dict(zip(settings, gaps))
    contenders = list(by_name)
    result: dict[str, Any] = {}
    scored = task_metric(pruned, description, samples=samples, seed=seed)
    if scored is not None:
        metrics = dict(zip(settings, scored.values))
        best = max(scored.values)
        margin = scored.standard_error(best)
        contenders = [name for name in by_name if metrics[name] >= best - margin]
        result = {"metric": scored.name, "metrics": metrics, "standard_error": margin, "searches_first": trains}
    chosen = min(contenders, key=tie_break(by_name, order, searches_first=result.get("searches_first", False)))
    return {"chosen": chosen, "settings": settings[chosen], "gaps": by_name, "samples": samples, **result}


def tie_break(gaps: Mapping[str, float], order: Sequence[str], *,
              searches_first: bool) -> Callable[[str], tuple[bool, float, int]]:
    """The key that ranks candidates the task's metric could not tell apart: by their distance to the teacher
    (``gaps``), then ``order``; with ``searches_first``, every latency search ahead of uniform width.

    Why the searches first where the run trains: a metric tie before training says nothing of which start trains
    better, and the distance has favoured uniform width in every report so far (keeping a little of everything in
    every layer sits closest to the teacher right after pruning). Trained, the search kept as much or more: the
    quick budget's distill + fine-tune at 2x, 3 seeds paired, CoNLL-2003 +2.2 F1 [+1.8, +2.6] over uniform, SST-2
    -0.1 [-0.8, +0.6] (``benchmarks/results/retraining_free.md``); on the SQuAD part at 3x in 20 minutes the
    rearranged search trained to F1 50.6 where uniform width, kept for an F1 0.3 points ahead before training
    (inside one standard error), trained to 40.5 (two seeds, ``benchmarks/results/budget_curve.md``). Without
    training the distance is what the shipped model is judged by, so it decides alone."""
    return lambda name: (searches_first and name == UNIFORM, gaps[name], order.index(name))


__all__ = ["SEARCH", "UNIFORM", "MetricScores", "candidate_allocations", "candidate_settings", "choose_allocation",
           "task_metric", "teacher_gap", "tie_break", "uniform_width_for"]
