"""``--label-with``: a fine-tuned classifier labels the new examples (argmax; the value for a
regression) instead of their original's label being copied."""

from __future__ import annotations

from typing import Any

import torch

from ..checkpoint import load_config
from ..errors import CheckpointError, GhostifyError
from ..heads import architectures, classifier_labels
from .output import text_of


def require_classifier(teacher):
    config = load_config(teacher)
    if classifier_labels(config) is None:
        names = architectures(config)
        what = " / ".join(names) if names else config.model_type
        raise CheckpointError(
            f"--label-with {teacher} is a {what} checkpoint without a trained classification head; "
            "pass a model fine-tuned on the task"
        )
    return config


def check_teacher_labels(teacher_source, got: int, preset, label_feature, regression: bool) -> None:
    import datasets

    expected = preset.num_labels or None
    if expected is None and isinstance(label_feature, datasets.ClassLabel):
        expected = label_feature.num_classes
    if expected is None and regression:
        expected = 1
    if expected is not None and got != expected:
        kind = "a regression (1 output)" if expected == 1 else f"{expected} labels"
        raise GhostifyError(
            f"--label-with {teacher_source} predicts {got} label(s) but task {preset.name} has {kind}; "
            "label with a model fine-tuned on this task"
        )


@torch.inference_mode()
def predict_labels(model, tokenizer, rows, text_columns, max_length: int, batch_size: int, device) -> list:
    """The teacher's label for each row: the argmax class, or the value for a regression."""
    order = sorted(range(len(rows)), key=lambda i: (-sum(len(text_of(rows[i][c])) for c in text_columns), i))
    predictions: list[Any] = [None] * len(rows)
    for begin in range(0, len(order), batch_size):
        batch = order[begin : begin + batch_size]
        texts = [[text_of(rows[i][c]) for i in batch] for c in text_columns]
        encoded = tokenizer(*texts, truncation=True, max_length=max_length, padding=True, return_tensors="pt")
        logits = model(**{k: v.to(device) for k, v in encoded.items()}).logits.float().cpu()
        if model.config.num_labels == 1:
            values = logits[:, 0].tolist()
        else:
            values = logits.argmax(dim=-1).tolist()
        for i, value in zip(batch, values):
            predictions[i] = value
    return predictions
