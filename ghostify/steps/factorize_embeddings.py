"""``ghostify factorize-embeddings``: ALBERT's factorised word embeddings, from a truncated SVD."""

from __future__ import annotations

import os
import warnings

from ..architectures import get_adapter
from ..checkpoint import load_config, load_model, model_record, read_record, save_checkpoint
from ..files import check_output_dir
from ..methods.embeddings.apply import embeddings_record
from ..methods.embeddings.apply import factorize_embeddings as factorize
from ..methods.embeddings.settings import check_rank
from ..record import GhostifyRecord, history_entry


def factorize_embeddings(
    model: str | os.PathLike,
    output: str | os.PathLike,
    *,
    rank: int,
    overwrite: bool = False,
) -> GhostifyRecord:
    """Replace the V x H word embeddings of ``model`` by V x ``rank`` and ``rank`` x H factors
    (the best rank-``rank`` approximation, so the model keeps working) and write it to ``output``.

    The tied masked-LM decoder uses the same factors. ``record.embeddings`` holds the rank, the
    relative reconstruction error (Frobenius) and the parameters saved. A factorised model is
    re-factorised from the product of its factors.

    Example:
        >>> factorize_embeddings("bert-base-uncased", "out/bert-e128", rank=128)  # doctest: +SKIP
    """
    out = check_output_dir(output, overwrite=overwrite, inputs=(model,))
    config = load_config(model)
    adapter = get_adapter(config)
    vocab, width = adapter.vocab_size(config), adapter.embedding_width(config)
    check_rank(rank, width, vocab)
    existing = read_record(config)
    previous = existing.embeddings if existing is not None else None  # re-factorising
    before = int(previous["params_after"]) if previous else vocab * width
    if rank * (vocab + width) >= before:
        warnings.warn(
            f"rank {rank} of the {vocab} x {width} embeddings saves nothing ({rank * (vocab + width):,} parameters "
            f"instead of {before:,}); choose a rank below {before // (vocab + width) + (before % (vocab + width) > 0)}",
            stacklevel=2,
        )
    net = load_model(model)
    record = model_record(net)
    result = factorize(net, rank)
    record.embeddings = embeddings_record(result, net)
    record.history.append(history_entry("factorize-embeddings", {"model": str(model), "rank": rank}))
    save_checkpoint(net, out, record, tokenizer_source=model, overwrite=overwrite)
    return record
