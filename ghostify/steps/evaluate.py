"""``ghostify eval``: a checkpoint's metrics on a task's split."""

from __future__ import annotations

import os
from typing import Any

from ..checkpoint import load_config
from ..data import DEFAULT_DATASET, load_split, padding_collator, resolve_task, tokenize
from ..errors import GhostifyError
from ..export.runtime import OnnxModel, onnx_path
from ..training.loop import evaluate as evaluate_loader
from ..training.loop import multi_process_on_cpu
from .common import check_max_length, check_positive, load_tokenizer
from .training_common import _with_inferred_labels, load_classifier


def evaluate(
    model: str | os.PathLike,
    *,
    task: str | None = None,
    dataset: str = DEFAULT_DATASET,
    split: str | None = None,
    text_columns: tuple[str, ...] | None = None,
    label_column: str | None = None,
    metric: str | None = None,
    max_length: int = 128,
    max_samples: int | None = None,
    batch_size: int = 64,
) -> dict[str, Any]:
    """``{"task": ..., "split": ..., "metrics": {...}, "samples": n}`` for ``model`` on ``split``
    (default: the task's validation split).

    Example:
        >>> evaluate("out/tuned", task="sst2")["metrics"]["accuracy"]  # doctest: +SKIP
    """
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    check_positive(max_samples=max_samples, batch_size=batch_size)
    graph = onnx_path(model)  # an export of `ghostify export --format onnx`: run in ONNX Runtime
    directory = graph.parent if graph is not None else model
    check_max_length(max_length, directory)
    preset = resolve_task(task, text_columns=text_columns, label_column=label_column, metric=metric)
    split = split or preset.validation_split
    data = load_split(dataset, preset, split, max_samples=max_samples)
    if not preset.num_labels:
        preset = _with_inferred_labels(preset, data)
        data.task = preset
    tokenizer = load_tokenizer(directory)
    net = load_onnx_classifier(graph, preset) if graph is not None else \
        load_classifier(model, preset, role="model", need_trained_head=True)
    accelerator = Accelerator(cpu=multi_process_on_cpu())
    try:
        loader = DataLoader(tokenize(data, tokenizer, max_length=max_length), batch_size=batch_size,
                            collate_fn=padding_collator(tokenizer))
        if graph is None:
            net, loader = accelerator.prepare(net, loader)
        else:  # a graph has no parameters to place or wrap
            loader = accelerator.prepare(loader)
        metrics = evaluate_loader(net, loader, accelerator, preset.metric, preset.is_regression)
    finally:
        accelerator.end_training()
    samples = metrics.pop("samples", 0)
    return {"task": preset.name, "dataset": str(dataset), "split": split, "metrics": metrics, "samples": samples}


def load_onnx_classifier(graph, preset) -> OnnxModel:
    """An exported classifier's graph, checked against the task like a checkpoint's head is."""
    config = load_config(graph.parent)
    if not any(a.endswith("ForSequenceClassification") for a in getattr(config, "architectures", None) or []):
        raise GhostifyError(f"{graph} was exported from a model without a sequence-classification head; "
                            "export the fine-tuned model")
    if config.num_labels != preset.num_labels:
        raise GhostifyError(f"model {graph} classifies into {config.num_labels} labels but task {preset.name} has "
                            f"{preset.num_labels}; use a model for this task")
    net = OnnxModel(graph)
    if "logits" not in net.outputs:
        raise GhostifyError(f"{graph} has no logits output (outputs: {', '.join(net.outputs)}); export a classifier")
    return net
