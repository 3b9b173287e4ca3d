"""What a kind of task does, in one shape: how its rows are encoded, which head reads them, its
per-example loss (importance), its task loss (finetune), its teacher loss (distill's prediction
layer, finetune with a teacher) and its evaluation. One subclass per kind; the steps call these
and nothing task-specific."""

from __future__ import annotations

import os
import warnings
from abc import ABC, abstractmethod
from dataclasses import replace
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from ..checkpoint import load_config, load_model
from ..data import TaskData, TaskPreset, padding_collator
from ..errors import GhostifyError
from ..settings import DataSettings, TaskSettings
from ..training.loop import Evaluation


class TaskKind(ABC):
    """A kind of task (see ``ghostify.data.tasks``); instances are made per command by
    ``ghostify.tasks.kind_for`` with the settings they read."""

    name: str = ""
    #: the head the models are loaded with (a ``checkpoint.HEAD_CLASSES`` key)
    head: str = "sequence-classification"
    #: what messages call the head ("no trained classification head")
    noun: str = "classification"
    #: whether the kind's losses read labels (the embeddings task's never do)
    needs_labels: bool = True
    #: whether the model's output is a sentence embedding: as wide as the hidden size, no labelled fine-tune after
    #: distillation, shipped in the sentence-transformers layout too (``compress`` reads it)
    sentence_embedding: bool = False

    def __init__(self, preset: TaskPreset, data: DataSettings, task: TaskSettings) -> None:
        self.preset, self.data, self.task = preset, data, task

    # ----- data ------------------------------------------------------------------------------
    def with_data(self, data: TaskData) -> TaskPreset:
        """The preset completed from the training data (label count, metric, tag names; the text column
        ``load_split`` found in a data file when none was named)."""
        if not self.preset.text_columns and data.task.text_columns:
            self.preset = replace(self.preset, text_columns=data.task.text_columns)
        return self.preset

    @abstractmethod
    def encode(self, data: TaskData, tokenizer) -> Any:
        """Training rows: token ids and the targets the losses read, unpadded."""

    #: the model's token-type vocabulary (``type_vocab_size``; None: the family has none)
    token_types: int | None = None

    def for_model(self, config) -> TaskKind:
        """Read what the batches must match in the model that will read them."""
        self.token_types = getattr(config, "type_vocab_size", None)
        return self

    def collator(self, tokenizer) -> Callable:
        """Batches padded as the kind needs; without segment ids when the model has one token type
        (a pair's second segment would index past its token-type embeddings)."""
        collate = self._collate(tokenizer)
        if self.token_types is None or self.token_types >= 2:
            return collate

        def without_segments(rows):
            batch = collate(rows)
            batch.pop("token_type_ids", None)
            return batch

        return without_segments

    def _collate(self, tokenizer) -> Callable:
        return padding_collator(tokenizer)

    @abstractmethod
    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        """How a model is scored on ``data`` (the validation split)."""

    # ----- models ------------------------------------------------------------------------------
    @abstractmethod
    def head_labels(self, config) -> int | None:
        """The label count of the checkpoint's head of this kind; None when it has none."""

    def num_labels(self) -> int | None:
        return self.preset.num_labels

    def load(self, source: str | os.PathLike, *, role: str, need_trained_head: bool,
             dropout: float | None = None, attention_dropout: float | None = None) -> nn.Module:
        """``source`` with this kind's head (fresh when it has none), its dropout replaced where given."""
        labels, wanted = self.head_labels(load_config(source)), self.num_labels()
        if labels is not None and wanted and labels != wanted:
            raise GhostifyError(f"{role} {source} predicts {labels} labels but task {self.preset.name} has "
                                f"{wanted}; use a {role} for this task")
        if need_trained_head and labels is None:
            raise GhostifyError(f"{role} {source} has no trained {self.noun} head; fine-tune it first "
                                "(ghostify finetune) or set the prediction-layer weight to 0")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # a fresh head is expected here and said once below
            model = load_model(source, head=self.head, dropout=dropout, attention_dropout=attention_dropout,
                               **self.head_options())
        if labels is None and role == "model":
            warnings.warn(f"{source} has no {self.noun} head yet: a new one is trained from scratch", stacklevel=3)
        return model

    def reads_outputs_of(self, source: str | os.PathLike, *, role: str = "model") -> None:
        """Read what this kind's losses need of the model at ``source`` besides its outputs, for a model loaded
        elsewhere (prune's mask tuning compares a model it loaded and pruned with its unpruned copy): nothing but
        the embeddings task's pooling. :meth:`load` reads it too."""

    def head_options(self) -> dict[str, Any]:
        """Extra ``load_model`` options for the head (label count, problem type)."""
        return {"num_labels": self.num_labels()} if self.num_labels() else {}

    # ----- losses ------------------------------------------------------------------------------
    def outputs(self, model: nn.Module, batch: dict[str, torch.Tensor], **kwargs) -> Any:
        """The model's forward on the inputs of ``batch`` (targets removed)."""
        return model(**self.inputs(batch), **kwargs)

    def inputs(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: v for k, v in batch.items() if k not in self.targets}

    #: the batch keys that are targets, not model inputs
    targets: tuple[str, ...] = ("labels",)
    #: the fields of a model's output that :meth:`teacher_loss` reads, each with whether it is per token (what
    #: the teacher store keeps of a teacher's output: ``ghostify.training.teacher_store``)
    teacher_outputs: dict[str, bool] = {"logits": False}
    #: the distillation weights ``compress`` trains this kind with, where they differ from ``distill``'s defaults
    #: (GhostBERT's hidden-state losses: the embedding output, every attention and FFN block's output)
    compress_distill: dict[str, float] = {}
    #: what a ``compress`` time budget trains this kind with, where it differs from its budget's
    #: (``ghostify.settings.Budget`` fields: learning rates, masked copies)
    compress_timed: dict[str, float | int] = {}

    def example_tokens(self) -> int | None:
        """The tokens every training example fills whatever its text's length (a window of a longer text), which
        a time budget sizes its scoring by; None: about as many as its text has."""
        return None

    @abstractmethod
    def per_example_loss(self, output: Any, batch: dict[str, torch.Tensor], *, label_free: bool,
                         generator: torch.Generator) -> torch.Tensor:
        """One loss per example (importance: |d loss_i / d gate|); ``label_free``: against the
        model's own predictions, drawn with ``generator``."""

    def task_loss(self, output: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The fine-tuning loss; a kind that cannot be fine-tuned says why (``can_finetune``)."""
        raise GhostifyError(self.can_finetune() or f"the {self.name} task has no fine-tuning loss")

    @abstractmethod
    def teacher_loss(self, student: Any, teacher: Any, batch: dict[str, torch.Tensor], temperature: float) -> torch.Tensor:
        """The student's loss against the teacher's outputs (distill's prediction layer)."""

    def augmentation_refusal(self) -> str | None:
        """Why TinyBERT's word replacement cannot augment this kind's data (None: it can)."""
        return None

    def evaluates_while_training(self) -> bool:
        """Whether the training data's validation split can score this kind (pick the best epoch)."""
        return True

    def can_finetune(self) -> str | None:
        """Why ``finetune`` cannot train this kind (None: it can)."""
        return None
