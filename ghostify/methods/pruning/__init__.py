"""Structured pruning (Michel et al. 2019; GhostBERT §3.1): importance of heads and FFN neurons by
loss impact through gates, selection to a width or to a latency budget (Kwon et al. 2022's greedy
search, by a latency model), and physical removal of the rest."""

from __future__ import annotations

from ...lazy import lazy_exports
from ...settings import parse_width
from ..base import Method, lazy
from .describe import describe
from .settings import ALLOCATIONS, PruneSettings

METHOD = Method(
    name="pruning", command="prune", noun="pruned heads and neurons", settings=PruneSettings,
    check=lazy("ghostify.methods.pruning.apply:check"),
    apply=lazy("ghostify.methods.pruning.apply:apply"),
    restore=lazy("ghostify.methods.pruning.restore:restore"),
    describe=describe,
    path_settings=("importance", "latency"),
    # ghost modules and grouped blocks are built for the widths they were attached to
    before=("ghost", "grouped"),
    tracked=False,  # every record lists the kept heads; a dense model is a model pruned to full width
    seeded=True,  # --tune-masks draws its examples
    help="""Physically prune heads and FFN neurons to a width multiplier m.

    Keeps floor(N_H * m) heads and round(m * d_ff) neurons per layer (widths are relative to the
    original architecture), the most important first, by the scores of `ghostify importance`
    (or weight magnitude, with a warning, when there are none). The result is a dense, smaller
    model that `ghostify.load_model` rebuilds exactly.

    Or, with --speedup X and a latency model (`ghostify latency MODEL -o DIR`), keep the most
    importance for a predicted latency <= dense / X: heads and neurons are removed across all
    layers, the least importance per millisecond saved first, at least one of each kept per layer.
    """,
    examples=(
        "ghostify prune out/scored -o out/pruned --width 3/12",
        "ghostify prune bert-base-uncased -o out/bert-quarter --width 0.25",
        "ghostify prune out/scored -o out/pruned --heads-width 6/12 --ffn-width 0.25 --allocation global",
        "ghostify prune out/scored -o out/pruned-2x --speedup 2 --latency out/latency",
    ),
)


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "allocation": ("Selection", "select"),
        "apply": ("dense_record", "prune", "prune_model", "tuning_examples"),
        "gates": ("Gates", "gated"),
        "importance": ("SCORES_NAME", "FisherScores", "ImportanceScores", "compute_importance", "magnitude_importance"),
        "latency_allocation": ("Candidate", "Kind", "LatencyPlan", "check_reachable", "current_width",
                               "layer_consistent", "measured_widths", "model_geometry", "out_of_reach",
                               "plan_for_latency", "select_for_latency", "uniform_width"),
        "restore": ("apply_structure",),
    },
)

__all__ = [
    "ALLOCATIONS",
    "Candidate",
    "FisherScores",
    "Gates",
    "ImportanceScores",
    "Kind",
    "LatencyPlan",
    "METHOD",
    "PruneSettings",
    "SCORES_NAME",
    "Selection",
    "apply_structure",
    "check_reachable",
    "compute_importance",
    "current_width",
    "dense_record",
    "describe",
    "gated",
    "layer_consistent",
    "magnitude_importance",
    "measured_widths",
    "model_geometry",
    "out_of_reach",
    "parse_width",
    "plan_for_latency",
    "prune",
    "prune_model",
    "select",
    "select_for_latency",
    "tuning_examples",
    "uniform_width",
]
