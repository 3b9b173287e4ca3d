"""Token classification (NER, POS, chunking): a tag per word.

Words are split into sub-words with the tokenizer's word ids; the tag goes to the first sub-word of
each word and the other sub-words are ignored by the loss (``--label-all-subwords`` labels them
too, a ``B-`` tag continuing as its ``I-`` tag), as Hugging Face's ``run_ner`` does. Metrics read
the first sub-word of each word only: entity precision, recall and F1 as ``seqeval`` computes them
(lenient conlleval mode, or ``--tag-scheme`` for its strict mode), and token accuracy."""

from __future__ import annotations

from dataclasses import replace

import torch
from torch.nn import functional as F

from ..data import TaskData
from ..data.labels import model_label_names
from ..data.token_labels import (
    IGNORE,
    continuation_labels,
    decode,
    entity_metrics,
    label_names,
    needs_prefix_space,
    tag_ids,
    tokenize_words,
)
from ..errors import DataError
from ..heads import has_head
from ..training.loop import Evaluation
from .base import TaskKind
from .classification import sample_labels

HEAD = "ForTokenClassification"


class TokenClassification(TaskKind):
    name = "tokens"
    head = "token-classification"
    noun = "token-classification"
    names: list[str] | None = None

    def for_model(self, config):
        # a trained head's tag names: the rows a command reads (a sample, a validation split) may lack a tag, and
        # names taken from them would be fewer or in another order than the head's
        names = model_label_names(config) if self.head_labels(config) is not None else None
        if names is not None and self.names is None:
            self.names = list(names)
            self.preset = replace(self.preset, num_labels=len(names))
        return super().for_model(config)

    def with_data(self, data: TaskData):
        if self.names is None and data.has_labels:
            self.names = label_names(data.rows, self.preset.tags_column, dataset=data.dataset)
            self.preset = replace(self.preset, num_labels=len(self.names))
        return self.preset

    def encode(self, data: TaskData, tokenizer, *, label_all_subwords: bool | None = None):
        names = self.names or []
        all_subwords = self.task.label_all_subwords if label_all_subwords is None else label_all_subwords
        continuation = continuation_labels(names) if all_subwords else None
        preset = self.preset
        if not data.has_labels:  # label-free importance, distillation: the words alone
            rows = data.rows.map(lambda batch: {preset.tags_column: [[0] * len(w) for w in batch[preset.tokens_column]]},
                                 batched=True)
        else:
            rows = data.rows

        tokenizer = words_tokenizer(tokenizer)

        def encode(batch, indices):
            tags = batch[preset.tags_column]
            if any(isinstance(tag, str) for row in tags for tag in row):  # a column of tag strings
                batch = {**batch, preset.tags_column: tag_ids(tags, names)}
            elif data.has_labels:
                check_tag_ids(tags, indices, names, column=preset.tags_column,
                              where=f"split {data.split!r} of {data.dataset}")
            return tokenize_words(batch, tokenizer, tokens_column=preset.tokens_column, tags_column=preset.tags_column,
                                  max_length=self.data.max_length, label_all_subwords=all_subwords,
                                  continuation=continuation)

        encoded = rows.map(encode, batched=True, with_indices=True, remove_columns=rows.column_names)
        return encoded if data.has_labels else encoded.remove_columns("labels")

    def _collate(self, tokenizer):
        from transformers import DataCollatorForTokenClassification

        return DataCollatorForTokenClassification(tokenizer, label_pad_token_id=IGNORE, return_tensors="pt")

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        names, scheme = self.names, self.task.tag_scheme
        if names is None:
            raise DataError(f"split {data.split} of {data.dataset} has no tags in column {self.preset.tags_column!r}; "
                            "set --tags-column")

        def run(model, loader, accelerator):
            predictions, labels = [], []
            model_was_training = model.training
            model.eval()
            with torch.no_grad():
                for batch in loader:
                    target = batch["labels"]
                    logits = model(**self.inputs(batch)).logits
                    prediction = logits.argmax(-1)
                    prediction = accelerator.pad_across_processes(prediction, dim=1, pad_index=IGNORE)
                    target = accelerator.pad_across_processes(target, dim=1, pad_index=IGNORE)
                    prediction, target = accelerator.gather_for_metrics((prediction, target))
                    predictions += prediction.cpu().tolist()
                    labels += target.cpu().tolist()
            model.train(model_was_training)
            tags, gold = decode(predictions, labels, names)
            return {**entity_metrics(tags, gold, scheme=scheme), "samples": len(gold)}

        # metrics read first sub-words only, whatever the training labelled
        return Evaluation(rows=self.encode(data, tokenizer, label_all_subwords=False), collate=self.collator(tokenizer),
                          run=run, select="f1")

    def augmentation_refusal(self) -> str | None:
        return "replacing words would leave their tags on other words (entities are words); augment sentence data"

    def head_labels(self, config) -> int | None:
        return config.num_labels if has_head(config, HEAD) else None

    def load(self, source, **kwargs):
        model = super().load(source, **kwargs)
        if self.names and self.head_labels(model.config) is None:  # a new head: name its labels
            model.config.id2label = dict(enumerate(self.names))
            model.config.label2id = {name: i for i, name in enumerate(self.names)}
        return model

    def per_example_loss(self, output, batch, *, label_free, generator):
        logits = output.logits.float()
        if label_free:
            labels = sample_labels(logits, generator).masked_fill(batch["attention_mask"] == 0, IGNORE)
        else:
            labels = batch["labels"]
        losses = F.cross_entropy(logits.transpose(1, 2), labels, ignore_index=IGNORE, reduction="none")
        counted = (labels != IGNORE).sum(1).clamp_min(1)
        return losses.sum(1) / counted  # mean over the example's labelled tokens

    def task_loss(self, output, batch):
        logits = output.logits.float()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), batch["labels"].reshape(-1), ignore_index=IGNORE)

    teacher_outputs = {"logits": True}

    def teacher_loss(self, student, teacher, batch, temperature):
        """Soft cross-entropy per real token, averaged over them."""
        mask = batch["attention_mask"].bool()
        targets = F.softmax(teacher.logits.float()[mask] / temperature, dim=-1)
        return -(targets * F.log_softmax(student.logits.float()[mask] / temperature, dim=-1)).sum(-1).mean()


def check_tag_ids(tags: list[list[int]], indices: list[int], names: list[str], *, column: str, where: str) -> None:
    """Every tag id names one of ``names`` (the training split's tags): an id beyond them would
    index past the head's outputs. ``indices``: the rows' positions, for the message."""
    for row, row_tags in zip(indices, tags):
        for tag in row_tags:
            if isinstance(tag, int) and not isinstance(tag, bool) and tag != IGNORE and not 0 <= tag < len(names):
                raise DataError(
                    f"tag {tag} in row {row} of column {column!r} of {where} is not one of the {len(names)} tags "
                    f"(ids 0-{len(names) - 1}: {', '.join(names)}); give every split the same tags, e.g. a "
                    "Sequence(ClassLabel(names=[...])) column that names them all"
                )


def words_tokenizer(tokenizer):
    """``tokenizer`` as pre-split words need it: a byte-level BPE one (RoBERTa family) reloaded with
    ``add_prefix_space=True``, so every word keeps its leading space."""
    if not needs_prefix_space(tokenizer):
        return tokenizer
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer.name_or_path, add_prefix_space=True)
