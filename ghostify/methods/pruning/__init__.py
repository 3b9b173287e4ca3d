"""Structured pruning (Michel et al. 2019; GhostBERT §3.1): importance of heads and FFN neurons by
loss impact through gates, selection to a width, and physical removal of the rest."""

from __future__ import annotations

from ...lazy import lazy_exports
from ..base import Method
from .describe import describe
from .settings import ALLOCATIONS, parse_width


def _method() -> Method:
    from .restore import restore

    return Method(
        name="pruning", record_key="heads", command="prune", noun="pruned heads and neurons",
        restore=restore,
        describe=describe,
        # ghost modules and grouped blocks are built for the widths they were attached to
        before=("ghost", "grouped"),
        tracked=False,  # every record lists the kept heads; a dense model is a model pruned to full width
    )


# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "allocation": ("Selection", "select"),
        "apply": ("check_scores_match", "dense_record", "prune", "prune_model"),
        "gates": ("Gates", "gated"),
        "importance": ("SCORES_NAME", "ImportanceScores", "compute_importance", "magnitude_importance"),
        "restore": ("apply_structure",),
    },
    {"METHOD": _method},
)

__all__ = [
    "ALLOCATIONS",
    "Gates",
    "ImportanceScores",
    "METHOD",
    "SCORES_NAME",
    "Selection",
    "apply_structure",
    "check_scores_match",
    "compute_importance",
    "dense_record",
    "describe",
    "gated",
    "magnitude_importance",
    "parse_width",
    "prune",
    "prune_model",
    "select",
]
