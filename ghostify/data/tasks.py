"""Task presets: which dataset config, text columns, labels, split and metric a task name means."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import DataError

#: metric names for --metric (see ghostify.training.metrics)
METRIC_NAMES = ("accuracy", "f1_accuracy", "matthews", "pearson_spearman")


@dataclass(frozen=True)
class TaskPreset:
    name: str
    text_columns: tuple[str, ...]
    num_labels: int
    label_column: str = "label"
    validation_split: str = "validation"
    metric: str = "accuracy"
    #: the dataset's configuration name (``load_dataset(path, config)``); None: no config
    dataset_config: str | None = None

    @property
    def is_regression(self) -> bool:
        return self.num_labels == 1


GLUE_TASKS: dict[str, TaskPreset] = {
    "sst2": TaskPreset("sst2", ("sentence",), 2, dataset_config="sst2"),
    "cola": TaskPreset("cola", ("sentence",), 2, metric="matthews", dataset_config="cola"),
    "mrpc": TaskPreset("mrpc", ("sentence1", "sentence2"), 2, metric="f1_accuracy", dataset_config="mrpc"),
    "qqp": TaskPreset("qqp", ("question1", "question2"), 2, metric="f1_accuracy", dataset_config="qqp"),
    "stsb": TaskPreset("stsb", ("sentence1", "sentence2"), 1, metric="pearson_spearman", dataset_config="stsb"),
    "mnli": TaskPreset(
        "mnli", ("premise", "hypothesis"), 3, validation_split="validation_matched", dataset_config="mnli"
    ),
    "qnli": TaskPreset("qnli", ("question", "sentence"), 2, dataset_config="qnli"),
    "rte": TaskPreset("rte", ("sentence1", "sentence2"), 2, dataset_config="rte"),
    "wnli": TaskPreset("wnli", ("sentence1", "sentence2"), 2, dataset_config="wnli"),
}


def resolve_task(
    task: str | None,
    *,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    num_labels: int | None = None,
    metric: str | None = None,
) -> TaskPreset:
    """A preset by name, with explicit columns overriding it; or a custom task from columns."""
    if metric is not None and metric not in METRIC_NAMES:
        raise DataError(f"unknown --metric {metric!r}; choose one of {', '.join(METRIC_NAMES)}")
    if task is not None:
        if task not in GLUE_TASKS:
            raise DataError(
                f"unknown task {task!r}; use one of {', '.join(GLUE_TASKS)}, or give --text-columns and "
                "--label-column for another dataset"
            )
        preset = GLUE_TASKS[task]
        return TaskPreset(
            name=preset.name,
            text_columns=text_columns or preset.text_columns,
            num_labels=num_labels or preset.num_labels,
            label_column=label_column or preset.label_column,
            validation_split=preset.validation_split,
            metric=metric or preset.metric,
            dataset_config=preset.dataset_config,
        )
    if not text_columns:
        raise DataError("no task given: pass --task (e.g. sst2) or --text-columns for a custom dataset")
    return TaskPreset(
        name="custom",
        text_columns=tuple(text_columns),
        num_labels=num_labels or 0,  # 0: inferred from the data
        label_column=label_column or "label",
        metric=metric or "",  # "": accuracy, or Pearson/Spearman for regression, once labels are seen
    )
