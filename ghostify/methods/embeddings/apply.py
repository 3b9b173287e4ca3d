"""Factorised embeddings: changing a model, and its record entry (see :mod:`ghostify.methods.embeddings`)."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ...architectures import get_adapter
from ..base import Context, Entry
from .modules import FactorizedDecoder, FactorizedEmbedding, _install, _requires_grad, _tied_decoder
from .settings import EMBEDDINGS_RECORD_FORMAT, FactorizeSettings, check_rank


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
    """What ``record.entry("embeddings")`` stores."""
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


# ----------------------------------------------------------------------------------------------
# the method's lifecycle (ghostify.methods.base.Method)
# ----------------------------------------------------------------------------------------------
def check(config: Any, record: Any, settings: FactorizeSettings) -> None:
    adapter = get_adapter(config)
    vocab, width = adapter.vocab_size(config), adapter.embedding_width(config)
    check_rank(settings.rank, width, vocab)
    previous = record.entry("embeddings") if record is not None else None  # re-factorising
    before = int(previous["params_after"]) if previous else vocab * width
    rank = settings.rank
    if rank * (vocab + width) >= before:
        warnings.warn(
            f"rank {rank} of the {vocab} x {width} embeddings saves nothing ({rank * (vocab + width):,} parameters "
            f"instead of {before:,}); choose a rank below {before // (vocab + width) + (before % (vocab + width) > 0)}",
            stacklevel=2,
        )


def apply(model: nn.Module, record: Any, settings: FactorizeSettings, context: Context) -> Entry:
    data = embeddings_record(factorize_embeddings(model, settings.rank), model)
    return Entry(format=data.pop("format"), data=data)
