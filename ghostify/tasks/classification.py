"""Sentence(-pair) classification and regression (GLUE): a label or a score per text or text pair.

A text longer than ``--max-length`` is truncated; with ``--chunks mean|max`` (single-text tasks) it
becomes windows of ``--max-length`` tokens overlapping by ``--doc-stride``. Every window is a
training row with its text's label; evaluation runs the model on every window and predicts each text
from the mean or max of its windows' logits (a regression's scores: their mean), so each text is
scored once."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch

from ..data import TaskData, label_kind, tokenize
from ..data.labels import model_label_names
from ..data.loading import DOCUMENT
from ..errors import DataError
from ..example_loss import per_example_loss
from ..heads import classifier_labels
from ..training.baseline import constant_baseline
from ..training.loop import Evaluation
from ..training.loop import evaluate as classification_metrics
from ..training.losses import prediction_loss, task_loss
from ..training.metrics import compute_metrics, main_metric
from .base import TaskKind


class Classification(TaskKind):
    name = "classification"
    head = "sequence-classification"

    #: the class names of the head of the model the batches are for (None: placeholders, or no head)
    model_names: tuple[str, ...] | None = None

    def __init__(self, preset, data, task) -> None:
        super().__init__(preset, data, task)
        if task.chunks is None:
            return
        if len(preset.text_columns) > 1:
            raise DataError(f"--chunks windows one text, but task {preset.name} reads a pair "
                            f"({', '.join(preset.text_columns)}); leave --chunks unset (pairs are truncated)")
        if task.doc_stride >= data.max_length:
            raise DataError(f"--doc-stride {task.doc_stride} must be less than --max-length {data.max_length} "
                            "(windows overlap by that many tokens); e.g. --doc-stride "
                            f"{max(1, data.max_length // 4)}")

    def for_model(self, config):
        self.model_names = model_label_names(config) if classifier_labels(config) else None
        return super().for_model(config)

    def with_data(self, data: TaskData):
        """The label count, metric and class names: a ClassLabel's names, or for a column of names
        those of the model's head when it has them (its ids), else the names sorted."""
        super().with_data(data)
        if not data.has_labels or self.preset.is_regression or self.preset.label_names is not None:
            return self.preset
        kind = label_kind(data.rows, self.preset.label_column, dataset=data.dataset)
        names = (self.model_names or kind.names) if kind.strings else kind.names
        num_labels = self.preset.num_labels or (len(names) if kind.strings and names else kind.num_labels)
        metric = self.preset.metric or ("pearson_spearman" if kind.regression else "accuracy")
        self.preset = replace(self.preset, num_labels=num_labels, metric=metric, label_names=names)
        return self.preset

    def encode(self, data: TaskData, tokenizer):
        return self._encode(data, tokenizer, documents=False)

    def _encode(self, data: TaskData, tokenizer, *, documents: bool):
        """The rows, or with --chunks their windows (``documents``: with the text each is from)."""
        # with the preset completed from the training data: class names map to their ids
        data = replace(data, task=self.preset)
        return tokenize(data, tokenizer, max_length=self.data.max_length, stride=self._stride(tokenizer),
                        documents=documents and self.task.chunks is not None)

    def _stride(self, tokenizer) -> int | None:
        """--doc-stride when long texts are windowed (None: truncated), checked against the room a
        window leaves for text once the tokenizer's special tokens are in."""
        chunks, stride = self.task.chunks, self.task.doc_stride
        if chunks is None:
            return None
        if chunks == "max" and self.preset.is_regression:
            raise DataError(f"--chunks max pools class logits, but task {self.preset.name} is a regression (one "
                            "score per text): use --chunks mean (the mean of its windows' scores)")
        if not getattr(tokenizer, "is_fast", False):
            raise DataError(f"--chunks needs a fast tokenizer (its overflowing windows), got {type(tokenizer).__name__}; "
                            "leave --chunks unset to truncate")
        room = self.data.max_length - tokenizer.num_special_tokens_to_add(pair=False)
        if stride >= room:
            raise DataError(f"--doc-stride {stride} must be less than the {room} text tokens of a window "
                            f"(--max-length {self.data.max_length} less the special tokens); lower --doc-stride")
        return stride

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        metric, regression, chunks = self.preset.metric, self.preset.is_regression, self.task.chunks
        rows = self._encode(data, tokenizer, documents=True)

        def run(model, loader, accelerator):
            if chunks is None:
                return classification_metrics(model, loader, accelerator, metric, regression)
            return document_metrics(model, loader, accelerator, metric, regression, chunks)

        def baseline():
            if "labels" not in rows.column_names:
                return None
            labels = rows["labels"]
            if chunks is not None:  # one label per text, not per window
                labels = list({d: label for d, label in zip(rows[DOCUMENT], labels)}.values())
            return constant_baseline(metric, labels, regression)

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


def pool_windows(logits: torch.Tensor, documents: torch.Tensor, pooling: str) -> torch.Tensor:
    """One row of logits per text from its windows' rows: their mean or their max (``documents``:
    each row's text, numbered 0..n-1, every text with at least one window)."""
    count = int(documents.max()) + 1 if documents.numel() else 0
    index = documents.long().unsqueeze(-1).expand_as(logits)
    pooled = logits.new_zeros(count, logits.shape[-1])
    return pooled.scatter_reduce(0, index, logits, reduce="mean" if pooling == "mean" else "amax", include_self=False)


@torch.no_grad()
def document_logits(model, loader, accelerator, pooling: str) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Over windowed rows (with ``document`` and ``labels``): the pooled logits of each text
    (``pool_windows``), each text's label, and how many windows the model ran on."""
    was_training = model.training
    model.eval()
    logits, documents, labels = [], [], []
    for batch in loader:
        batch = dict(batch)
        document, target = batch.pop(DOCUMENT), batch.pop("labels")
        out = model(**batch).logits.float()
        out, document, target = accelerator.gather_for_metrics((out, document, target))
        logits.append(out.cpu())
        documents.append(document.cpu().long())
        labels.append(target.cpu())
    model.train(was_training)
    if not logits:
        return torch.zeros(0, 0), torch.zeros(0), 0
    windows, targets = torch.cat(documents), torch.cat(labels)
    pooled = pool_windows(torch.cat(logits), windows, pooling)
    # every window of a text carries the text's label
    return pooled, targets.new_zeros(len(pooled)).scatter(0, windows, targets), len(windows)


def document_metrics(model, loader, accelerator, metric: str, regression: bool, pooling: str) -> dict[str, float]:
    """Classification metrics per text over windowed rows, each text scored once from its pooled
    logits; ``samples``: the texts, ``windows``: the rows the model ran on."""
    pooled, labels, windows = document_logits(model, loader, accelerator, pooling)
    if not windows:
        return {}
    predictions = pooled.squeeze(-1) if regression else pooled.argmax(-1)
    return {**compute_metrics(metric, predictions, labels), "samples": len(pooled), "windows": windows}


def sample_labels(logits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Labels drawn from the model's own predictive distribution (``[..., classes]`` → ``[...]``):
    the derivative of the loss against them measures the Fisher information (see
    ``ghostify.methods.pruning.importance``)."""
    probs = logits.detach().softmax(-1)
    flat = probs.reshape(-1, probs.shape[-1]).cpu()
    return torch.multinomial(flat, 1, generator=generator).reshape(probs.shape[:-1]).to(logits.device)
