"""Factorised word embeddings (ALBERT, Lan et al. 2020): the V x H embedding matrix W becomes
A (V x E) · B (E x H), initialised from W's truncated SVD, the best rank-E approximation
(Eckart–Young), so a pretrained model keeps working before any training.

The tied masked-LM decoder (``get_output_embeddings``) computes ``logits = (h · Bᵀ) · Aᵀ + bias``
with the SAME parameters (it holds the embedding module, not a copy), and the tie that
transformers would re-impose (``decoder.weight = word_embeddings.weight`` in ``tie_weights()``) is
removed from the model's tied-weights mapping, so nothing undoes it. Families with a smaller
embedding width (ALBERT, ELECTRA: V x E0) factorise that matrix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from .errors import CheckpointError, GhostifyError

EMBEDDINGS_RECORD_FORMAT = 1


class FactorizedEmbedding(nn.Module):
    """``embedding(ids) = A[ids] · B``: ``factor`` A is V x E, ``projection`` B is E x H.

    ``padding_idx`` keeps nn.Embedding's meaning: its row of A gets no gradient, so the padding
    token's embedding stays what it was. ``weight`` gives the full V x H product for code that
    reads an embedding matrix (DeBERTa's MLM head, say); it is computed, not stored.
    """

    def __init__(self, num_embeddings: int, rank: int, embedding_dim: int, padding_idx: int | None = None,
                 *, device=None, dtype=None) -> None:
        super().__init__()
        self.num_embeddings, self.rank, self.embedding_dim = num_embeddings, rank, embedding_dim
        self.padding_idx = padding_idx
        self.factor = nn.Parameter(torch.zeros(num_embeddings, rank, device=device, dtype=dtype))
        self.projection = nn.Parameter(torch.zeros(rank, embedding_dim, device=device, dtype=dtype))

    @property
    def weight(self) -> torch.Tensor:
        return self.factor @ self.projection

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return F.embedding(input_ids, self.factor, self.padding_idx) @ self.projection

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, rank={self.rank}, {self.embedding_dim}{pad}"


class FactorizedDecoder(nn.Module):
    """The tied output layer of a factorised embedding: ``(h · Bᵀ) · Aᵀ + bias``.

    It reads the embedding's factors through a plain reference (not a submodule), so they are
    stored and counted once; only ``bias`` is its own parameter."""

    def __init__(self, embedding: FactorizedEmbedding, bias: nn.Parameter | None) -> None:
        super().__init__()
        object.__setattr__(self, "embedding", embedding)
        self.in_features, self.out_features = embedding.embedding_dim, embedding.num_embeddings
        self.bias = bias

    @property
    def weight(self) -> torch.Tensor:
        return self.embedding.weight

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        e = self.embedding
        logits = (hidden @ e.projection.transpose(0, 1)) @ e.factor.transpose(0, 1)
        return logits + self.bias if self.bias is not None else logits

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, rank={self.embedding.rank}, tied"


@dataclass
class Factorization:
    rank: int
    vocab: int
    width: int
    error: float  # ||W - A·B||_F / ||W||_F
    params_before: int
    params_after: int

    @property
    def params_saved(self) -> int:
        return self.params_before - self.params_after


def check_rank(rank: int, width: int, vocab: int) -> None:
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise GhostifyError(f"--rank {rank!r} must be a positive integer (e.g. 128, as in ALBERT)")
    if rank > min(width, vocab):
        raise GhostifyError(
            f"--rank {rank} exceeds the {vocab} x {width} embedding matrix's rank {min(width, vocab)}; "
            f"choose at most {min(width, vocab)} (ALBERT uses 128)"
        )


def factorize_embeddings(model: nn.Module, rank: int) -> Factorization:
    """Replace ``model``'s word embeddings (and its tied output layer) by rank-``rank`` factors
    from their truncated SVD, in place. A model factorised before is re-factorised from the
    product of its factors.

    Example:
        >>> from ghostify.testing import tiny_model
        >>> model = tiny_model("bert", "masked-lm")
        >>> result = factorize_embeddings(model, rank=8)
        >>> result.params_after == 99 * 8 + 8 * 32
        True
    """
    embedding = model.get_input_embeddings()
    weight = embedding.weight.detach()
    vocab, width = weight.shape
    check_rank(rank, width, vocab)
    decoder = _tied_decoder(model, embedding)
    before = vocab * width if not isinstance(embedding, FactorizedEmbedding) else embedding.rank * (vocab + width)

    matrix = weight.to(torch.float64)
    u, s, vh = torch.linalg.svd(matrix, full_matrices=False)
    root = s[:rank].sqrt()  # balanced split: A and B get the same scale
    a = u[:, :rank] * root
    b = root[:, None] * vh[:rank]
    padding_idx = getattr(embedding, "padding_idx", None)
    if padding_idx is not None and not bool(matrix[padding_idx].any()):
        a[padding_idx] = 0  # a zero padding row stays exactly zero
    error = float((s[rank:].square().sum() / s.square().sum().clamp_min(1e-300)).sqrt())

    new = FactorizedEmbedding(vocab, rank, width, padding_idx, device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        new.factor.copy_(a)
        new.projection.copy_(b)
    requires_grad = _requires_grad(embedding)
    new.requires_grad_(requires_grad)
    _install(model, embedding, new, decoder)
    return Factorization(rank=rank, vocab=vocab, width=width, error=error, params_before=before,
                         params_after=rank * (vocab + width))


def embeddings_record(result: Factorization, model: nn.Module) -> dict[str, Any]:
    """What ``record.embeddings`` stores."""
    embedding = model.get_input_embeddings()
    return {
        "format": EMBEDDINGS_RECORD_FORMAT,
        "rank": result.rank,
        "vocab": result.vocab,
        "width": result.width,
        "padding_idx": embedding.padding_idx,
        "tied_output": isinstance(model.get_output_embeddings(), FactorizedDecoder) if hasattr(model, "get_output_embeddings") else False,
        "error": result.error,
        "params_before": result.params_before,
        "params_after": result.params_after,
        "params_saved": result.params_saved,
    }


def restore_embeddings(model: nn.Module, record: Any) -> None:
    """Rebuild ``record.embeddings`` on a freshly built model, before its weights load strictly."""
    data = getattr(record, "embeddings", None)
    if not data:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
    if int(data.get("format", EMBEDDINGS_RECORD_FORMAT)) > EMBEDDINGS_RECORD_FORMAT:
        raise CheckpointError(f"{source} was written by a newer ghostify (embeddings record format {data['format']}); upgrade ghostify")
    embedding = model.get_input_embeddings()
    vocab, width = embedding.weight.shape
    try:
        rank = int(data["rank"])
    except (KeyError, TypeError, ValueError):
        raise CheckpointError(f"corrupt embeddings record in {source}: no rank; re-create the checkpoint") from None
    if not 1 <= rank <= min(vocab, width) or (data.get("vocab"), data.get("width")) != (vocab, width):
        raise CheckpointError(
            f"the embeddings record of {source} (rank {rank}, {data.get('vocab')} x {data.get('width')}) does not fit "
            f"the config's {vocab} x {width} embeddings; the checkpoint's config.json was edited or is corrupt"
        )
    decoder = _tied_decoder(model, embedding)
    weight = embedding.weight
    new = FactorizedEmbedding(vocab, rank, width, getattr(embedding, "padding_idx", None), device=weight.device,
                              dtype=weight.dtype)
    _install(model, embedding, new, decoder)


def _tied_decoder(model: nn.Module, embedding: nn.Module) -> nn.Module | None:
    """The output layer that shares the embedding matrix (transformers' tie), if there is one."""
    get = getattr(model, "get_output_embeddings", None)
    decoder = get() if get is not None else None
    if decoder is None:
        return None
    if isinstance(decoder, FactorizedDecoder):
        return decoder if decoder.embedding is embedding else None
    weight = getattr(decoder, "weight", None)
    return decoder if weight is not None and weight is embedding.weight else None


def _requires_grad(module: nn.Module) -> bool:
    return any(p.requires_grad for p in module.parameters())


def _install(model: nn.Module, old: nn.Module, new: FactorizedEmbedding, decoder: nn.Module | None) -> None:
    names = {id(m): n for n, m in model.named_modules()}
    in_name = names[id(old)]
    model.set_input_embeddings(new)
    if decoder is None:
        return
    out_name = names[id(decoder)]
    model.set_output_embeddings(FactorizedDecoder(new, getattr(decoder, "bias", None)))
    _drop_weight_tie(model, f"{out_name}.weight", f"{in_name}.weight")


def _drop_weight_tie(model: nn.Module, target: str, source: str) -> None:
    """Remove ``target <- source`` from transformers' tied-weights mappings (the factors are shared
    by the decoder itself), keeping every other tie (the decoder bias)."""
    from transformers import PreTrainedModel  # deferred: transformers' modeling code takes seconds to import

    def keep(prefix: str, mapping: dict[str, str]) -> dict[str, str]:
        full = (lambda key: f"{prefix}.{key}") if prefix else (lambda key: key)
        return {k: v for k, v in mapping.items() if full(k) != target and full(v) != source}

    for prefix, module in model.named_modules():
        if isinstance(module, PreTrainedModel):
            if module._tied_weights_keys:
                module._tied_weights_keys = keep(prefix, dict(module._tied_weights_keys))
            if getattr(module, "all_tied_weights_keys", None):
                module.all_tied_weights_keys = keep(prefix, dict(module.all_tied_weights_keys))
