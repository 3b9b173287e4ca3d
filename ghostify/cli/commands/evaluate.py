from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...settings import EVAL_BATCH_SIZE, DataSettings, TaskSettings
from ..app import app
from ..console import out, print_json
from ..options import BatchSize, Json, Model
from ..settings_options import settings_options


@app.command(
    name="eval",
    epilog="Examples:\n\n"
    "ghostify eval out/final --task sst2\n\n"
    "ghostify eval out/final --task mnli --split validation_mismatched --json\n\n"
    "ghostify eval ./model --dataset ../shared/data/glue --task stsb --json | jq .metrics.spearman\n\n"
    "ghostify eval out/ner --task conll2003\n\n"
    "ghostify eval out/news --dataset ../shared/data/bbc_news --text-columns text --label-column label_name --chunks mean\n\n"
    "ghostify eval out/qa --task squad_v2 --max-length 384 --doc-stride 128\n\n"
    "ghostify eval out/small-minilm --task embeddings --dataset ../shared/data/glue/stsb --text-columns sentence1,sentence2",
)
@settings_options(after={"split": "dataset"})  # where --split has always been listed
def evaluate(
    model: Model,
    *,
    data: DataSettings,
    task_settings: TaskSettings,
    split: Annotated[Optional[str], typer.Option("--split", help="Split to evaluate (default: the task's validation split).", show_default=False)] = None,
    batch_size: BatchSize = EVAL_BATCH_SIZE,
    json_output: Json = False,
) -> None:
    """Print a checkpoint's task metrics (accuracy; F1 and accuracy for MRPC/QQP; Matthews
    correlation for CoLA; Pearson and Spearman for STS-B; matched accuracy for MNLI; entity
    precision, recall, F1 and token accuracy for conll2003/wnut_17; exact match and F1 for
    squad/squad_v2; Spearman, recall@10 and MRR@10 of a sentence-transformers model for embeddings)."""
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help

    result = steps.evaluate(model, data=data, task_settings=task_settings, split=split, batch_size=batch_size)
    if json_output:
        print_json(result)
        return
    metrics = "  ".join(f"{k} {v:.4f}" for k, v in result["metrics"].items())
    windows = f", {result['windows']} windows" if "windows" in result else ""
    out.print(f"{result['task']} {result['split']} ({result['samples']} samples{windows}): {metrics}")
