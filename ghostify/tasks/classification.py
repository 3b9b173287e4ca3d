"""Sentence(-pair) classification and regression (GLUE): a label or a score per text or text pair."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..data import TaskData, label_kind, tokenize
from ..heads import classifier_labels
from ..methods.pruning.importance import per_example_loss
from ..training.loop import Evaluation
from ..training.loop import evaluate as classification_metrics
from ..training.losses import prediction_loss, task_loss
from ..training.metrics import main_metric
from .base import TaskKind


class Classification(TaskKind):
    name = "classification"
    head = "sequence-classification"

    def with_data(self, data: TaskData):
        if self.preset.num_labels or not data.has_labels:
            return self.preset
        kind = label_kind(data.rows, self.preset.label_column, dataset=data.dataset)
        metric = self.preset.metric or ("pearson_spearman" if kind.regression else "accuracy")
        self.preset = replace(self.preset, num_labels=kind.num_labels, metric=metric)
        return self.preset

    def encode(self, data: TaskData, tokenizer):
        return tokenize(data, tokenizer, max_length=self.data.max_length)

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        metric, regression = self.preset.metric, self.preset.is_regression

        def run(model, loader, accelerator):
            return classification_metrics(model, loader, accelerator, metric, regression)

        return Evaluation(rows=self.encode(data, tokenizer), collate=self.collator(tokenizer), run=run,
                          select=main_metric(metric))

    def head_labels(self, config) -> int | None:
        return classifier_labels(config)

    def head_options(self) -> dict[str, Any]:
        if not self.preset.num_labels:  # unlabeled data: the checkpoint's own head (or its config's count)
            return {}
        regression = self.preset.is_regression
        return {"num_labels": self.preset.num_labels,
                "problem_type": "regression" if regression else "single_label_classification"}

    def per_example_loss(self, output, batch, *, label_free, generator):
        labels = None if label_free else batch["labels"]
        return per_example_loss(output.logits, labels, regression=self.preset.is_regression, generator=generator)

    def task_loss(self, output, batch):
        return task_loss(output.logits, batch["labels"], self.preset.is_regression)

    def teacher_loss(self, student, teacher, batch, temperature):
        return prediction_loss(student.logits, teacher.logits, temperature, self.preset.is_regression)


def sample_labels(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Labels drawn from the model's own predictive distribution (``[..., classes]`` → ``[...]``):
    the derivative of the loss against them measures the Fisher information (see
    ``ghostify.methods.pruning.importance``)."""
    probs = logits.detach().softmax(-1)
    flat = probs.reshape(-1, probs.shape[-1]).cpu()
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1]).to(logits.device)
