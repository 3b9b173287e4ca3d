"""Which heads and neurons to keep for a latency budget (``prune --speedup X --latency FILE``).

Greedy removal, as in the mask search of Kwon et al. 2022 ("A Fast Post-Training Pruning
Framework for Transformers"), ranked by the scores of ``ghostify importance``: start from what the
model keeps now and repeatedly remove the unit that loses the least importance per millisecond
it saves by the latency model (a head saves ``head_ms``, a group of the lowest-scored FFN neurons
``neuron_ms`` each), until the predicted latency is at most the target. Every layer keeps at least
one head and one neuron: removing whole layers is ``drop-layers``' job.

The loss-gradient scores of heads and of neurons are comparable as they are: each is E|dL/dg| for
a multiplicative gate at 1 on the unit's output (``gates.py``), the first-order estimate of the
loss change when the gate goes to 0, in the loss's units. Weight-magnitude scores (the data-free
fallback) are not: a head's is a product of two Frobenius norms of whole slices, a neuron's of
vector norms. They are put on one scale by :func:`comparable_scores`.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Sequence
from typing import Any

import torch

from ...architectures import ArchitectureAdapter
from ...errors import GhostifyError
from ...latency_model import Geometry, LatencyModel
from ..base import registry
from .allocation import Selection

#: FFN neurons are removed in groups of ``ffn_size // NEURON_GROUPS`` (at least 1): a few dozen
#: steps per layer instead of thousands
NEURON_GROUPS = 64
#: the criterion whose head and neuron scores share a unit (the loss's): see the module's docstring
LOSS_CRITERION = "loss-gradient"


def select_for_latency(
    head_scores: Sequence[torch.Tensor],
    ffn_scores: Sequence[torch.Tensor],
    latency: LatencyModel,
    target_ms: float,
    *,
    applications: Sequence[int] | None = None,
) -> tuple[Selection, float]:
    """The units to keep so that ``latency`` predicts at most ``target_ms``, and that prediction.

    ``head_scores[l]`` / ``ffn_scores[l]`` score the heads and neurons distinct layer ``l`` has now
    (what is not scored is not there); ``applications[l]`` is how often layer ``l`` runs in one
    forward pass (1 unless layers are shared), so that a unit removed from it saves that many
    times its cost. Kept units are listed by importance, as :func:`~.allocation.select` lists them.
    A unit whose removal the model predicts saves nothing (a fitted cost <= 0) is never removed.
    """
    layers = len(head_scores)
    applications = list(applications) if applications is not None else [1] * layers
    if len(ffn_scores) != layers or len(applications) != layers:
        raise ValueError(f"{layers} layers of head scores, {len(ffn_scores)} of FFN scores, "
                         f"{len(applications)} applications")
    _check_finite(head_scores, ffn_scores)
    heads = [t.numel() for t in head_scores]
    neurons = [t.numel() for t in ffn_scores]
    group = max(1, latency.geometry.ffn_size // NEURON_GROUPS)
    queues = [_removals(head_scores[l], 1, latency.head_ms * applications[l]) for l in range(layers)]
    queues += [_removals(ffn_scores[l], group, latency.neuron_ms * applications[l]) for l in range(layers)]

    check_reachable(latency, target_ms, heads, neurons, applications)
    removed: list[set[int]] = [set() for _ in queues]
    # the next removal of each layer's heads (queue l) and neurons (queue layers + l), by its ratio;
    # ties go to the lower layer, then heads before neurons: the same order on every run
    frontier = [(q[0][0], l % layers, l // layers, 0, l) for l, q in enumerate(queues) if q]
    heapq.heapify(frontier)
    while predict(latency, heads, neurons, applications) > target_ms:
        _, _, kind, rank, queue = heapq.heappop(frontier)  # never empty: the fewest units meet the target
        units = queues[queue][rank][1]
        removed[queue].update(units)
        counts = neurons if kind else heads
        counts[queue % layers] -= len(units)
        if rank + 1 < len(queues[queue]):
            heapq.heappush(frontier, (queues[queue][rank + 1][0], queue % layers, kind, rank + 1, queue))
    selection = Selection(heads=[_kept(head_scores[l], removed[l]) for l in range(layers)],
                          neurons=[_kept(ffn_scores[l], removed[layers + l]) for l in range(layers)])
    return selection, predict(latency, heads, neurons, applications)


def predict(latency: LatencyModel, heads: Sequence[int], neurons: Sequence[int],
            applications: Sequence[int] | None = None) -> float:
    """``latency``'s prediction for distinct layers of ``heads[l]`` heads and ``neurons[l]`` neurons,
    layer ``l`` running ``applications[l]`` times."""
    applications = applications or [1] * len(heads)
    runs = [l for l, n in enumerate(applications) for _ in range(n)]
    return latency.predict([heads[l] for l in runs], [neurons[l] for l in runs])


def _removals(scores: torch.Tensor, group: int, unit_ms: float) -> list[tuple[float, list[int]]]:
    """The units one layer can lose, lowest-scored first, in groups of ``group`` (its best unit
    stays): each group with its score lost per millisecond saved. None when a unit saves nothing."""
    if unit_ms <= 0:
        return []
    values = scores.double().tolist()
    order = sorted(range(len(values)), key=lambda j: (values[j], j))[:-1]  # stable: ties by index
    groups = [order[i:i + group] for i in range(0, len(order), group)]
    return [(math.fsum(values[j] for j in g) / (unit_ms * len(g)), g) for g in groups]


def check_reachable(latency: LatencyModel, target_ms: float, heads: Sequence[int], neurons: Sequence[int],
                    applications: Sequence[int] | None = None) -> None:
    """Refuse a target that even every removal :func:`select_for_latency` may make (down to 1 head
    and 1 neuron per layer, where a unit saves anything) does not meet, naming the best speed-up."""
    fewest_heads = [1 if latency.head_ms > 0 else h for h in heads]
    fewest_neurons = [1 if latency.neuron_ms > 0 else n for n in neurons]
    best = predict(latency, fewest_heads, fewest_neurons, applications)
    if best > target_ms:
        dense = latency.dense_ms()
        raise GhostifyError(
            f"a predicted {target_ms:.4g} ms (a speed-up of {dense / target_ms:.3g}x over the dense {dense:.4g} ms) is "
            f"out of reach: even 1 head and 1 FFN neuron per layer predict {best:.4g} ms, a speed-up of at most "
            f"{dense / best:.3g}x on {latency.deployment.describe()}; ask for less, or drop layers first "
            "(`ghostify drop-layers`)")


def _kept(scores: torch.Tensor, removed: set[int]) -> list[int]:
    values = scores.double().tolist()
    return sorted((j for j in range(len(values)) if j not in removed), key=lambda j: (-values[j], j))


def _check_finite(*groups: Sequence[torch.Tensor]) -> None:
    for tensors in groups:
        for layer, t in enumerate(tensors):
            if not bool(torch.isfinite(t).all()) or bool((t < 0).any()):
                raise GhostifyError(f"the importance scores of layer {layer} hold negative, NaN or infinite values; "
                                    "re-run `ghostify importance`")


def comparable_scores(heads: Sequence[torch.Tensor], ffn: Sequence[torch.Tensor],
                      metadata: dict[str, Any]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Head and neuron scores on one scale. Loss-gradient scores are (the module's docstring); other
    criteria (weight magnitude) are divided by their kind's total over all layers, so that all the
    heads and all the neurons weigh the same in sum."""
    if metadata.get("criterion", LOSS_CRITERION) == LOSS_CRITERION:
        return list(heads), list(ffn)

    def share(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        total = float(sum(float(t.double().sum()) for t in tensors))
        return [t.double() / total if total > 0 else t.double() for t in tensors]

    return share(heads), share(ffn)


# ----------------------------------------------------------------------------------------------
# the model a latency model describes
# ----------------------------------------------------------------------------------------------
def model_geometry(config: Any, adapter: ArchitectureAdapter, record: Any) -> Geometry:
    """The original shape of the model ``config`` builds: its family (the adapter's name for it),
    hidden size, attention units (what pruning counts and ``record.heads`` lists: heads, or key/value
    groups with GQA), FFN size and layer applications per forward pass, before any layer was dropped
    (the method that dropped them says how many there were). ``ghostify latency`` describes a model
    the same way (``steps.latency.original_geometry``)."""
    origin = _layer_origin(record)
    layers = origin[1] if origin is not None else adapter.num_layers(config)
    return Geometry(family=adapter.family or str(config.model_type), hidden_size=adapter.hidden_size(config),
                    num_heads=adapter.num_units(config), ffn_size=adapter.ffn_size(config), num_layers=layers)


def _layer_origin(record: Any) -> tuple[list[int], int] | None:
    """``(kept, of)`` of the method that dropped layers (``Method.layer_origin``), else None."""
    for method in registry():
        entry = record.entry(method.name) if record is not None else None
        if entry and method.layer_origin is not None:
            return method.layer_origin(entry)
    return None
