"""``ghostify eval``: a checkpoint's metrics on a task's split."""

from __future__ import annotations

import os
from typing import Any

from ..checkpoint import load_config
from ..data import load_split, padding_collator, resolve_task, tokenize
from ..errors import GhostifyError
from ..export.runtime import OnnxModel, onnx_path
from ..flatten import flat_settings
from ..heads import classifier_labels
from ..settings import DataSettings
from ..training.loop import evaluate as evaluate_loader
from ..training.loop import multi_process_on_cpu
from .common import check_max_length, check_positive, load_tokenizer
from .training_common import load_classifier, with_inferred_labels

BATCH_SIZE = 64  # evaluation keeps no gradients: larger batches than training's fit


@flat_settings
def evaluate(
    model: str | os.PathLike,
    *,
    data: DataSettings = DataSettings(),
    split: str | None = None,
    batch_size: int = BATCH_SIZE,
) -> dict[str, Any]:
    """``{"task": ..., "split": ..., "metrics": {...}, "samples": n}`` for ``model`` on ``split``
    (default: the task's validation split) of ``data`` (or its fields as flat keywords).

    Example:
        >>> evaluate("out/tuned", data=DataSettings(task="sst2"))["metrics"]["accuracy"]  # doctest: +SKIP
    """
    from accelerate import Accelerator
    from torch.utils.data import DataLoader

    data.validate()
    check_positive(batch_size=batch_size)
    graph = onnx_path(model)  # an export of `ghostify export --format onnx`: run in ONNX Runtime
    directory = graph.parent if graph is not None else model
    check_max_length(data.max_length, directory)
    preset = resolve_task(data.task, text_columns=data.text_columns, label_column=data.label_column, metric=data.metric)
    split = split or preset.validation_split
    rows = load_split(data.dataset, preset, split, max_samples=data.max_samples)
    if not preset.num_labels:
        preset = with_inferred_labels(preset, rows)
        rows.task = preset
    tokenizer = load_tokenizer(directory)
    net = load_onnx_classifier(graph, preset) if graph is not None else \
        load_classifier(model, preset, role="model", need_trained_head=True)
    accelerator = Accelerator(cpu=multi_process_on_cpu())
    try:
        loader = DataLoader(tokenize(rows, tokenizer, max_length=data.max_length), batch_size=batch_size,
                            collate_fn=padding_collator(tokenizer))
        if graph is None:
            net, loader = accelerator.prepare(net, loader)
        else:  # a graph has no parameters to place or wrap
            loader = accelerator.prepare(loader)
        metrics = evaluate_loader(net, loader, accelerator, preset.metric, preset.is_regression)
    finally:
        accelerator.end_training()
    samples = metrics.pop("samples", 0)
    return {"task": preset.name, "dataset": str(data.dataset), "split": split, "metrics": metrics, "samples": samples}


def load_onnx_classifier(graph, preset) -> OnnxModel:
    """An exported classifier's graph, checked against the task like a checkpoint's head is."""
    labels = classifier_labels(load_config(graph.parent))
    if labels is None:
        raise GhostifyError(f"{graph} was exported from a model without a sequence-classification head; "
                            "export the fine-tuned model")
    if labels != preset.num_labels:
        raise GhostifyError(f"model {graph} classifies into {labels} labels but task {preset.name} has "
                            f"{preset.num_labels}; use a model for this task")
    net = OnnxModel(graph)
    if "logits" not in net.outputs:
        raise GhostifyError(f"{graph} has no logits output (outputs: {', '.join(net.outputs)}); export a classifier")
    return net
