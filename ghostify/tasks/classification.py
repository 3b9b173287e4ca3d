"""Sentence(-pair) classification and regression (GLUE): a label or a score per text or text pair."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..data import TaskData, label_kind, tokenize
from ..data.labels import model_label_names
from ..example_loss import per_example_loss
from ..heads import classifier_labels
from ..training.baseline import constant_baseline
from ..training.loop import Evaluation
from ..training.loop import evaluate as classification_metrics
from ..training.losses import prediction_loss, task_loss
from ..training.metrics import main_metric
from .base import TaskKind


class Classification(TaskKind):
    name = "classification"
    head = "sequence-classification"

    #: the class names of the head of the model the batches are for (None: placeholders, or no head)
    model_names: tuple[str, ...] | None = None

    def for_model(self, config):
        self.model_names = model_label_names(config) if classifier_labels(config) else None
        return super().for_model(config)

    def with_data(self, data: TaskData):
        """The label count, metric and class names: a ClassLabel's names, or for a column of names
        those of the model's head when it has them (its ids), else the names sorted."""
        if not data.has_labels or self.preset.is_regression or self.preset.label_names is not None:
            return self.preset
        kind = label_kind(data.rows, self.preset.label_column, dataset=data.dataset)
        names = (self.model_names or kind.names) if kind.strings else kind.names
        num_labels = self.preset.num_labels or (len(names) if kind.strings and names else kind.num_labels)
        metric = self.preset.metric or ("pearson_spearman" if kind.regression else "accuracy")
        self.preset = replace(self.preset, num_labels=num_labels, metric=metric, label_names=names)
        return self.preset

    def encode(self, data: TaskData, tokenizer):
        # with the preset completed from the training data: class names map to their ids
        return tokenize(replace(data, task=self.preset), tokenizer, max_length=self.data.max_length)

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        metric, regression = self.preset.metric, self.preset.is_regression

        def run(model, loader, accelerator):
            return classification_metrics(model, loader, accelerator, metric, regression)

        rows = self.encode(data, tokenizer)

        def baseline():
            return constant_baseline(metric, rows["labels"], regression) if "labels" in rows.column_names else None

        return Evaluation(rows=rows, collate=self.collator(tokenizer), run=run, select=main_metric(metric),
                          baseline=baseline)

    def head_labels(self, config) -> int | None:
        return classifier_labels(config)

    def load(self, source, **kwargs):
        model = super().load(source, **kwargs)
        names, config = self.preset.label_names, model.config
        if names and len(names) == config.num_labels and model_label_names(config) is None:  # name the classes
            config.id2label = dict(enumerate(names))
            config.label2id = {name: i for i, name in enumerate(names)}
        return model

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
