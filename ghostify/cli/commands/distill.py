from __future__ import annotations

from typing import Annotated, Optional

import typer

from ... import steps
from ...checkpoint import load_config, read_record
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


def _weight(flag: str, what: str):
    return Annotated[float, typer.Option(flag, min=0.0, help=f"Weight of {what}.")]


@app.command(
    epilog="**Examples**\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/distilled --task sst2\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/d --task sst2 --dataset out/sst2-aug "
    "--attention-weight 1 --logit-weight 1\n\n"
    "ghostify distill --teacher out/teacher --student out/ghost -o out/d --task sst2 --train ghost-only\n\n"
    "accelerate launch --multi_gpu --num_processes 2 -m ghostify distill --teacher T --student S -o out/d --task sst2"
)
def distill(
    teacher: Annotated[str, typer.Option("--teacher", help="Teacher checkpoint (fine-tuned on the task).", show_default=False)],
    student: Annotated[str, typer.Option("--student", help="Student checkpoint (e.g. pruned, with ghost modules).", show_default=False)],
    output: Output,
    task: Task = None,
    dataset: Dataset = DEFAULT_DATASET,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    metric: Metric = None,
    max_length: MaxLength = 128,
    max_samples: MaxSamples = None,
    emb_weight: _weight("--emb-weight", "the embedding-output MSE") = 1.0,
    mha_weight: _weight("--mha-weight", "the MSE after every attention block") = 1.0,
    ffn_weight: _weight("--ffn-weight", "the MSE after every FFN block") = 1.0,
    attention_weight: _weight("--attention-weight", "TinyBERT's attention-score MSE (pre-softmax, padding masked)") = 0.0,
    logit_weight: _weight("--logit-weight", "the prediction-layer soft cross-entropy (MSE for regression)") = 0.0,
    temperature: Temperature = 1.0,
    sop_weight: _weight("--sop-weight", "ALBERT's sentence-order prediction on sentence pairs or multi-sentence texts (swapped-order negatives)") = 0.0,
    references: Annotated[bool, typer.Option("--references/--no-references", help="RefBERT: the student's first layer also attends to the teacher's pre-computed representations of the most similar other training example (store saved in the output; retrieved without the teacher at inference).")] = False,
    reference_delta: Annotated[float, typer.Option("--reference-delta", help="RefBERT's δ subtracted from the first layer's attention weights at real key positions, in (0, 1).")] = 0.01,
    layer_map: Annotated[Optional[str], typer.Option("--layer-map", help="Explicit STUDENT:TEACHER layer pairs, e.g. 1:2,2:4,3:6 (default: one-to-one, or uniform for a shallower student).", show_default=False)] = None,
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
    """Distill a teacher into a student, layer by layer (GhostBERT).

    Loss: MSE between student and teacher on the embedding output and on the hidden states after
    every attention block and every FFN block (`emb + mha + ffn`, each weighted), optionally
    TinyBERT's attention-score MSE and prediction-layer soft cross-entropy at `--temperature`.
    Layers map one-to-one when depths match, uniformly when the student is shallower, or as
    `--layer-map` says; learned linear maps bridge different hidden sizes (saved apart, in
    `distill_projections.safetensors`). The teacher runs in eval mode without gradients. Labels are
    not needed, so augmented data (`ghostify augment`) works as `--dataset`. `--sop-weight` adds
    ALBERT's sentence-order prediction (a small classifier, saved with the projections) on
    sentence pairs or texts of two or more sentences. With `--logit-weight`
    the student is evaluated each epoch and the best kept; otherwise the last is written.
    """
    result = steps.distill(
        teacher, student, output, task=task, dataset=dataset, text_columns=split_columns(text_columns),
        label_column=label_column, metric=metric, max_length=max_length, max_samples=max_samples, emb_weight=emb_weight,
        mha_weight=mha_weight, ffn_weight=ffn_weight, attention_weight=attention_weight, logit_weight=logit_weight,
        temperature=temperature, sop_weight=sop_weight, references=references, reference_delta=reference_delta,
        layer_map=layer_map, train=train, dropout=dropout,
        attention_dropout=attention_dropout, epochs=epochs, batch_size=batch_size,
        learning_rate=learning_rate, weight_decay=weight_decay, warmup_ratio=warmup_ratio, max_grad_norm=max_grad_norm,
        gradient_accumulation_steps=gradient_accumulation_steps, mixed_precision=mixed_precision, seed=seed,
        checkpoint_steps=checkpoint_steps, resume=resume, overwrite=overwrite,
    )
    print_training(result)
    if references:
        data = read_record(load_config(output)).references
        err.print(f"references: {data['entries']} entries, {data['bytes'] / 2**20:.1f} MiB store, retrieval agreement "
                  f"with the teacher's choice {data['retrieval']['agreement']:.3f}")
    err.print(f"wrote {output}")
