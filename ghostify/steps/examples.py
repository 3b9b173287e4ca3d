"""Unlabelled examples of a task's training data as batches of model inputs: what a structural method
reads through :attr:`ghostify.methods.Context.examples` (prune's mask tuning), described by what
``ghostify importance`` recorded of its data (:func:`data_description`)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from pathlib import Path
from collections.abc import Iterator, Mapping
from typing import Any

from ..checkpoint import load_config
from ..data import load_split
from ..errors import GhostifyError
from ..heads import head_phrase, saved_head
from ..settings import DataSettings, ImportanceDefaults, TaskSettings
from ..methods import Context, Examples
from ..methods.pruning import tuning_examples
from ..tasks import TaskKind, dataset_for
from .common import load_tokenizer
from .training_common import task_kind

#: the split the examples come from: never validation (the scores came from training data too)
SPLIT = "train"


def data_description(data: DataSettings, task: TaskSettings) -> dict[str, Any]:
    """What :func:`task_batches` needs to read the same data again (JSON: tuples as lists)."""

    def plain(settings: Any) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(settings).items()}

    return {"data": plain(dataclasses.replace(data, max_samples=None)), "task": plain(task)}


def settings_of(description: Mapping[str, Any], where: str) -> tuple[DataSettings, TaskSettings]:
    """The data and task settings a :func:`data_description` holds, refused in one line when damaged."""
    try:
        data, task = dict(description["data"]), dict(description["task"])
        for values in (data, task):
            for key, value in values.items():
                if isinstance(value, list):
                    values[key] = tuple(value)
        return DataSettings(**data), TaskSettings(**task)
    except (KeyError, TypeError, ValueError) as exc:
        raise GhostifyError(f"{where} describes its data as {description!r}, which this ghostify cannot read "
                            f"({type(exc).__name__}: {exc}); re-run `ghostify importance`") from None


def unlabelled_examples(model: str | os.PathLike, description: Mapping[str, Any], count: int, seed: int,
                        batch_size: int = ImportanceDefaults.batch_size) -> Examples:
    """:func:`task_batches`' batches, with how far a model's outputs on one of them are from a teacher's: the task's
    prediction-layer distillation loss at temperature 1, less the teacher's own (what ``Context.examples``
    gives a method: mask tuning keeps its scales only where they bring the model closer to its teacher)."""
    data, task = settings_of(description, "the scores file")
    with _recorded_data():
        kind = task_kind(data, task)
    head = saved_head(load_config(model))
    if head != kind.head:  # the task's measure reads outputs this model has not: no common distance to tune by
        raise GhostifyError(f"--tune-masks reads the data the scores were computed on, task {kind.preset.name} on "
                            f"{data.dataset} ({kind.name}: it compares the outputs of {head_phrase(kind.head)}), but {model} has "
                            f"{head_phrase(head)}; score the model on its own task (`ghostify importance {model} "
                            "--task ...`), or prune without --tune-masks")
    kind, batches = _tuning_batches(model, description, count, seed, batch_size)

    def distance(output: Any, teacher: Any, batch: dict[str, Any]) -> float:
        return float(kind.teacher_loss(output, teacher, batch, 1.0)) - float(kind.teacher_loss(teacher, teacher, batch, 1.0))

    return Examples(batches=batches, distance=distance)


def counted_examples(model: str | os.PathLike, description: Mapping[str, Any], count: int, seed: int,
                     batch_size: int = ImportanceDefaults.batch_size) -> Examples:
    """:func:`task_batches`' batches alone: what a recipe counts before its stages run (:func:`check_tuning_data`)."""
    return Examples(batches=_tuning_batches(model, description, count, seed, batch_size)[1])


def _tuning_batches(model: str | os.PathLike, description: Mapping[str, Any], count: int, seed: int,
                    batch_size: int) -> tuple[TaskKind, list[dict[str, Any]]]:
    """:func:`task_batches` for ``prune --tune-masks``, whose user named no data: a refusal of the data says whose it is."""
    with _recorded_data():
        return task_batches(model, description, count, seed, batch_size)


@contextlib.contextmanager
def _recorded_data() -> Iterator[None]:
    """A refusal of the data the scores recorded, said as such (the user of ``prune`` named no data)."""
    try:
        yield
    except GhostifyError as exc:
        lines = str(exc).splitlines() or [type(exc).__name__]
        raise GhostifyError(f"--tune-masks reads the data the scores were computed on, as `ghostify importance` recorded "
                            f"it, and cannot: {lines[0]}; re-run `ghostify importance` on data that is there, or prune "
                            "without --tune-masks") from None


def check_tuning_data(model: str | os.PathLike, description: Any, count: int, seed: int, *, scores: str) -> None:
    """Refuse now what ``prune --tune-masks count`` will refuse of the data ``description`` names (what ``importance``
    records of its data: none, or too few examples to hold some out), read with ``model``'s tokenizer, where that
    data is local (a dataset of the hub is read when the stage runs). ``scores``: where the scores are, for messages."""
    if isinstance(description, Mapping):
        data, task = settings_of(description, scores)
        with _recorded_data():
            kind = task_kind(data, task)
        if not Path(dataset_for(kind.preset, data.dataset)).exists():
            return
    tuning_examples(description, scores, count, Context(source=str(model), seed=seed, examples=counted_examples))


def task_batches(model: str | os.PathLike, description: Mapping[str, Any], count: int, seed: int,
                 batch_size: int = ImportanceDefaults.batch_size) -> tuple[TaskKind, list[dict[str, Any]]]:
    """``count`` training examples (a seeded random subset) of the data ``description`` names, encoded as the
    task's kind encodes them with ``model``'s tokenizer, without their labels, in batches of ``batch_size``; and the
    task kind that read them (completed from the data: its labels)."""
    from torch.utils.data import DataLoader

    data, task = settings_of(description, "the scores file")
    kind = task_kind(data, task).for_model(load_config(model))
    kind.reads_outputs_of(model)  # the losses compare outputs of this model (and of its pruned copies)
    dataset = dataset_for(kind.preset, data.dataset)
    rows = load_split(dataset, kind.preset, SPLIT, max_samples=count, seed=seed, require_labels=False)
    rows.task = kind.with_data(rows)
    tokenizer = load_tokenizer(model)
    encoded = kind.encode(rows, tokenizer)
    targets = [c for c in encoded.column_names if c in kind.targets]
    if targets:
        encoded = encoded.remove_columns(targets)
    collate = kind.collator(tokenizer)
    batches = [{k: v for k, v in batch.items() if k not in kind.targets}
               for batch in DataLoader(encoded, batch_size=batch_size, collate_fn=collate)]
    if not batches:
        raise GhostifyError(f"no training examples in {data.dataset} to read")
    return kind, batches


__all__ = ["SPLIT", "check_tuning_data", "counted_examples", "data_description", "settings_of", "task_batches",
           "unlabelled_examples"]
