"""Factorised embeddings: the modules and structural edits (see :mod:`ghostify.methods.embeddings`)."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


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
