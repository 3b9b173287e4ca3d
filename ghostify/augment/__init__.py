"""TinyBERT-style data augmentation with a masked language model (Jiao et al., 2020, Sec. 3.2).

For every text, each *replaceable* word — a single word-piece of the MLM's tokenizer, alphabetic,
not a stop word, within the first ``max_length`` tokens — is masked in its own copy of the text and
the MLM proposes its ``top_k`` most likely whole-word replacements. As in TinyBERT's reference code
the masked copy is paired with the unmasked text (``[CLS] masked [SEP] original [SEP]``), so the
prediction is conditioned on the original word: candidates stay close in meaning, which is what
keeps the label valid. Every new example then replaces each replaceable word with probability
``p`` by a uniformly chosen candidate.

The parts can be tested without a model or a CLI:

- :mod:`.words`: the replaceable words of a text (:func:`find_words`; character spans from the
  tokenizer's own pre-tokenisation and offsets, so it works for WordPiece, BPE and SentencePiece);
- :mod:`.proposer`: batched MLM predictions for many masked copies at once (:class:`CandidateProposer`);
- :mod:`.sampling`: the seeded random replacement, a pure function (:func:`sample_variants`);
- :mod:`.step`: the ``ghostify augment`` command (:func:`augment`, also ``ghostify.steps.augment``),
  with its checks (:mod:`.inputs`), ``--label-with`` (:mod:`.teacher`) and the dataset it writes
  (:mod:`.output`).

Example:
    >>> import random
    >>> slots = [Slot(4, 9, "movie", ("film", "show"))]
    >>> sample_variants(("the movie",), (slots,), n=3, p=1.0, rng=random.Random(0))  # doctest: +SKIP
    [('the show',), ('the film',)]
"""

from __future__ import annotations

from .output import AUGMENTED_COLUMN, PROVENANCE_NAME
from .proposer import CandidateProposer, candidate_vocabulary
from .sampling import example_rng, match_case, replace_words, sample_variants
from .step import AugmentResult, augment
from .words import (
                    DEFAULT_PER_EXAMPLE,
                    STOP_WORDS,
                    TINYBERT_PER_EXAMPLE,
                    Slot,
                    Word,
                    default_per_example,
                    find_words,
                    is_stop_word,
                    truncate_to_pieces,
)

__all__ = [
                    "AUGMENTED_COLUMN",
                    "DEFAULT_PER_EXAMPLE",
                    "PROVENANCE_NAME",
                    "STOP_WORDS",
                    "TINYBERT_PER_EXAMPLE",
                    "AugmentResult",
                    "CandidateProposer",
                    "Slot",
                    "Word",
                    "augment",
                    "candidate_vocabulary",
                    "default_per_example",
                    "example_rng",
                    "find_words",
                    "is_stop_word",
                    "match_case",
                    "replace_words",
                    "sample_variants",
                    "truncate_to_pieces",
]
