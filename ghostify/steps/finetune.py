"""``ghostify finetune``: task fine-tuning, optionally with a teacher's soft targets."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ..errors import GhostifyError
from ..files import check_disjoint, check_output_dir
from ..flatten import checks_arguments, flat_settings
from ..seeding import seed_everything
from ..settings import (DataSettings, FinetuneWeights, StudentSettings, TaskSettings, TeacherStoreSettings,
                        TrainSettings)
from ..training.loop import Deadline, TrainResult, partial_dir
from ..training.loop import train as run_training
from ..training.objectives import FinetuneObjective
from .common import check_max_length, check_same_tokenizer
from .training_common import (check_store, keep_teacher_outputs, plain_arguments, set_trainable, student_saver,
                              task_inputs, task_kind)


@flat_settings
def finetune(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    data: DataSettings = DataSettings(),
    task_settings: TaskSettings = TaskSettings(),
    teacher: str | os.PathLike | None = None,
    losses: FinetuneWeights = FinetuneWeights(),
    student_settings: StudentSettings = StudentSettings(),
    training: TrainSettings = TrainSettings(),
    store: TeacherStoreSettings = TeacherStoreSettings(),
    resume: bool = False,
    overwrite: bool = False,
    on_step: Callable[[int], None] | None = None,
    deadline: Deadline | None = None,
) -> TrainResult:
    """Fine-tune ``model`` on ``data``'s task: cross-entropy (MSE for regression), evaluating on the
    validation split after every epoch and keeping the best checkpoint. With a ``teacher``, its
    soft targets are mixed in as ``losses`` say, kept once computed as ``store`` says
    (:class:`~ghostify.settings.TeacherStoreSettings`). ``student_settings`` choose what trains and replace
    the model's dropout probabilities (the trained model is saved with them). Any field of the
    settings may instead be given as a flat keyword (``task="sst2", epochs=2``): the names of the
    CLI flags and recipe keys.

    Example:
        >>> finetune("out/ghost", "out/tuned", data=DataSettings(task="sst2"), teacher="out/teacher",
        ...          training=TrainSettings(epochs=2))  # doctest: +SKIP
    """
    check_arguments(training=training, losses=losses, student_settings=student_settings, data=data,
                    task_settings=task_settings, store=store)
    kind = task_kind(data, task_settings)
    if kind.can_finetune():
        raise GhostifyError(kind.can_finetune())
    if teacher is None and training.teacher_precision is not None:
        raise GhostifyError(f"--teacher-precision {training.teacher_precision} sets the precision of a teacher's "
                            "passes, but this fine-tune has no --teacher: give one, or leave --teacher-precision out")
    inputs = (model, ("--teacher", teacher), ("--dataset", data.dataset))
    check_output_dir(output, overwrite=overwrite or resume, inputs=inputs)
    check_disjoint([partial_dir(Path(output))], inputs)  # where the run's state lives meanwhile
    check_store(store, output, inputs)
    check_max_length(data.max_length, model, teacher)
    if teacher is not None:
        check_same_tokenizer(teacher, model)  # before any model is loaded or OUT.partial made
    seed_everything(training.seed)  # before the task head, if new, is drawn
    task = task_inputs(model, data, task_settings, seed=training.seed, evaluate=True)
    trained = task.kind.load(model, role="model", need_trained_head=False, dropout=student_settings.dropout,
                             attention_dropout=student_settings.attention_dropout)
    set_trainable(trained, student_settings.train)
    teacher_model = None
    if teacher is not None:
        teacher_model = task.kind.load(teacher, role="teacher", need_trained_head=True)
    objective = FinetuneObjective(trained, task.kind, teacher=teacher_model, teacher_weight=losses.teacher_weight,
                                  temperature=losses.temperature)
    rows, collate = task.train_rows, task.collate
    if teacher is not None:
        rows, collate = keep_teacher_outputs(objective, rows, collate, teacher, store, training)
    # the history's flat keys, as the CLI flags name them
    arguments: dict[str, Any] = {
        "model": str(model), "task": task.preset.name, "dataset": task.identity["dataset"], "teacher": teacher,
        **asdict(losses), **asdict(student_settings), "max_samples": data.max_samples, "max_length": data.max_length,
        **asdict(training), **asdict(store),
    }
    return run_training(objective, rows, collate, training, output,
                        student_saver(trained, "finetune", arguments, model), evaluation=task.evaluation,
                        identity={**task.identity, "model": str(model), "teacher": str(teacher),
                                  "arguments": plain_arguments(arguments)},
                        resume=resume, overwrite=overwrite, on_step=on_step, describe="finetune",
                        deadline=deadline)


def check_arguments(*, training: TrainSettings = TrainSettings(), losses: FinetuneWeights = FinetuneWeights(),
                    student_settings: StudentSettings = StudentSettings(), data: DataSettings = DataSettings(),
                    task_settings: TaskSettings = TaskSettings(), store: TeacherStoreSettings = TeacherStoreSettings(),
                    **_: object) -> None:
    """What :func:`finetune` refuses of its arguments before reading anything."""
    for settings in (training, losses, student_settings, data, task_settings, store):
        settings.validate()


checks_arguments(finetune, check_arguments)

