"""How far a compressed model's predictions are from its teacher's on unlabelled training examples: what
``compress`` compares its candidate allocations by before any training (no labels, no validation data)."""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from .examples import task_batches


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


def against_uniform(searched: Path, source: Path, teacher: str | os.PathLike, latency: str | os.PathLike,
                    speedup: float, candidate: Path, *, prune_settings: Mapping[str, Any], samples: int,
                    seed: int) -> dict[str, Any] | None:
    """``searched`` (``source`` pruned for a predicted ``speedup`` by the search) against ``source`` pruned to the
    widest uniform width the latency model predicts within the same target (written to ``candidate``, with the
    same ``prune_settings``: criterion, rearrangement, tuning): their :func:`teacher_gap` on ``samples`` training
    examples of the data ``source``'s scores were computed on. None where no uniform width keeps a head in
    every layer within the target, or the scores do not say what their data was."""
    from ..checkpoint import load_config, read_record
    from ..latency_model import LatencyModel
    from ..methods.pruning import ImportanceScores, uniform_width
    from .apply_method import apply_method

    costs = LatencyModel.load(latency)
    g = costs.geometry
    layers = len(read_record(load_config(source)).heads)
    width = uniform_width(costs, costs.predict([g.num_heads] * layers, [g.ffn_size] * layers) / speedup, layers)
    description = ImportanceScores.load(source).metadata.get("data")
    if width is None or not isinstance(description, dict):
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        apply_method("pruning", source, candidate, **{**prune_settings, "width": str(width)})
    gap_search, gap_uniform = teacher_gap([searched, candidate], teacher, description, samples=samples, seed=seed)
    return {"chosen": "uniform" if gap_uniform < gap_search else "search", "width": str(width),
            "gap_search": gap_search, "gap_uniform": gap_uniform, "samples": samples}


__all__ = ["against_uniform", "teacher_gap"]
