from __future__ import annotations

from typing import Annotated, Optional

import typer

from ... import steps
from ...data import DEFAULT_DATASET
from ..app import app
from ..console import out, print_json
from ..options import (
    BatchSize,
    Dataset,
    Json,
    LabelColumn,
    MaxLength,
    MaxSamples,
    Metric,
    Model,
    Task,
    TextColumns,
    split_columns,
)


@app.command(
    name="eval",
    epilog="**Examples**\n\n"
    "ghostify eval out/final --task sst2\n\n"
    "ghostify eval out/final --task mnli --split validation_mismatched --json\n\n"
    "ghostify eval ./model --dataset ../shared/data/glue --task stsb --json | jq .metrics.spearman",
)
def evaluate(
    model: Model,
    task: Task = None,
    dataset: Dataset = DEFAULT_DATASET,
    split: Annotated[Optional[str], typer.Option("--split", help="Split to evaluate (default: the task's validation split).", show_default=False)] = None,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    metric: Metric = None,
    max_length: MaxLength = 128,
    max_samples: MaxSamples = None,
    batch_size: BatchSize = 64,
    json_output: Json = False,
) -> None:
    """Print a checkpoint's task metrics (accuracy; F1 and accuracy for MRPC/QQP; Matthews
    correlation for CoLA; Pearson and Spearman for STS-B; matched accuracy for MNLI)."""
    result = steps.evaluate(
        model, task=task, dataset=dataset, split=split, text_columns=split_columns(text_columns),
        label_column=label_column, metric=metric, max_length=max_length, max_samples=max_samples, batch_size=batch_size,
    )
    if json_output:
        print_json(result)
        return
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
    out.print(f"{result['task']} {result['split']} ({result['samples']} samples): {metrics}")
