from __future__ import annotations

from typing import Annotated, Optional

import typer

from ...settings import DataSettings, ImportanceDefaults, TaskSettings
from ..app import app
from ..console import err, progress
from ..options import (
    BatchSize,
    Dataset,
    LabelColumn,
    MaxLength,
    Model,
    Output,
    Overwrite,
    Seed,
    Task,
    TextColumns,
)
from ..settings_options import settings_options
from ..summary import print_importance


@app.command(
    epilog="Examples:\n\n"
    "ghostify importance models/bert-sst2 -o out/scored --task sst2 --samples 2048\n\n"
    "ghostify importance ./minilm -o out/scored --dataset ../shared/data/glue --task sst2 --samples 512\n\n"
    "ghostify importance ./model -o out/scored --dataset ./my_data --text-columns text --label-free"
)
@settings_options(after={"tokens_column": "label_column"})
def importance(
    model: Model,
    output: Output,
    dataset: Dataset = DataSettings.dataset,
    task: Task = None,
    text_columns: TextColumns = None,
    label_column: LabelColumn = None,
    *,
    task_settings: TaskSettings,
    samples: Annotated[Optional[int], typer.Option("--samples", min=1, help="Training examples to score on (a seeded random subset); all if unset.")] = ImportanceDefaults.samples,
    batch_size: BatchSize = ImportanceDefaults.batch_size,
    max_length: MaxLength = DataSettings.max_length,
    label_free: Annotated[bool, typer.Option("--label-free", help="Score against the model's own predictions (no labels needed).")] = False,
    seed: Seed = ImportanceDefaults.seed,
    overwrite: Overwrite = False,
) -> None:
    """Score every attention head and FFN neuron by its impact on the loss.

    The score is the mean over training examples of |dL/d gate| for a gate at 1 on each head's
    slice of the attention-output input and on each FFN neuron (one forward and one backward pass
    per batch). OUT holds the model and `importance.safetensors`, which `ghostify prune OUT` uses.
    """
    from ... import steps  # torch and transformers: loaded when a command runs, not for --help
    with progress("scoring", samples) as bar:
        job = bar.add_task("scoring", total=samples)
        scores = steps.importance(
            model,
            output,
            dataset=dataset,
            task=task,
            text_columns=text_columns,  # split by settings_options (CONVERTERS)
            label_column=label_column,
            task_settings=task_settings,
            samples=samples,
            batch_size=batch_size,
            max_length=max_length,
            label_free=label_free,
            seed=seed,
            overwrite=overwrite,
            progress=lambda n: bar.advance(job, n),
        )
    print_importance(scores)
    err.print(f"wrote {output}")
