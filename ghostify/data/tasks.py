"""Task presets: which kind of task, dataset, columns, labels, split and metric a task name means.

Kinds: ``classification`` (a label or score per text or text pair: GLUE), ``tokens`` (a tag per
word: NER, POS, chunking), ``qa`` (an answer span in a context: SQuAD) and ``embeddings`` (a
sentence-transformers model's pooled embedding; unlabeled text). ``ghostify.tasks`` holds what each
kind does; a preset only says which kind and which columns."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from ..errors import DataError

#: metric names for --metric (see ghostify.training.metrics)
METRIC_NAMES = ("accuracy", "f1_accuracy", "matthews", "pearson_spearman")

KINDS = ("classification", "tokens", "qa", "embeddings")


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
    kind: str = "classification"
    #: the task's own dataset (hub id), read when --dataset is left at its default
    dataset: str | None = None
    #: token classification: the pre-split words and their tags
    tokens_column: str = "tokens"
    tags_column: str = "ner_tags"
    #: extractive QA: SQuAD's columns; ``version_2``: unanswerable questions exist
    question_column: str = "question"
    context_column: str = "context"
    answers_column: str = "answers"
    version_2: bool = False
    #: classification: the class names by id (None: unknown, the labels are ids); string labels
    #: map to their position here
    label_names: tuple[str, ...] | None = None

    @property
    def is_regression(self) -> bool:
        return self.kind == "classification" and self.num_labels == 1

    @property
    def input_columns(self) -> tuple[str, ...]:
        """The columns a model reads."""
        if self.kind == "tokens":
            return (self.tokens_column,)
        if self.kind == "qa":
            return (self.question_column, self.context_column)
        return self.text_columns

    @property
    def target_column(self) -> str:
        """The column of what the model should predict (labels, tags, answers; a score for embeddings)."""
        return {"tokens": self.tags_column, "qa": self.answers_column}.get(self.kind, self.label_column)


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


TOKEN_TASKS: dict[str, TaskPreset] = {
    "conll2003": TaskPreset("conll2003", (), 0, kind="tokens", metric="seqeval", dataset="eriktks/conll2003"),
    "wnut_17": TaskPreset("wnut_17", (), 0, kind="tokens", metric="seqeval", dataset="leondz/wnut_17"),
}
QA_TASKS: dict[str, TaskPreset] = {
    "squad": TaskPreset("squad", (), 2, kind="qa", metric="squad", dataset="rajpurkar/squad"),
    "squad_v2": TaskPreset("squad_v2", (), 2, kind="qa", metric="squad", dataset="rajpurkar/squad_v2", version_2=True),
}
#: unlabeled text for a sentence-transformers model; --text-columns names the text (one column, or
#: two for evaluation pairs)
EMBEDDING_TASKS: dict[str, TaskPreset] = {
    "embeddings": TaskPreset("embeddings", (), 0, kind="embeddings", metric="embeddings"),
}
PRESETS: dict[str, TaskPreset] = {**GLUE_TASKS, **TOKEN_TASKS, **QA_TASKS, **EMBEDDING_TASKS}


def check_names(task: str | None, metric: str | None) -> None:
    """Refuse an unknown --task or --metric (the command line calls this before torch loads)."""
    if metric is not None and metric not in METRIC_NAMES and metric not in ("seqeval", "squad", "embeddings"):
        raise DataError(f"unknown --metric {metric!r}; choose one of {', '.join(METRIC_NAMES)}")
    if task is not None and task not in PRESETS:
        raise DataError(
            f"unknown task {task!r}; use one of {', '.join(PRESETS)}, or give --text-columns and "
            "--label-column for another dataset"
        )


def resolve_task(
    task: str | None,
    *,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    num_labels: int | None = None,
    metric: str | None = None,
    columns: dict[str, Any] | None = None,
    columns_from_data: bool = False,
) -> TaskPreset:
    """A preset by name, with explicit columns overriding it; or a custom task from columns.
    ``columns``: the token-classification and QA column settings (``tokens_column``, ...; None: the
    preset's); a ``tokens_column`` or ``question_column`` without a task makes a custom task of that kind.
    ``columns_from_data``: a custom task may name no text column (a single data file: ``load_split``
    reads it from the file, when one column of text is left besides the label)."""
    check_names(task, metric)
    if task is not None:
        preset = PRESETS[task]
        return replace(
            preset,
            text_columns=text_columns or preset.text_columns,
            num_labels=num_labels or preset.num_labels,
            label_column=label_column or preset.label_column,
            metric=metric or preset.metric,
            **{k: v for k, v in (columns or {}).items() if v is not None},
        )
    if columns and columns.get("tokens_column"):  # a token-classification dataset without a preset
        return replace(TOKEN_TASKS["conll2003"], name="custom", dataset=None,
                       **{k: v for k, v in columns.items() if v is not None})
    if columns and columns.get("question_column"):  # an extractive-QA dataset without a preset
        return replace(QA_TASKS["squad"], name="custom", dataset=None,
                       **{k: v for k, v in columns.items() if v is not None})
    if not text_columns and not columns_from_data:
        raise DataError("no task given: pass --task (e.g. sst2) or --text-columns for a custom dataset")
    return TaskPreset(
        name="custom",
        text_columns=tuple(text_columns or ()),
        num_labels=num_labels or 0,  # 0: inferred from the data
        label_column=label_column or "label",
        metric=metric or "",  # "": accuracy, or Pearson/Spearman for regression, once labels are seen
    )
