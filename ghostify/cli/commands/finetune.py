from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...settings import DataSettings, FinetuneWeights, StudentSettings, TaskSettings, TeacherStoreSettings, TrainSettings
from ..app import app
from ..console import err
from ..options import Model, Output, Overwrite, Resume
from ..settings_options import settings_options
from ..summary import print_trained, print_training


@app.command(
    epilog="Examples:\n\n"
    "ghostify finetune bert-base-uncased -o out/teacher --task sst2\n\n"
    "ghostify finetune out/distilled -o out/final --task sst2 --teacher out/teacher\n\n"
    "ghostify finetune ./minilm -o out/t --dataset ../shared/data/glue --task rte --epochs 2 --max-samples 2000\n\n"
    "accelerate launch --multi_gpu --num_processes 2 -m ghostify finetune ./minilm -o out/t --task sst2"
)
@settings_options
def finetune(
    model: Model,
    output: Output,
    *,
    data: DataSettings,
    task_settings: TaskSettings,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="Add logit distillation from this fine-tuned teacher.", show_default=False)] = None,
    losses: FinetuneWeights,
    student_settings: StudentSettings,
    training: TrainSettings,
    store: TeacherStoreSettings,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Fine-tune on a task: cross-entropy, or MSE for regression tasks.

    Paper defaults: batch 32, lr 2e-5, AdamW without weight decay, linear decay without warm-up,
    gradient clipping 1, 3 epochs. Evaluates on the validation split after every epoch and keeps
    the best checkpoint. `--teacher` adds the teacher's soft targets at `--temperature`.
    Runs unchanged under `accelerate launch` (several processes or GPUs).
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.finetune(model, output, data=data, task_settings=task_settings, teacher=teacher, losses=losses, student_settings=student_settings,
                            training=training, store=store, resume=resume, overwrite=overwrite)
    print_training(result)
    print_trained(output)
