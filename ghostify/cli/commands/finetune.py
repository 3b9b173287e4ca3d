from __future__ import annotations

from typing import Annotated, Optional

import typer

from ... import steps
from ...data import DEFAULT_DATASET
from ..app import app
from ..console import err
from ..options import (
    AttentionDropout,
    CheckpointSteps,
    Dataset,
    Dropout,
    Epochs,
    GlobalBatchSize,
    GradientAccumulation,
    LabelColumn,
    LearningRate,
    MaxGradNorm,
    MaxLength,
    MaxSamples,
    Metric,
    MixedPrecision,
    Model,
    Output,
    Overwrite,
    Resume,
    Seed,
    Task,
    Temperature,
    TextColumns,
    Train,
    WarmupRatio,
    WeightDecay,
    split_columns,
)
from ..summary import print_training


@app.command(
    epilog="**Examples**\n\n"
    "ghostify finetune bert-base-uncased -o out/teacher --task sst2\n\n"
    "ghostify finetune out/distilled -o out/final --task sst2 --teacher out/teacher\n\n"
    "ghostify finetune ./minilm -o out/t --dataset ../shared/data/glue --task rte --epochs 2 --max-samples 2000\n\n"
    "accelerate launch --multi_gpu --num_processes 2 -m ghostify finetune ./minilm -o out/t --task sst2"
)
def finetune(
    model: Model,
    output: Output,
    task: Task = None,
    dataset: Dataset = DEFAULT_DATASET,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    metric: Metric = None,
    max_length: MaxLength = 128,
    max_samples: MaxSamples = None,
    teacher: Annotated[Optional[str], typer.Option("--teacher", help="Add logit distillation from this fine-tuned teacher.", show_default=False)] = None,
    teacher_weight: Annotated[float, typer.Option("--teacher-weight", help="Weight w of the teacher's soft cross-entropy; the labels get 1 - w.")] = 1.0,
    temperature: Temperature = 1.0,
    train: Train = "all",
    dropout: Dropout = None,
    attention_dropout: AttentionDropout = None,
    epochs: Epochs = 3,
    batch_size: GlobalBatchSize = 32,
    learning_rate: LearningRate = 2e-5,
    weight_decay: WeightDecay = 0.0,
    warmup_ratio: WarmupRatio = 0.0,
    max_grad_norm: MaxGradNorm = 1.0,
    gradient_accumulation_steps: GradientAccumulation = 1,
    mixed_precision: MixedPrecision = "no",
    seed: Seed = 0,
    checkpoint_steps: CheckpointSteps = 200,
    resume: Resume = False,
    overwrite: Overwrite = False,
) -> None:
    """Fine-tune on a task: cross-entropy, or MSE for regression tasks.

    Paper defaults: batch 32, lr 2e-5, AdamW without weight decay, linear decay without warm-up,
    gradient clipping 1, 3 epochs. Evaluates on the validation split after every epoch and keeps
    the best checkpoint. `--teacher` adds the teacher's soft targets at `--temperature`.
    Runs unchanged under `accelerate launch` (several processes or GPUs).
    """
    result = steps.finetune(
        model, output, task=task, dataset=dataset, text_columns=split_columns(text_columns), label_column=label_column, metric=metric,
        max_length=max_length, max_samples=max_samples, teacher=teacher, teacher_weight=teacher_weight,
        temperature=temperature, train=train, dropout=dropout, attention_dropout=attention_dropout, epochs=epochs, batch_size=batch_size, learning_rate=learning_rate,
        weight_decay=weight_decay, warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm,
        gradient_accumulation_steps=gradient_accumulation_steps, mixed_precision=mixed_precision, seed=seed,
        checkpoint_steps=checkpoint_steps, resume=resume, overwrite=overwrite,
    )
    print_training(result)
    err.print(f"wrote {output}")
