"""Which whole layers a latency budget removes (``compress --drop-layers``): the allocation of
``prune --speedup`` with each layer as one more candidate (``plan_for_latency`` with the layer scores
of ``ghostify importance``), for a model, its scores and a latency model of its shape."""

from __future__ import annotations

import os

from ..architectures import get_adapter
from ..checkpoint import load_config, read_record
from ..errors import GhostifyError
from ..latency_model import LatencyModel
from ..methods.dropped_layers import check_droppable
from ..methods.pruning import ImportanceScores, LatencyPlan, PruneSettings, model_geometry, plan_for_latency


def plan_layers(model: str | os.PathLike, importance: str | os.PathLike, latency: str | os.PathLike,
                speedup: float, criterion: str = PruneSettings.criterion) -> LatencyPlan | None:
    """The plan for a predicted ``speedup`` of ``model`` (scored by ``importance``, a scores file or the
    directory of ``ghostify importance``; ``latency``: a latency model file or directory) when whole
    layers may go too; None where none may: a model with shared layers (drop-layers refuses it),
    scores without layer scores (weight magnitude, an older ghostify), or a latency model of another
    shape (``prune --speedup`` says so)."""
    config = load_config(model)
    record = read_record(config)
    adapter = get_adapter(config)
    scores = ImportanceScores.load(importance)
    costs = LatencyModel.load(latency)
    try:
        check_droppable(adapter, config, record)
    except GhostifyError:
        return None
    heads, ffn, layers, _ = scores.ranked_by(criterion)
    if layers is None or costs.geometry != model_geometry(config, adapter, record):
        return None
    return plan_for_latency(heads, ffn, costs, costs.dense_ms() / speedup, layer_scores=layers,
                            first_layer_fixed=bool(adapter.first_layer_fixed(config)))


__all__ = ["plan_layers"]
