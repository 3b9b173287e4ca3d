"""Datasets and task presets."""

from ..settings import DEFAULT_DATASET  # declared with the other defaults of DataSettings
from .labels import LabelKind, label_kind
from .loading import TaskData, load_split, load_unlabelled, padding_collator, tokenize
from .tasks import GLUE_TASKS, TaskPreset, resolve_task

__all__ = ["DEFAULT_DATASET", "GLUE_TASKS", "LabelKind", "label_kind", "TaskData", "TaskPreset", "load_split", "load_unlabelled", "padding_collator", "resolve_task", "tokenize"]
