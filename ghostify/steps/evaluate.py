"""``ghostify eval``: a checkpoint's metrics on a task's split."""

from __future__ import annotations

import os
from dataclasses import replace
from typing import Any

from ..checkpoint import load_config, read_record
from ..console import err
from ..data import load_split
from ..data.tasks import PRESETS
from ..errors import GhostifyError
from ..export.runtime import GraphModel
from ..flatten import checks_arguments, flat_settings
from ..runtimes import Target, graph_of
from ..settings import DEFAULT_DATASET, EVAL_BATCH_SIZE, DataSettings, TaskSettings
from ..tasks import dataset_for
from ..training.sharding import end_run, launched_engine, make_accelerator
from .common import check_max_length, check_positive, load_tokenizer
from .training_common import task_kind

BATCH_SIZE = EVAL_BATCH_SIZE


@flat_settings
def evaluate(
    model: str | os.PathLike,
    *,
    data: DataSettings = DataSettings(),
    task_settings: TaskSettings = TaskSettings(),
    split: str | None = None,
    batch_size: int = BATCH_SIZE,
) -> dict[str, Any]:
    """``{"task": ..., "split": ..., "metrics": {...}, "main_metric": ..., "samples": n}`` for ``model`` on ``split``
    (default: the task's validation split) of ``data`` (or its fields as flat keywords), with the
    metrics of the task's kind: accuracy, F1, Matthews or Pearson/Spearman; entity precision,
    recall, F1 and token accuracy; SQuAD exact match and F1; or an embedding model's Spearman and
    retrieval scores. With ``chunks`` (long texts windowed), ``samples`` counts the texts and
    ``windows`` the rows the model ran on.

    Example:
        >>> evaluate("out/tuned", data=DataSettings(task="sst2"))["metrics"]["accuracy"]  # doctest: +SKIP
    """
    from torch.utils.data import DataLoader

    check_arguments(batch_size=batch_size)
    found = graph_of(model)  # a graph `ghostify export --format ...` wrote: run in its runtime
    graph = found[1] if found is not None else None
    directory = graph.parent if graph is not None else model
    if data.task is None and data.text_columns is None and not any(task_settings.columns().values()):
        data = _task_from_history(model, directory, data)
    kind = task_kind(data, task_settings)
    dataset = dataset_for(kind.preset, data.dataset)
    check_max_length(data.max_length, directory)
    kind.for_model(load_config(directory))
    split = split or kind.preset.validation_split
    rows = load_split(dataset, kind.preset, split, max_samples=data.max_samples, validation_file=data.validation_file)
    preset = kind.with_data(rows)
    rows.task = preset
    tokenizer = load_tokenizer(directory)
    net = load_graph_model(graph, found[0], kind, preset) if found is not None else \
        kind.load(model, role="model", need_trained_head=True)
    evaluation = kind.evaluation(rows, tokenizer)
    accelerator, partial_type = make_accelerator()  # under a launch: its process group (a recipe's stages share it)
    try:
        loader = DataLoader(evaluation.rows, batch_size=batch_size, collate_fn=evaluation.collate)
        if graph is None and launched_engine() is None:
            net, loader = accelerator.prepare(net, loader)
        else:
            # a graph has no parameters to place or wrap; under FSDP or DeepSpeed (a recipe's eval
            # stage) every process evaluates its share with a whole copy: no gradients, no optimizer
            if graph is None:
                net = net.to(accelerator.device)
            loader = accelerator.prepare(loader)
        metrics = evaluation.run(net, loader, accelerator)
    finally:
        end_run(accelerator, partial_type)
    samples, windows = metrics.pop("samples", 0), metrics.pop("windows", None)
    # the task's own metric (what picks a training run's best epoch): a report's headline
    result = {"task": preset.name, "dataset": str(dataset), "split": split, "metrics": metrics,
              "main_metric": evaluation.select, "samples": samples}
    return result if windows is None else {**result, "windows": windows}  # --chunks: the rows the model ran on


#: the commands whose history entry names the task a checkpoint was trained or scored on
_TASK_COMMANDS = ("finetune", "distill", "importance")


def recorded_task(directory: str | os.PathLike) -> tuple[str, str] | None:
    """(task, dataset) of the latest finetune, distill or importance step in the checkpoint's
    history, when it names a task preset; None otherwise."""
    record = read_record(load_config(directory))
    for entry in reversed(record.history if record is not None else []):
        arguments = entry.get("arguments") or {}
        task = arguments.get("task")
        if entry.get("command") in _TASK_COMMANDS and task in PRESETS:
            return task, str(arguments.get("dataset") or DEFAULT_DATASET)
    return None


def _task_from_history(model: str | os.PathLike, directory: str | os.PathLike, data: DataSettings) -> DataSettings:
    """``data`` with the task (and, unless given, the dataset) the checkpoint's history names,
    said in one line; unchanged when the history names none (task_kind then asks for --task)."""
    found = recorded_task(directory)
    if found is None:
        return data
    task, dataset = found
    keep = data.dataset != DEFAULT_DATASET
    data = replace(data, task=task, dataset=data.dataset if keep else dataset)
    err.print(f"eval: task {task} on {data.dataset}, from the history of {directory} (pass --task to choose another)")
    return data


#: the graph outputs each task kind's evaluation reads (the embeddings kind pools hidden states itself)
def check_arguments(*, batch_size: int = BATCH_SIZE, **_: object) -> None:
    """What :func:`evaluate` refuses of its arguments before reading anything."""
    check_positive(batch_size=batch_size)


checks_arguments(evaluate, check_arguments)


#: what each task's evaluation reads of an exported graph (a sentence-embedding model's graph pools inside itself,
#: as its sentence-transformers model does)
GRAPH_OUTPUTS = {"classification": ("logits",), "tokens": ("logits",), "qa": ("start_logits", "end_logits"),
                 "embeddings": ("sentence_embedding",)}


def load_graph_model(graph, target: Target, kind, preset) -> GraphModel:
    """An exported model's graph in its runtime, at the runtime's default precision on this CPU (what ships),
    checked against the task like a checkpoint's head is: a sentence classifier, a token classifier or an
    extractive-QA model, with the outputs its evaluation reads."""
    if kind.name not in GRAPH_OUTPUTS:
        raise GhostifyError(f"eval of an {target.runtime.format_title} export runs classification, token classification, QA and "
                            f"sentence embeddings; evaluate the {preset.name} task on the checkpoint the export was made from "
                            f"({graph.parent})")
    labels = kind.head_labels(load_config(graph.parent))
    if labels is None:
        raise GhostifyError(f"{graph} was exported from a model without a {kind.noun} head; export the fine-tuned model "
                            f"for task {preset.name}")
    wanted = kind.num_labels()
    if wanted and labels != wanted:
        raise GhostifyError(f"model {graph} predicts {labels} labels but task {preset.name} has "
                            f"{wanted}; use a model for this task")
    net = GraphModel(graph, target)
    missing = [name for name in GRAPH_OUTPUTS[kind.name] if name not in net.outputs]
    if missing:
        raise GhostifyError(f"{graph} has no {', '.join(missing)} output (outputs: {', '.join(net.outputs)}); export a "
                            f"model with a {kind.noun} head")
    return net
