"""Datasets and task presets."""

from .loading import TaskData, batches, load_split, padding_collator, tokenize
from .tasks import DEFAULT_DATASET, GLUE_TASKS, TaskPreset, resolve_task

__all__ = ["DEFAULT_DATASET", "GLUE_TASKS", "TaskData", "TaskPreset", "batches", "load_split", "padding_collator", "resolve_task", "tokenize"]
