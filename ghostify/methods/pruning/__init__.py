"""Structured pruning (Michel et al. 2019; GhostBERT §3.1): importance of heads and FFN neurons by
loss impact through gates, selection to a width, and physical removal of the rest."""

from __future__ import annotations

from ..base import Method
from . import restore
from .allocation import Selection, select
from .apply import check_scores_match, dense_record, prune, prune_model
from .describe import describe
from .gates import Gates, gated
from .importance import SCORES_NAME, ImportanceScores, compute_importance, magnitude_importance
from .restore import apply_structure
from .settings import ALLOCATIONS, parse_width

METHOD = Method(
    name="pruning", record_key="heads", command="prune", noun="pruned heads and neurons",
    restore=restore.restore,
    describe=describe,
    # ghost modules and grouped blocks are built for the widths they were attached to
    before=("ghost", "grouped"),
    tracked=False,  # every record lists the kept heads; a dense model is a model pruned to full width
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
