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

from ...lazy import lazy_exports
from ..base import Method, lazy
from .describe import describe
from .settings import FactorizeSettings, check_rank

METHOD = Method(
    name="embeddings", tag="factorized-embeddings", command="factorize-embeddings", noun="factorised embeddings", settings=FactorizeSettings,
    check=lazy("ghostify.methods.embeddings.apply:check"),
    apply=lazy("ghostify.methods.embeddings.apply:apply"),
    restore=lazy("ghostify.methods.embeddings.restore:restore"),
    describe=describe,
    help="""Factorise the word embeddings into V x E and E x H matrices (ALBERT).

    The factors come from the truncated SVD of the V x H embedding matrix, its best rank-E
    approximation, so the model keeps working before any training; the relative reconstruction
    error (Frobenius) says how much changed. A tied masked-LM decoder computes its logits from the
    same factors. Recover the rest with `ghostify distill` (teacher: the input model).
    """,
    examples=(
        "ghostify factorize-embeddings bert-base-uncased -o out/bert-e128 --rank 128  (23.4M -> 4.0M embedding parameters)",
        "ghostify factorize-embeddings out/teacher -o out/factorized --rank 128, then ghostify distill --teacher out/teacher",
    ),
)

# the rest loads torch: imported on first use, so that the CLI reads .settings without it
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "apply": ("Factorization", "embeddings_record", "factorize_embeddings"),
        "modules": ("FactorizedDecoder", "FactorizedEmbedding"),
        "restore": ("restore_embeddings",),
    },
)

__all__ = [
    "FactorizeSettings",
    "Factorization",
    "FactorizedDecoder",
    "FactorizedEmbedding",
    "METHOD",
    "check_rank",
    "describe",
    "embeddings_record",
    "factorize_embeddings",
    "restore_embeddings",
]
