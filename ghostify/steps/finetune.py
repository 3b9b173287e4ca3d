"""``ghostify finetune``: task fine-tuning, optionally with a teacher's soft targets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..data import DEFAULT_DATASET
from ..errors import GhostifyError
from ..files import check_disjoint, check_output_dir
from ..seeding import seed_everything
from ..training.loop import TrainResult, TrainSettings, partial_dir
from ..training.loop import train as run_training
from ..training.objectives import FinetuneObjective
from .common import check_max_length, check_same_tokenizer
from .training_common import check_dropout, check_optimizer, load_classifier, set_trainable, student_saver, task_inputs


def finetune(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    task: str | None = None,
    dataset: str = DEFAULT_DATASET,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    metric: str | None = None,
    max_length: int = 128,
    max_samples: int | None = None,
    teacher: str | os.PathLike | None = None,
    teacher_weight: float = 1.0,
    temperature: float = 1.0,
    train: str = "all",
    dropout: float | None = None,
    attention_dropout: float | None = None,
    epochs: int = 3,
    batch_size: int = 32,
    learning_rate: float = 2e-5,
    weight_decay: float = 0.0,
    warmup_ratio: float = 0.0,
    max_grad_norm: float = 1.0,
    gradient_accumulation_steps: int = 1,
    mixed_precision: str = "no",
    seed: int = 0,
    checkpoint_steps: int = 200,
    resume: bool = False,
    overwrite: bool = False,
    on_step=None,
) -> TrainResult:
    """Fine-tune ``model`` on ``task``: cross-entropy (MSE for regression), evaluating on the
    validation split after every epoch and keeping the best checkpoint. ``dropout`` and
    ``attention_dropout`` replace the model's dropout probabilities (None keeps them; ALBERT found
    that 0 works better); the trained model is saved with them.

    Example:
        >>> finetune("out/ghost", "out/tuned", task="sst2", teacher="out/teacher")  # doctest: +SKIP
    """
    settings = TrainSettings(epochs=epochs, batch_size=batch_size, learning_rate=learning_rate, weight_decay=weight_decay,
                             warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm,
                             gradient_accumulation_steps=gradient_accumulation_steps, mixed_precision=mixed_precision,
                             seed=seed, checkpoint_steps=checkpoint_steps)
    settings.validate()
    _check_weight(teacher_weight, temperature)
    check_dropout(dropout, attention_dropout)
    inputs = (model, ("--teacher", teacher), ("--dataset", dataset))
    check_output_dir(output, overwrite=overwrite or resume, inputs=inputs)
    check_disjoint([partial_dir(Path(output))], inputs)  # where the run's state lives meanwhile
    check_optimizer(weight_decay=weight_decay, max_grad_norm=max_grad_norm, max_samples=max_samples)
    check_max_length(max_length, model, teacher)
    if teacher is not None:
        check_same_tokenizer(teacher, model)  # before any model is loaded or OUT.partial made
    seed_everything(seed)  # before the task head, if new, is drawn
    data = task_inputs(model, dataset=dataset, task=task, text_columns=text_columns, label_column=label_column, metric=metric,
                       max_length=max_length, max_samples=max_samples, seed=seed, evaluate=True)
    student = load_classifier(model, data.preset, role="model", need_trained_head=False, dropout=dropout,
                              attention_dropout=attention_dropout)
    set_trainable(student, train)
    teacher_model = None
    if teacher is not None:
        teacher_model = load_classifier(teacher, data.preset, role="teacher", need_trained_head=True)
    objective = FinetuneObjective(student, regression=data.preset.is_regression, teacher=teacher_model,
                                  teacher_weight=teacher_weight, temperature=temperature)
    arguments: dict[str, Any] = {
        "model": str(model), "task": data.preset.name, "dataset": dataset, "teacher": teacher,
        "teacher_weight": teacher_weight, "temperature": temperature, "train": train,
        "dropout": dropout, "attention_dropout": attention_dropout,
        "max_samples": max_samples, "max_length": max_length, **vars(settings),
    }
    return run_training(objective, data.train_rows, data.collate, settings, output,
                 student_saver(student, "finetune", arguments, model), evaluation=data.evaluation,
                 identity={**data.identity, "model": str(model), "teacher": str(teacher), "arguments": _plain(arguments)},
                 resume=resume, overwrite=overwrite, on_step=on_step, describe="finetune")


def _check_weight(teacher_weight: float, temperature: float) -> None:
    if not 0 <= teacher_weight <= 1:
        raise GhostifyError(f"--teacher-weight {teacher_weight} must be in [0, 1] (labels get 1 - weight)")
    if temperature <= 0:
        raise GhostifyError(f"--temperature {temperature} must be positive")


def _plain(arguments: dict[str, Any]) -> dict[str, Any]:
    return {k: (str(v) if v is not None and not isinstance(v, (int, float, str, bool)) else v) for k, v in arguments.items()}
