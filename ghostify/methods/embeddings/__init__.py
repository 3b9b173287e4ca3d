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

from ..base import Method
from . import restore
from .apply import Factorization, embeddings_record, factorize_embeddings
from .describe import describe
from .modules import FactorizedDecoder, FactorizedEmbedding
from .restore import restore_embeddings
from .settings import check_rank

METHOD = Method(
    name="embeddings", record_key="embeddings", command="factorize-embeddings", noun="factorised embeddings",
    restore=restore.restore,
    describe=describe,
)

__all__ = [
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
