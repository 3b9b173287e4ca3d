"""Sentence embeddings: a sentence-transformers model's pooled (and normalised) encoder output.

The pooling is the original model's (``modules.json``: mean, CLS or max, then normalisation),
read from the checkpoint or from the model its history started from. The task reads unlabeled text
(any text column of any dataset, or a plain text file, one sentence per line):

* ``importance`` is label-free: each example's loss is ``½‖e − (e₀ + ε)‖²`` for its own embedding
  ``e₀`` (detached) and Gaussian noise ``ε``, so ``E|dℓ/dg| ∝ E|εᵀ de/dg|``: a random projection of
  how much the gate moves the embedding (the Fisher information of a unit Gaussian around it, as
  classification samples labels from the model's own distribution);
* ``distill``'s prediction-layer term (``--logit-weight``) compares pooled embeddings: ``1 − cos``,
  MSE, or both (``--embedding-loss``);
* ``eval`` on a pair dataset (two text columns): Spearman correlation of the cosine similarities
  with the label column (STS-B), and retrieval: each first text of a positive pair retrieves its
  second among all second texts (recall@10, MRR@10). A pair is positive when its label is at least
  80% of the largest label (STS-B: 4 of 5; MRPC: 1); without labels, every pair is."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch.nn import functional as F

from ..checkpoint import load_config, load_model, read_record
from ..data import TaskData
from ..errors import DataError, GhostifyError
from ..pooling import Pooling, sentence_transformers_source
from ..training.loop import Evaluation
from ..training.metrics import pearson, spearman
from .base import TaskKind

TOP_K = 10
POSITIVE = 0.8  # of the largest label: a positive pair for retrieval


def pooling_of(source) -> Pooling:
    """The pooling of a sentence-transformers model, or of the one a checkpoint's history started from."""
    path = Path(source)
    origin = sentence_transformers_source(path, read_record(load_config(source))) if path.is_dir() else None
    pooling = Pooling.read(origin) if origin is not None else None
    if pooling is None:
        raise GhostifyError(f"{source} is not a sentence-transformers model (no modules.json with a Pooling module "
                            "in it or in the model its history started from); the embeddings task needs one")
    return pooling


class Embeddings(TaskKind):
    name = "embeddings"
    head = "base"
    needs_labels = False
    sentence_embedding = True
    targets = ("labels",)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        #: the pooling of the models this task reads, and the first of them (as messages name it): their
        #: embeddings are compared with each other, so every one must pool alike (the original model's way)
        self._pooling: tuple[Pooling, str] | None = None

    @property
    def pooling(self) -> Pooling:
        """The pooling of every model this task reads (:meth:`reads_outputs_of`, :meth:`load`)."""
        if self._pooling is None:
            raise GhostifyError("the embeddings task pools a model's output as its sentence-transformers model "
                                "does, and no model was read yet; load it through the task first")
        return self._pooling[0]

    def reads_outputs_of(self, source, *, role: str = "model") -> None:
        """Read the pooling of the model at ``source`` (``role``: what messages call it), which must be the pooling of
        every other model this task read: one model's embeddings are compared with another's."""
        pooling = pooling_of(source)
        if self._pooling is None:
            self._pooling = (pooling, f"the {role} {source}")
        elif self._pooling[0] != pooling:
            first, named = self._pooling
            raise GhostifyError(f"the {role} {source} pools differently ({pooling}) from {named} ({first}); compare "
                                "models of the same sentence-transformers model")

    def encode(self, data: TaskData, tokenizer):
        """Every text of every text column, as one sentence each."""
        columns, max_length = self.preset.text_columns, self.data.max_length

        def encode(batch):
            texts = [text for column in columns for text in batch[column]]
            return tokenizer(texts, truncation=True, max_length=max_length)

        return data.rows.map(encode, batched=True, remove_columns=data.rows.column_names)

    def evaluation(self, data: TaskData, tokenizer) -> Evaluation:
        columns = self.preset.text_columns
        if len(columns) != 2:
            raise DataError(f"evaluating embeddings needs pairs: two --text-columns (e.g. sentence1,sentence2), "
                            f"got {', '.join(columns) or 'none'}")
        first, second = data.rows[columns[0]], data.rows[columns[1]]
        labels = torch.tensor([float(x) for x in data.rows[self.preset.label_column]]) if data.has_labels else None
        texts = [*first, *second]
        rows = tokenizer_rows(texts, tokenizer, self.data.max_length)

        def run(model, loader, accelerator):
            embeddings = embed(model, loader, accelerator, self.embedding)
            a, b = embeddings[: len(first)], embeddings[len(first):]
            cosine = F.cosine_similarity(a, b, dim=-1)
            metrics = {}
            if labels is not None:
                metrics["spearman"] = spearman(cosine, labels)
                metrics["pearson"] = pearson(cosine, labels)
            positive = labels >= POSITIVE * float(labels.max()) if labels is not None else torch.ones(len(first), dtype=torch.bool)
            metrics.update(retrieval(a[positive], b, torch.nonzero(positive).flatten()))
            metrics["samples"] = len(first)
            return metrics

        return Evaluation(rows=rows, collate=self.collator(tokenizer), run=run,
                          select="spearman" if labels is not None else "mrr@10")

    def head_labels(self, config) -> int | None:
        return 0  # the bare encoder: no head to train or check

    def load(self, source, *, role, need_trained_head=False, dropout=None, attention_dropout=None):
        self.reads_outputs_of(source, role=role)
        return load_model(source, head="base", dropout=dropout, attention_dropout=attention_dropout)

    def embedding(self, output, batch) -> torch.Tensor:
        """The pooled embeddings of a model's ``output`` (every model of the task pools alike: :attr:`pooling`); an
        exported graph's ``sentence_embedding``, which it pools inside itself as its model did."""
        if hasattr(output, "sentence_embedding"):
            return output.sentence_embedding.float()
        hidden = output.last_hidden_state if hasattr(output, "last_hidden_state") else output[0]
        return self.pooling(hidden.float(), batch["attention_mask"])

    def per_example_loss(self, output, batch, *, label_free, generator):
        e = self.embedding(output, batch)
        noise = torch.randn(e.shape, generator=generator).to(e.device)
        return 0.5 * (e - (e.detach() + noise)).square().sum(-1)

    teacher_outputs = {"last_hidden_state": True}
    #: the pooled embedding against the teacher's, beside the hidden states: the task's own loss (it has no labels:
    #: the last distillation is the result)
    compress_distill = {"logit_weight": 1.0}

    def teacher_loss(self, student, teacher, batch, temperature):
        s, t = self.embedding(student, batch), self.embedding(teacher, batch)
        loss = s.new_zeros(())
        if "cosine" in self.task.embedding_loss:
            loss = loss + (1 - F.cosine_similarity(s, t, dim=-1)).mean()
        if "mse" in self.task.embedding_loss:
            loss = loss + F.mse_loss(s, t)
        return loss

    def evaluates_while_training(self) -> bool:
        return len(self.preset.text_columns) == 2  # pairs with scores: the best epoch by Spearman

    def can_finetune(self) -> str | None:
        return ("the embeddings task has no labels to fine-tune on; distill the compressed model from the original "
                "(ghostify distill --task embeddings --logit-weight 1)")


def tokenizer_rows(texts: list[str], tokenizer, max_length: int):
    import datasets

    encoded = tokenizer(texts, truncation=True, max_length=max_length)
    return datasets.Dataset.from_dict(dict(encoded))


def embed(model, loader, accelerator, embedding: Callable[[Any, dict], torch.Tensor]) -> torch.Tensor:
    """The embeddings of every row of ``loader``, in order (``embedding(output, batch)``: the task's pooling)."""
    out = []
    was_training = model.training
    model.eval()
    with torch.no_grad():
        for batch in loader:
            output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                           **({"token_type_ids": batch["token_type_ids"]} if "token_type_ids" in batch else {}))
            out.append(accelerator.gather_for_metrics(embedding(output, batch)).cpu())
    model.train(was_training)
    return torch.cat(out)


def retrieval(queries: torch.Tensor, corpus: torch.Tensor, relevant: torch.Tensor, k: int = TOP_K) -> dict[str, float]:
    """Recall@k and MRR@k of queries whose relevant document is ``corpus[relevant[i]]`` (cosine)."""
    if len(queries) == 0:
        return {f"recall@{k}": float("nan"), f"mrr@{k}": float("nan")}
    scores = F.normalize(queries, dim=-1) @ F.normalize(corpus, dim=-1).T
    own = scores.gather(1, relevant[:, None])
    rank = (scores > own).sum(1)  # documents scored above the relevant one (ties count for it)
    hit = rank < k
    return {f"recall@{k}": float(hit.double().mean()),
            f"mrr@{k}": float(torch.where(hit, 1.0 / (rank.double() + 1), torch.zeros_like(rank, dtype=torch.double)).mean())}
