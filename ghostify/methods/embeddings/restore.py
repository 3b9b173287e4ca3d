"""Factorised embeddings: rebuilding the structure from the record before a strict weight load (see :mod:`ghostify.methods.embeddings`)."""

from __future__ import annotations

from typing import Any

from torch import nn

from ...architectures import ArchitectureAdapter
from ...errors import CheckpointError
from .modules import FactorizedEmbedding, _install, _tied_decoder


def restore_embeddings(model: nn.Module, record: Any) -> None:
    """Rebuild ``record.entry("embeddings")`` on a freshly built model, before its weights load strictly."""
    data = record.entry("embeddings")
    if not data:
        return
    source = getattr(model.config, "_name_or_path", "config.json")
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


def restore(model: nn.Module, adapter: ArchitectureAdapter, record: Any, source: str) -> None:
    """The registry's entry point (``Method.restore``): rebuild this method's recorded structure."""
    restore_embeddings(model, record)
