"""Task kinds: what ``importance``, ``finetune``, ``distill`` and ``eval`` do for sentence
classification, token classification, extractive QA and sentence embeddings (``base.TaskKind``).

Example:
    >>> from ghostify.data import resolve_task
    >>> kind_for(resolve_task("conll2003")).head
    'token-classification'
"""

from __future__ import annotations

from ..data import DEFAULT_DATASET, TaskPreset
from ..errors import DataError
from ..settings import DataSettings, TaskSettings
from .base import TaskKind
from .classification import Classification
from .embeddings import Embeddings
from .qa import QuestionAnswering
from .tokens import TokenClassification

KINDS: dict[str, type[TaskKind]] = {
    "classification": Classification,
    "tokens": TokenClassification,
    "qa": QuestionAnswering,
    "embeddings": Embeddings,
}


def kind_for(preset: TaskPreset, data: DataSettings | None = None, task: TaskSettings | None = None) -> TaskKind:
    """The kind of ``preset``, reading ``data`` and ``task`` settings."""
    task = task or TaskSettings()
    if task.chunks is not None and preset.kind != "classification":
        raise DataError(f"--chunks windows sentence classification, but task {preset.name} is of kind {preset.kind} "
                        "(extractive QA always windows its contexts by --doc-stride); leave --chunks unset")
    return KINDS[preset.kind](preset, data or DataSettings(), task)


def dataset_for(preset: TaskPreset, dataset: str) -> str:
    """The dataset to read: ``--dataset``, or the task's own when it is left at its default."""
    return preset.dataset if preset.dataset and dataset == DEFAULT_DATASET else dataset


__all__ = ["KINDS", "TaskKind", "dataset_for", "kind_for"]
